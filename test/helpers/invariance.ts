// The KV cache's runs that batch invariance concerns, driven directly on a decoder: shared by the
// invariance tests (test/engine/batching/invariance.test.ts) and the mechanism benchmark
// (bench/batch-invariance.ts), which tabulates how many steps of each differ without the option.
import { FusedKvBackend } from "../../src/engine/batching/fused-kv.ts";
import type { Sequence } from "../../src/engine/batching/kv.ts";
import type { Decoder } from "../../src/engine/runtime/decoder.ts";

const PROMPT = [5, 9, 22, 40, 41, 7, 3, 17];
const OTHERS = [[2, 8, 30, 31], [4, 4, 4, 12, 13, 14, 15, 16, 17, 18, 19, 20], [9, 9]];
/** The source of the long neighbour and of the 180-position prompt. */
export const LONG = Array.from({ length: 300 }, (_, i) => ((i * 7) % 50) + 3);

export const argmax = (l: Float32Array) => {
  let best = 0;
  for (let i = 1; i < l.length; i++) if (l[i]! > l[best]!) best = i;
  return best;
};

/** How a scenario's logits compare with the reference's, step by step. */
export interface ScenarioResult {
  /** The first step whose logits are not the reference's bits (-1: none). */
  first: number;
  /** Steps whose logits are not the reference's bits, of `steps`. */
  differing: number;
  steps: number;
}

/**
 * One sequence decoded greedily alone (the prompt in one chunk, then a token at a time) is the
 * reference; each scenario feeds the same tokens through other runs: at row 2 of a batch of four;
 * beside a 150-position sequence, in its pool (of a larger class); as prompt chunks of 1, 3 and 70
 * tokens (those shorter than the prompt); through the general graph one position a run; verified
 * three at a time beside another row; after a prefix-cache restore; recomputed as one chunk (a
 * preempted sequence resumed). `prompt` and `STEPS`: a short prompt and 40 steps, or 180
 * positions and 30 steps, whose chunks, verification runs and decode steps cross the canonical
 * attention's blocks of 64 positions.
 */
export async function invarianceScenarios(decoder: Decoder, prompt = PROMPT, STEPS = 40): Promise<{ reference: Float32Array[]; results: Record<string, ScenarioResult> }> {
  const PROMPT = prompt;
  const backend = () => new FusedKvBackend(decoder, 64 * 2 ** 20);
  // The reference: the prompt in one chunk, then one token at a time, alone.
  const ref = backend();
  const seq = ref.open(512);
  const reference = [(await ref.prefill(seq, PROMPT)).slice()];
  const tokens: number[] = [];
  for (let k = 0; k < STEPS; k++) {
    tokens.push(argmax(reference.at(-1)!));
    reference.push((await ref.decode([seq], [tokens[k]!]))[0]!.slice());
  }
  const results: Record<string, ScenarioResult> = {};
  const compare = (name: string, got: Float32Array[]) => {
    const differs = got.map((g, i) => g.length !== reference[i]!.length || g.some((v, j) => v !== reference[i]![j]));
    results[name] = { first: differs.indexOf(true), differing: differs.filter(Boolean).length, steps: got.length };
  };

  {
    // At row 2 of four, the others decoding their own greedy tokens.
    const b = backend();
    const seqs: Sequence[] = [];
    const last: Float32Array[] = [];
    for (const p of [OTHERS[0]!, OTHERS[1]!, PROMPT, OTHERS[2]!]) {
      const s = b.open(512);
      seqs.push(s);
      last.push((await b.prefill(s, p)).slice());
    }
    const got = [last[2]!];
    for (let k = 0; k < STEPS; k++) {
      const out = await b.decode(seqs, seqs.map((_, i) => (i === 2 ? tokens[k]! : argmax(last[i]!))));
      out.forEach((o, i) => (last[i] = o.slice()));
      got.push(last[2]!);
    }
    compare("row 2 of a batch of four", got);
  }
  {
    // Beside a sequence of 150 positions, which it joins in one pool of that larger class.
    const b = backend();
    const long = b.open(512);
    await b.prefill(long, LONG.slice(0, 150));
    const s = b.open(512);
    const got = [(await b.prefill(s, PROMPT)).slice()];
    let other = 5;
    for (let k = 0; k < STEPS; k++) {
      const out = await b.decode([long, s], [other, tokens[k]!]);
      other = argmax(out[0]!);
      got.push(out[1]!.slice());
    }
    compare("beside a 150-position sequence, in its pool", got);
  }
  for (const chunk of [1, 3, 70].filter((c) => c < PROMPT.length)) {
    const b = backend();
    const s = b.open(512);
    let last!: Float32Array;
    for (let i = 0; i < PROMPT.length; i += chunk) last = (await b.prefill(s, PROMPT.slice(i, i + chunk))).slice();
    const got = [last];
    for (let k = 0; k < STEPS; k++) got.push((await b.decode([s], [tokens[k]!]))[0]!.slice());
    compare(`prompt in chunks of ${chunk}`, got);
  }
  {
    // One position a run of the general graph (a large model's decode steps), as a verification of no draft.
    const b = backend();
    const s = b.open(512);
    const got = [(await b.prefill(s, PROMPT)).slice()];
    for (let k = 0; k < STEPS; k++) got.push((await b.verify([s], [[tokens[k]!]]))[0]![0]!.slice());
    compare("the general graph, one position a run", got);
  }
  {
    // Three positions a run, beside another row verifying a shorter draft.
    const b = backend();
    const s = b.open(512);
    const other = b.open(512);
    const got = [(await b.prefill(s, PROMPT)).slice()];
    await b.prefill(other, OTHERS[0]!);
    for (let k = 0; k + 3 <= STEPS; k += 3) {
      const out = await b.verify([other, s], [[3, 4], tokens.slice(k, k + 3)]);
      got.push(...out[1]!.map((o) => o.slice()));
    }
    compare("verified three at a time in a batch of two", got);
  }
  {
    // A prefix-cache restore of the first 10 steps' positions, the last fed again, as a hit is.
    const length = PROMPT.length + 10;
    const snapshot = ref.snapshot(seq, length);
    const b = backend();
    const s = b.open(512);
    b.restore(s, snapshot, length - 1);
    const got = reference.slice(0, 10);
    got.push((await b.prefill(s, [snapshot.tokens[length - 1]!])).slice());
    for (let k = 10; k < STEPS; k++) got.push((await b.decode([s], [tokens[k]!]))[0]!.slice());
    compare("restored from a snapshot", got);
    // Preempted and resumed: the prompt and the 10 tokens recomputed as one chunk.
    const c = backend();
    const r = c.open(512);
    const recomputed = reference.slice(0, 10);
    recomputed.push((await c.prefill(r, snapshot.tokens)).slice());
    for (let k = 10; k < STEPS; k++) recomputed.push((await c.decode([r], [tokens[k]!]))[0]!.slice());
    compare("recomputed as one chunk", recomputed);
  }
  return { reference, results };
}

