// A minimal greedy decoding loop over the decoder contract, for tests only (the real engine
// lives in src/engine). Supports batches with left padding and the fused graph's shared buffer.

import * as ort from "onnxruntime-node";
import { fromHalfBits, toHalfBits } from "../../src/modelkit/onnx/dtype.ts";

export interface DecoderShape {
  numLayers: number;
  numKvHeads: number;
  headDim: number;
  vocabSize: number;
}

export interface GreedyOptions {
  steps: number;
  dtype?: "float32" | "float16";
  /** Token ids that end a row (not included in its output). */
  stopIds?: number[];
  padId?: number;
  /**
   * Fused graph only: feed a past buffer of this many positions that is never trimmed, reading
   * the valid length from attention_mask (GroupQueryAttention's shared-buffer mode).
   */
  sharedBuffer?: number;
  /**
   * "left" (default): the standard graph's HF convention. "right": the fused graph's convention
   * (GroupQueryAttention keeps each row's tokens at [0, length) of the cache and finds the length
   * from attention_mask's sum), so each row's ones are packed to the left of its mask.
   */
  padSide?: "left" | "right";
}

/**
 * onnxruntime-common turns float16 data into a Float16Array when the runtime has one (Bun does),
 * and onnxruntime-node's native side then sees zero bytes ("not enough space"). Keeping the
 * Uint16Array bits as the tensor's storage avoids that.
 */
export function float16Tensor(bits: Uint16Array, dims: number[]): ort.Tensor {
  const t = new ort.Tensor("float16", bits, dims);
  (t as unknown as { cpuData: Uint16Array }).cpuData = bits;
  return t;
}

function emptyCache(batch: number, s: DecoderShape, len: number, dtype: "float32" | "float16"): ort.Tensor {
  const n = batch * s.numKvHeads * len * s.headDim;
  return dtype === "float16"
    ? float16Tensor(new Uint16Array(n), [batch, s.numKvHeads, len, s.headDim])
    : new ort.Tensor("float32", new Float32Array(n), [batch, s.numKvHeads, len, s.headDim]);
}

function logitAt(t: ort.Tensor, idx: number): number {
  const d = t.data as Float32Array | Uint16Array;
  // float16 arrives as Uint16Array bits, or as a native Float16Array where the runtime has one.
  return t.type === "float16" && d instanceof Uint16Array ? fromHalfBits(d[idx]) : (d[idx] as number);
}

export function argmaxRow(t: ort.Tensor, row: number, seqPos: number, seqLen: number, vocab: number): number {
  const base = (row * seqLen + seqPos) * vocab;
  let best = 0;
  let bestV = -Infinity;
  for (let v = 0; v < vocab; v++) {
    const x = logitAt(t, base + v);
    if (x > bestV) {
      bestV = x;
      best = v;
    }
  }
  return best;
}

/** A float16 output fed back as an input needs its bytes as Uint16Array (see float16Tensor). */
export function asFeedable(t: ort.Tensor): ort.Tensor {
  if (t.type !== "float16") return t;
  const d = t.data as unknown as ArrayBufferView;
  return float16Tensor(new Uint16Array(d.buffer, d.byteOffset, d.byteLength / 2), [...t.dims]);
}

/** Greedy continuation of each prompt, batched with padding. */
export async function greedy(session: ort.InferenceSession, shape: DecoderShape, prompts: number[][], opts: GreedyOptions): Promise<number[][]> {
  const dtype = opts.dtype ?? "float32";
  const right = opts.padSide === "right";
  const batch = prompts.length;
  const maxLen = Math.max(...prompts.map((p) => p.length));
  const pad = opts.padId ?? 0;
  const fill = (n: number, v: number) => new Array<number>(n).fill(v);
  const lengths = prompts.map((p) => p.length); // real tokens seen so far, per row
  let cur: number[][] = prompts.map((p) => (right ? [...p, ...fill(maxLen - p.length, pad)] : [...fill(maxLen - p.length, pad), ...p]));
  let total = maxLen;
  // Left padding keeps a growing mask row; right padding packs ones to the left.
  const leftMask: number[][] = prompts.map((p) => [...fill(maxLen - p.length, 0), ...fill(p.length, 1)]);
  const out: number[][] = prompts.map(() => []);
  const done = prompts.map(() => false);
  const cacheLen = opts.sharedBuffer ?? 0;
  let past: ort.Tensor[] = [];
  for (let i = 0; i < shape.numLayers * 2; i++) past.push(emptyCache(batch, shape, cacheLen, dtype));
  let first = true;
  for (let step = 0; step < opts.steps && !done.every(Boolean); step++) {
    const S = cur[0].length;
    const mask: number[] = [];
    const pos: number[] = [];
    for (let b = 0; b < batch; b++) {
      if (right) {
        mask.push(...fill(lengths[b], 1), ...fill(total - lengths[b], 0));
        for (let j = 0; j < S; j++) pos.push(first ? Math.min(j, lengths[b] - 1) : lengths[b] - 1);
      } else {
        mask.push(...leftMask[b]);
        const start = lengths[b] - (first ? prompts[b].length : 1);
        for (let j = 0; j < S; j++) pos.push(first ? Math.max(0, start + j - (maxLen - prompts[b].length)) : lengths[b] - 1);
      }
    }
    const feeds: Record<string, ort.Tensor> = {
      input_ids: new ort.Tensor("int64", BigInt64Array.from(cur.flat(), BigInt), [batch, S]),
      attention_mask: new ort.Tensor("int64", BigInt64Array.from(mask, BigInt), [batch, total]),
      position_ids: new ort.Tensor("int64", BigInt64Array.from(pos, BigInt), [batch, S]),
    };
    for (let i = 0; i < shape.numLayers; i++) {
      feeds[`past_key_values.${i}.key`] = past[2 * i];
      feeds[`past_key_values.${i}.value`] = past[2 * i + 1];
    }
    const r = await session.run(feeds);
    const next: number[][] = [];
    for (let b = 0; b < batch; b++) {
      const at = right && first ? lengths[b] - 1 : S - 1;
      const tok = argmaxRow(r.logits, b, at, S, shape.vocabSize);
      if (!done[b]) {
        if (opts.stopIds?.includes(tok)) done[b] = true;
        else out[b].push(tok);
      }
      next.push([tok]);
      lengths[b]++;
      leftMask[b].push(1);
    }
    total++;
    first = false;
    past = [];
    for (let i = 0; i < shape.numLayers; i++) past.push(asFeedable(r[`present.${i}.key`]), asFeedable(r[`present.${i}.value`]));
    if (opts.sharedBuffer !== undefined) {
      for (const p of past) if (p.dims[2] !== opts.sharedBuffer) throw new Error(`present length ${p.dims[2]} != shared buffer ${opts.sharedBuffer}`);
    }
    cur = next;
  }
  return out;
}

export { toHalfBits };
