// Scripted decoder weights: a Llama graph whose next-token logits follow a given token script,
// so that a test can say exactly what a "model" answers (a thinking block, then an answer) while
// the real tokenizer, chat template, graph and engine run unchanged.
//
// The model is a bigram table. Every layer adds nothing (its output projections are zero), so the
// last hidden state is the embedding of the current token: one-hot on the token's "slot" (one
// dimension per scripted token, dimension 0 for every other token). The untied output projection
// maps slot s to a large logit on the token the script puts after it. Hence the script is a set of
// chains "a is followed by b"; a token may appear in several chains only with the same successor,
// and a chain that returns to an earlier token loops.
//
// A token may instead be followed by a distribution: its slot's logits are given (relative values,
// placed far above every other token's), so a test knows the exact probabilities it samples from.
//
// Every slot (the fallback one included) also carries a fixed preference order at lower logits
// (by default end of turn first, then `"`, `}`, `]`, `0`, `{`, `[`, `:`, `,`): where a grammar masks the
// scripted successor, a constrained answer closes its strings, objects and arrays as soon as it
// may, and ends.

import type { LlamaConfig } from "./config.ts";
import type { LlamaLayerWeights, LlamaWeights } from "./weights.ts";

export interface TokenScript {
  /** Chains of token ids: each id is followed by the next one of its chain. */
  chains: number[][];
  /** Preferred where the script says nothing (or its successor is not allowed), best first. */
  fallback: number[];
  /** Tokens followed by a distribution: [successor, logit] pairs (softmax over them alone). */
  distributions?: { after: number; next: [number, number][] }[];
}

/**
 * Logit of a scripted successor and of the first fallback preference, after the final norm. The
 * ~150k tokens at logit 0 weigh e^12 together, so the successor wins by e^-30 even at temperature 2.
 */
const SCRIPTED = 60;
const PREFERRED = 30;
/** Where a distribution's relative logits are placed: far above the fallback preferences. */
const DISTRIBUTED = 60;

/** The successor of each scripted token; throws where the script contradicts itself. */
export function scriptTransitions(script: TokenScript): Map<number, number> {
  const next = new Map<number, number>();
  for (const chain of script.chains) {
    for (let i = 0; i + 1 < chain.length; i++) {
      const [a, b] = [chain[i]!, chain[i + 1]!];
      const prev = next.get(a);
      if (prev !== undefined && prev !== b) {
        throw new Error(`the script is a bigram table: token ${a} cannot be followed by both ${prev} and ${b}`);
      }
      next.set(a, b);
    }
  }
  return next;
}

/** Hidden dimensions a script needs: one per token that has a successor or a distribution, plus the fallback's. */
export function scriptDimensions(script: TokenScript): number {
  return scriptTransitions(script).size + (script.distributions?.length ?? 0) + 1;
}

export function scriptedWeights(c: LlamaConfig, script: TokenScript): LlamaWeights {
  if (c.tieWordEmbeddings) throw new Error("a scripted model needs untied embeddings");
  const H = c.hiddenSize;
  const V = c.vocabSize;
  const next = scriptTransitions(script);
  if (next.size + 1 > H) throw new Error(`the script has ${next.size} scripted tokens; hiddenSize must be at least ${next.size + 1}`);
  for (const id of [...next.keys(), ...next.values(), ...script.fallback]) {
    if (!Number.isInteger(id) || id < 0 || id >= V) throw new Error(`script token ${id} is outside the vocabulary of ${V}`);
  }
  const slot = new Map<number, number>();
  for (const id of next.keys()) slot.set(id, slot.size + 1);
  for (const d of script.distributions ?? []) {
    if (slot.has(d.after)) throw new Error(`token ${d.after} has both a scripted successor and a distribution (or two distributions)`);
    for (const [id] of d.next) if (!Number.isInteger(id) || id < 0 || id >= V) throw new Error(`distribution token ${id} is outside the vocabulary of ${V}`);
    slot.set(d.after, slot.size + 1);
  }
  if (slot.size + 1 > H) throw new Error(`the script needs ${slot.size + 1} hidden dimensions; hiddenSize is ${H}`);

  const embed = new Float32Array(V * H);
  for (let t = 0; t < V; t++) embed[t * H + (slot.get(t) ?? 0)] = 1;
  // lmHead is [hidden, vocab]: row s holds slot s's logits (divided by the norm's gain sqrt(H)).
  const gain = Math.sqrt(H);
  const lmHead = new Float32Array(H * V);
  for (let s = 0; s < H; s++) {
    script.fallback.forEach((id, rank) => (lmHead[s * V + id] = (PREFERRED - rank * 2) / gain));
  }
  for (const [from, to] of next) lmHead[slot.get(from)! * V + to] = SCRIPTED / gain;
  for (const d of script.distributions ?? []) {
    for (const [id, logit] of d.next) lmHead[slot.get(d.after)! * V + id] = (DISTRIBUTED + logit) / gain;
  }

  const qDim = c.numHeads * c.headDim;
  const kvDim = c.numKvHeads * c.headDim;
  const I = c.intermediateSize;
  const ones = (n: number) => new Float32Array(n).fill(1);
  const layers: LlamaLayerWeights[] = [];
  for (let i = 0; i < c.numLayers; i++) {
    layers.push({
      inputNorm: ones(H),
      q: new Float32Array(H * qDim),
      k: new Float32Array(H * kvDim),
      v: new Float32Array(H * kvDim),
      // Zero output projections: attention and MLP leave the residual stream (the embedding) as it is.
      o: new Float32Array(qDim * H),
      qNorm: c.qkNorm ? ones(c.headDim) : undefined,
      kNorm: c.qkNorm ? ones(c.headDim) : undefined,
      postNorm: ones(H),
      gate: new Float32Array(H * I),
      up: new Float32Array(H * I),
      down: new Float32Array(I * H),
    });
  }
  return { embed, layers, finalNorm: ones(H), lmHead };
}
