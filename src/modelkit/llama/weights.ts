// Decoder weights in MatMul layout: every projection is stored [in, out] (y = x W), i.e. the
// transpose of torch's nn.Linear.weight. Everything is float32 here; the graph converts.

import type { Q4Matrix } from "../quant/q4.ts";
import type { Llama3RopeScaling, LlamaConfig } from "./config.ts";

/** The projections of a layer. */
export type LlamaMatrixKey = "q" | "k" | "v" | "o" | "gate" | "up" | "down";

export interface LlamaLayerWeights {
  inputNorm: Float32Array; // [hidden]
  q: Float32Array; // [hidden, heads*headDim]
  k: Float32Array; // [hidden, kvHeads*headDim]
  v: Float32Array; // [hidden, kvHeads*headDim]
  o: Float32Array; // [heads*headDim, hidden]
  qNorm?: Float32Array; // [headDim]
  kNorm?: Float32Array; // [headDim]
  postNorm: Float32Array; // [hidden]
  gate: Float32Array; // [hidden, intermediate]
  up: Float32Array; // [hidden, intermediate]
  down: Float32Array; // [intermediate, hidden]
  qBias?: Float32Array; // [heads*headDim]
  kBias?: Float32Array; // [kvHeads*headDim]
  vBias?: Float32Array; // [kvHeads*headDim]
  oBias?: Float32Array; // [hidden]
  /**
   * Projections that arrive already in MatMulNBits' 4-bit blocks (a GGUF file's Q4_0, Q4_1 and
   * Q4_K tensors), in the same [in, out] orientation: a graph with 4-bit weights takes these
   * instead of quantising the float field again; any other graph reads the float field.
   */
  q4?: Partial<Record<LlamaMatrixKey, Q4Matrix>>;
}

export interface LlamaWeights {
  embed: Float32Array; // [vocab, hidden]
  layers: LlamaLayerWeights[];
  finalNorm: Float32Array; // [hidden]
  /** [hidden, vocab]; absent when the embedding is tied. */
  lmHead?: Float32Array;
}

/**
 * The same weights handed out a part at a time, so a graph can be built from a checkpoint that
 * does not fit in memory: each part is read when the graph needs it and may be dropped after.
 */
export interface LlamaWeightSource {
  /**
   * The parts' sizes were verified already (a checkpoint's header, checked up front): a layer's
   * fields may then be read only when the graph takes them, one matrix at a time.
   */
  readonly checked?: boolean;
  embed(): Float32Array;
  layer(i: number): LlamaLayerWeights;
  finalNorm(): Float32Array;
  /** [hidden, vocab]; undefined when the embedding is tied. */
  lmHead(): Float32Array | undefined;
  /**
   * Sources that read a part at a time (a checkpoint on disk, its sizes checked): rows
   * [start, start + count) of the embedding [vocab, hidden], and of an untied output head in
   * nn.Linear's layout [vocab, hidden]. The graph then writes these tables, a model's largest
   * tensors, a block of rows at a time (with an external data file).
   */
  embedRows?(start: number, count: number): Float32Array;
  lmHeadRows?(start: number, count: number): Float32Array;
  /**
   * Rows of the embedding already in MatMulNBits' 4-bit blocks with integer zero points (n =
   * rows, k = hidden), or null where they are not (then embedRows is read and quantised).
   */
  embedQ4Rows?(start: number, count: number): Q4Matrix | null;
}

/** A source over weights that are all in memory. */
export function inMemorySource(w: LlamaWeights): LlamaWeightSource {
  return { embed: () => w.embed, layer: (i) => w.layers[i]!, finalNorm: () => w.finalNorm, lmHead: () => w.lmHead };
}

const expect = (name: string, a: Float32Array | undefined, n: number) => {
  if (!a || a.length !== n) throw new Error(`weight ${name}: expected ${n} values, got ${a?.length ?? "none"}`);
};

export function checkLayer(c: LlamaConfig, l: LlamaLayerWeights, i: number): void {
  const H = c.hiddenSize;
  const q = c.numHeads * c.headDim;
  const kv = c.numKvHeads * c.headDim;
  const I = c.intermediateSize;
  expect(`layers.${i}.inputNorm`, l.inputNorm, H);
  expect(`layers.${i}.q`, l.q, H * q);
  expect(`layers.${i}.k`, l.k, H * kv);
  expect(`layers.${i}.v`, l.v, H * kv);
  expect(`layers.${i}.o`, l.o, q * H);
  expect(`layers.${i}.postNorm`, l.postNorm, H);
  expect(`layers.${i}.gate`, l.gate, H * I);
  expect(`layers.${i}.up`, l.up, H * I);
  expect(`layers.${i}.down`, l.down, I * H);
  if (c.qkNorm) {
    expect(`layers.${i}.qNorm`, l.qNorm, c.headDim);
    expect(`layers.${i}.kNorm`, l.kNorm, c.headDim);
  }
  if (c.qkvBias) {
    expect(`layers.${i}.qBias`, l.qBias, q);
    expect(`layers.${i}.kBias`, l.kBias, kv);
    expect(`layers.${i}.vBias`, l.vBias, kv);
  }
  if (c.oBias) expect(`layers.${i}.oBias`, l.oBias, H);
}

