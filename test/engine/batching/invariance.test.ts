// Batch invariance at the KV cache's level (serve --batch-invariant): a sequence's logits are the
// same bits whatever run computes each of its positions. One sequence decoded greedily alone is
// the reference; the same tokens fed alone or in a batch of four (at another row), beside a long
// sequence (a larger pool class), as prompt chunks of one and three tokens, verified three at a
// time in a batch of two, after a prefix restore, and recomputed as one chunk must give the
// reference's logits exactly, on fp32, fp16, q4 and q4f16 graphs and both bindings. Without the
// option the mechanisms the issue measured are there: a 4-bit decode step alone and in a batch
// differ, and so do a verification run's positions and single steps even in fp32.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { FusedKvBackend } from "../../../src/engine/batching/fused-kv.ts";
import type { Sequence } from "../../../src/engine/batching/kv.ts";
import { openDecoder } from "../../../src/engine/decoders.ts";
import type { OrtBinding } from "../../../src/engine/ort-binding.ts";
import type { Decoder } from "../../../src/engine/runtime/decoder.ts";
import type { HfImportDType } from "../../../src/modelkit/index.ts";
import { importedSyntheticModel, syntheticModel } from "../../helpers/models.ts";
import { tempDir } from "../../helpers/paths.ts";

const STEPS = 40;
const PROMPT = [5, 9, 22, 40, 41, 7, 3, 17];
const OTHERS = [[2, 8, 30, 31], [4, 4, 4, 12, 13, 14, 15, 16, 17, 18, 19, 20], [9, 9]];
const LONG = Array.from({ length: 300 }, (_, i) => ((i * 7) % 50) + 3);

type Kind = "fp32" | "fp16" | "q4" | "q4f16";
const KINDS: Kind[] = ["fp32", "fp16", "q4", "q4f16"];
const SPEC = { preset: "tiny-bytes" as const, seed: 13 };

let root: ReturnType<typeof tempDir>;
const dirs = new Map<Kind, string>();
let standardDir = "";

beforeAll(async () => {
  root = tempDir("sluice-invariance-");
  dirs.set("fp32", await syntheticModel(root.path, "fp32", { ...SPEC, id: "inv/fp32", variant: "fused" }));
  dirs.set("fp16", await syntheticModel(root.path, "fp16", { ...SPEC, id: "inv/fp16", variant: "fused", dtype: "float16" }));
  for (const dtype of ["q4", "q4f16"] as HfImportDType[]) dirs.set(dtype as Kind, await importedSyntheticModel(root.path, dtype, { ...SPEC, id: `inv/${dtype}` }, dtype));
  standardDir = await syntheticModel(root.path, "standard", { ...SPEC, id: "inv/standard", variant: "standard" });
}, 180_000);

afterAll(() => root?.remove());

const argmax = (l: Float32Array) => {
  let best = 0;
  for (let i = 1; i < l.length; i++) if (l[i]! > l[best]!) best = i;
  return best;
};

/**
 * Per scenario, the first step whose logits are not the reference's bits (-1: none). `prompt`
 * and `steps`: the short prompt and 40 steps, or 180 positions and 30 steps, whose chunks,
 * verification runs and decode steps cross the attention's blocks of 64 positions.
 */
