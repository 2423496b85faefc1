// Reads a llama2.c "legacy" (version 0) checkpoint into decoder weights in the HF convention.

import { readFileSync } from "node:fs";
import type { LlamaLayerWeights, LlamaWeights } from "../llama/weights.ts";
import { permuteForHalfRotary, transpose } from "../llama/weights.ts";

export interface Llama2cHeader {
  dim: number;
  hiddenDim: number;
  nLayers: number;
  nHeads: number;
  nKvHeads: number;
  vocabSize: number;
  seqLen: number;
  /** The classifier is the embedding table (vocab_size was positive in the file). */
  sharedClassifier: boolean;
}

export interface Llama2cCheckpoint {
  header: Llama2cHeader;
  weights: LlamaWeights;
}

export function readLlama2cCheckpoint(path: string): Llama2cCheckpoint {
  const buf = readFileSync(path);
  if (buf.byteLength < 28) throw new Error(`${path}: too short for a llama2.c checkpoint`);
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  const h = Array.from({ length: 7 }, (_, i) => view.getInt32(i * 4, true));
  const [dim, hiddenDim, nLayers, nHeads, nKvHeads, rawVocab, seqLen] = h;
  const header: Llama2cHeader = { dim, hiddenDim, nLayers, nHeads, nKvHeads, vocabSize: Math.abs(rawVocab), seqLen, sharedClassifier: rawVocab > 0 };
  if ([dim, hiddenDim, nLayers, nHeads, nKvHeads, seqLen].some((x) => x <= 0) || dim % nHeads !== 0 || nHeads % nKvHeads !== 0) {
    throw new Error(`${path}: implausible llama2.c header ${h.join(",")}`);
  }
  const headDim = dim / nHeads;
  const kvDim = (dim * nKvHeads) / nHeads;
  const V = header.vocabSize;
  // Copy once into an aligned Float32Array (the file offset after the header is 28 bytes).
  const floats = new Float32Array(buf.buffer.slice(buf.byteOffset + 28, buf.byteOffset + buf.byteLength));
  let off = 0;
  const take = (n: number): Float32Array => {
    if (off + n > floats.length) throw new Error(`${path}: truncated checkpoint`);
    const a = floats.subarray(off, off + n);
    off += n;
    return a;
  };
  const perLayer = (n: number) => Array.from({ length: nLayers }, () => take(n));
  const embed = take(V * dim).slice();
  const rmsAtt = perLayer(dim);
  const wq = perLayer(dim * dim);
  const wk = perLayer(kvDim * dim);
  const wv = perLayer(kvDim * dim);
  const wo = perLayer(dim * dim);
  const rmsFfn = perLayer(dim);
  const w1 = perLayer(hiddenDim * dim);
  const w2 = perLayer(dim * hiddenDim);
  const w3 = perLayer(hiddenDim * dim);
  const rmsFinal = take(dim).slice();
  take(seqLen * (headDim / 2)); // freq_cis_real, unused
  take(seqLen * (headDim / 2)); // freq_cis_imag, unused
  const wcls = header.sharedClassifier ? undefined : take(V * dim);

  // Stored [out, in]; the graph wants [in, out].
  const layers: LlamaLayerWeights[] = [];
  for (let l = 0; l < nLayers; l++) {
    layers.push({
      inputNorm: rmsAtt[l].slice(),
      q: transpose(permuteForHalfRotary(wq[l], nHeads, headDim, dim), dim, dim),
      k: transpose(permuteForHalfRotary(wk[l], nKvHeads, headDim, dim), kvDim, dim),
      v: transpose(wv[l], kvDim, dim),
      o: transpose(wo[l], dim, dim),
      postNorm: rmsFfn[l].slice(),
      gate: transpose(w1[l], hiddenDim, dim),
      up: transpose(w3[l], hiddenDim, dim),
      down: transpose(w2[l], dim, hiddenDim),
    });
  }
  return { header, weights: { embed, layers, finalNorm: rmsFinal, lmHead: wcls ? transpose(wcls, V, dim) : undefined } };
}