export function checkEmbed(c: LlamaConfig, embed: Float32Array): void {
  expect("embed", embed, c.vocabSize * c.hiddenSize);
}

export function checkFinalNorm(c: LlamaConfig, finalNorm: Float32Array): void {
  expect("finalNorm", finalNorm, c.hiddenSize);
}

/** The untied output head, checked; throws when it is missing or the wrong size. */
export function checkLmHead(c: LlamaConfig, lmHead: Float32Array | undefined): Float32Array {
  expect("lmHead", lmHead, c.hiddenSize * c.vocabSize);
  return lmHead!;
}

export function checkWeights(c: LlamaConfig, w: LlamaWeights): void {
  checkEmbed(c, w.embed);
  checkFinalNorm(c, w.finalNorm);
  if (!c.tieWordEmbeddings) checkLmHead(c, w.lmHead);
  if (w.layers.length !== c.numLayers) throw new Error(`expected ${c.numLayers} layers, got ${w.layers.length}`);
  w.layers.forEach((l, i) => checkLayer(c, l, i));
}

/** The adjacent-pair row that becomes row j of a head in the rotate-half order. */
export function halfRotarySource(j: number, headDim: number): number {
  const half = headDim / 2;
  return j < half ? 2 * j : 2 * (j - half) + 1;
}

/**
 * llama2.c (and llama.cpp's `llama` architecture) rotates adjacent pairs (2i, 2i+1) of each head; transformers rotates halves (i, i+d/2).
 * Reordering the output rows of wq and wk within each head turns one into the other (the q.k dot
 * product is unchanged by a shared permutation), as transformers' conversion script does.
 */
export function permuteForHalfRotary(w: Float32Array, heads: number, headDim: number, inDim: number): Float32Array {
  const out = new Float32Array(w.length);
  for (let h = 0; h < heads; h++) {
    for (let j = 0; j < headDim; j++) {
      const src = halfRotarySource(j, headDim);
      out.set(w.subarray((h * headDim + src) * inDim, (h * headDim + src + 1) * inDim), (h * headDim + j) * inDim);
    }
  }
  return out;
}

/** Transposes a row-major [rows, cols] matrix. */
export function transpose(m: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(m.length);
  for (let r = 0; r < rows; r++) {
    const base = r * cols;
    for (let c = 0; c < cols; c++) out[c * rows + r] = m[base + c];
  }
  return out;
}

/**
 * Rotary inverse frequencies theta^(-2i/d), computed in float32 as transformers does, with Llama
 * 3.1's scaling when given (transformers' _compute_llama3_parameters).
 */
export function inverseFrequencies(headDim: number, theta: number, scaling?: Llama3RopeScaling | null, factors?: number[]): Float32Array {
  const half = headDim / 2;
  const out = new Float32Array(half);
  for (let i = 0; i < half; i++) out[i] = 1 / theta ** ((2 * i) / headDim);
  if (factors) for (let i = 0; i < half; i++) out[i] = out[i]! / factors[i]!;
  if (!scaling) return out;
  const { factor, lowFreqFactor: low, highFreqFactor: high, originalMaxPositionEmbeddings: oldLen } = scaling;
  const lowWavelen = oldLen / low;
  const highWavelen = oldLen / high;
  for (let i = 0; i < half; i++) {
    const f = out[i]!;
    const wavelen = (2 * Math.PI) / f;
    if (wavelen < highWavelen) continue;
    if (wavelen > lowWavelen) out[i] = f / factor;
    else {
      const smooth = (oldLen / wavelen - low) / (high - low);
      out[i] = ((1 - smooth) * f) / factor + smooth * f;
    }
  }
  return out;
}

/** cos/sin tables [maxPos, headDim/2] for the fused attention's rotary caches. */
export function rotaryCaches(headDim: number, theta: number, maxPos: number, scaling?: Llama3RopeScaling | null, factors?: number[]): { cos: Float32Array; sin: Float32Array } {
  const inv = inverseFrequencies(headDim, theta, scaling, factors);
  const half = headDim / 2;
  const cos = new Float32Array(maxPos * half);
  const sin = new Float32Array(maxPos * half);
  for (let p = 0; p < maxPos; p++) {
    for (let i = 0; i < half; i++) {
      // The angle is rounded to float32 first so the table matches the standard graph's Mul.
      const a = Math.fround(p * inv[i]);
      cos[p * half + i] = Math.cos(a);
      sin[p * half + i] = Math.sin(a);
    }
  }
  return { cos, sin };
}