async function scenarios(decoder: Decoder, prompt = PROMPT, STEPS = 40): Promise<{ reference: Float32Array[]; firstDiffering: Record<string, number> }> {
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
  const firstDiffering: Record<string, number> = {};
  const compare = (name: string, got: Float32Array[]) => {
    firstDiffering[name] = got.findIndex((g, i) => g.length !== reference[i]!.length || g.some((v, j) => v !== reference[i]![j]));
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
    // Beside a sequence of 300 positions: a pool of a larger class, a wider attention.
    const b = backend();
    const long = b.open(1024);
    await b.prefill(long, LONG);
    const s = b.open(1024);
    const got = [(await b.prefill(s, PROMPT)).slice()];
    let other = 5;
    for (let k = 0; k < STEPS; k++) {
      const out = await b.decode([long, s], [other, tokens[k]!]);
      other = argmax(out[0]!);
      got.push(out[1]!.slice());
    }
    compare("beside a long sequence", got);
  }
  for (const chunk of [1, 3, 70]) {
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
  return { reference, firstDiffering };
}

const NONE = (names: Record<string, number>) => Object.fromEntries(Object.keys(names).map((k) => [k, -1]));

describe.each(KINDS)("%s, batch-invariant", (kind) => {
  const references = new Map<OrtBinding, Float32Array[]>();
  for (const binding of ["capi", "node"] as const) {
    test(`${binding}: every run gives the reference's logits, bit for bit`, async () => {
      const decoder = await openDecoder(dirs.get(kind)!, { providers: ["cpu"], threads: 1, binding, batchInvariant: true });
      try {
        expect(decoder.invariance).toEqual({ pairRows: kind === "q4" || kind === "q4f16" });
        const { reference, firstDiffering } = await scenarios(decoder);
        expect(firstDiffering).toEqual(NONE(firstDiffering));
        references.set(binding, reference);
        const across = await scenarios(decoder, LONG.slice(0, 180), 30);
        expect(across.firstDiffering).toEqual(NONE(across.firstDiffering));
      } finally {
        await decoder.release();
      }
    }, 120_000);
  }

  test("both bindings give the same bits", () => {
    const [capi, node] = [references.get("capi"), references.get("node")];
    expect(capi && node).toBeTruthy();
    expect(node!.map((l) => Array.from(l))).toEqual(capi!.map((l) => Array.from(l)));
  });
});

describe("what --batch-invariant changes", () => {
  test("without it, the mechanisms are there: a lone 4-bit step differs from the same step in a batch; fp32 verification from single steps", async () => {
    for (const kind of ["q4", "fp32"] as const) {
      const decoder = await openDecoder(dirs.get(kind)!, { providers: ["cpu"], threads: 1, binding: "capi" });
      try {
        expect(decoder.invariance).toBeNull();
        const { firstDiffering } = await scenarios(decoder);
        if (kind === "q4") expect(firstDiffering["row 2 of a batch of four"]).toBeGreaterThanOrEqual(0);
        expect(firstDiffering["verified three at a time in a batch of two"]).toBeGreaterThanOrEqual(0);
      } finally {
        await decoder.release();
      }
    }
  }, 120_000);

  test("the canonical attention computes the model's attention: logits within float rounding of the split attention's, the same greedy tokens", async () => {
    for (const kind of KINDS) {
      const run = async (batchInvariant: boolean) => {
        const decoder = await openDecoder(dirs.get(kind)!, { providers: ["cpu"], threads: 1, binding: "capi", batchInvariant });
        try {
          const b = new FusedKvBackend(decoder, 64 * 2 ** 20);
          const s = b.open(512);
          const out = [(await b.prefill(s, LONG.slice(0, 100))).slice()];
          for (let k = 0; k < 20; k++) out.push((await b.decode([s], [argmax(out.at(-1)!)]))[0]!.slice());
          return out;
        } finally {
          await decoder.release();
        }
      };
      const [plain, invariant] = [await run(false), await run(true)];
      // q4 rounds activations to int8 per block: a last-bit difference may move one code.
      const tolerance = kind === "fp32" ? 1e-4 : kind === "fp16" ? 1e-2 : 0.05;
      plain.forEach((p, i) => {
        const scale = Math.max(...p.map(Math.abs));
        const worst = Math.max(...p.map((v, j) => Math.abs(v - invariant[i]![j]!)));
        expect({ kind, step: i, relative: worst / scale < tolerance }).toEqual({ kind, step: i, relative: true });
      });
      expect(invariant.map(argmax)).toEqual(plain.map(argmax));
    }
  }, 120_000);

  test("a standard-ops graph is loaded as it is, and says the option does not apply", async () => {
    const decoder = await openDecoder(standardDir, { providers: ["cpu"], threads: 1, binding: "capi", batchInvariant: true });
    try {
      expect(decoder.invariance).toBeNull();
      expect(decoder.notes.join("\n")).toContain("--batch-invariant does not apply to this graph");
    } finally {
      await decoder.release();
    }
  });

  test("capacities are multiples of the attention's block, past a context that is not: a sequence fills the whole context", async () => {
    const dir = await syntheticModel(root.path, "context-1000", { ...SPEC, id: "inv/context-1000", variant: "fused", shape: { contextLength: 1000 } });
    const decoder = await openDecoder(dir, { providers: ["cpu"], threads: 1, binding: "capi", batchInvariant: true });
    try {
      const b = new FusedKvBackend(decoder, 64 * 2 ** 20);
      for (const needed of [1, 65, 100, 999]) expect(b.capacityFor(needed) % 64).toBe(0);
      expect(b.capacityFor(1000)).toBe(1024);
      const s = b.open(b.capacityFor(1000));
      let logits = await b.prefill(s, Array.from({ length: 990 }, (_, i) => ((i * 11) % 50) + 3));
      for (let k = 0; k < 10; k++) logits = (await b.decode([s], [argmax(logits)]))[0]!;
      expect(s.tokens.length).toBe(1000);
      expect(logits.every(Number.isFinite)).toBe(true);
    } finally {
      await decoder.release();
    }
  }, 60_000);
});
