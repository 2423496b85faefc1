// A GGUF file's tensors as the model kit's weights, read when the graph takes them: each layer
// field is a getter that reads (and dequantises) its tensor and keeps nothing. ggml stores a
// projection as [in, out] dimensions (torch's [out, in] rows); the graphs want [in, out] rows,
// so matrices are transposed on the way. llama.cpp's `llama` architecture rotates adjacent pairs,
// so its q and k rows are permuted to the rotate-half order the graphs use (as for llama2.c).
//
// For a 4-bit import, Q4_0, Q4_1 and Q4_K projections are also handed over in MatMulNBits' blocks
// (`q4`), codes and scales as the file has them (ggml.ts toQ4Rows).

import type { LlamaConfig } from "../llama/config.ts";
import { halfRotarySource, type LlamaLayerWeights, type LlamaMatrixKey, type LlamaWeightSource, permuteForHalfRotary, transpose } from "../llama/weights.ts";
import { type Q4Matrix, selectQ4Columns } from "../quant/q4.ts";
import { layerTensors } from "./config.ts";
import type { GgufFile, GgufTensor } from "./file.ts";
import { Q4_DIRECT_TYPES, toQ4Rows } from "./ggml.ts";

const MATRICES: LlamaMatrixKey[] = ["q", "k", "v", "o", "gate", "up", "down"];

export interface GgufSourceOptions {
  /** Permute q and k (and their biases) from adjacent-pair to half rotation. */
  adjacentPairRotary: boolean;
  /** The graph writes 4-bit weights: hand over the tensors that are 4-bit blocks already. */
  q4: boolean;
  onLayer?: (i: number) => void;
}

/** The weights of a file whose tensors checkTensors has verified. */
export function ggufSource(c: LlamaConfig, file: GgufFile, opts: GgufSourceOptions): LlamaWeightSource {
  const get = (name: string): GgufTensor => file.tensor(name)!;
  // Heads whose rows are permuted, by the key of the layer field.
  const heads: Partial<Record<string, number>> = opts.adjacentPairRotary ? { q: c.numHeads, k: c.numKvHeads, qBias: c.numHeads, kBias: c.numKvHeads } : {};
  /** torch's [out, in] rows of a tensor as float32, rotary rows permuted where `key` needs it. */
  const rows = (key: string, t: GgufTensor) => {
    const w = file.readFloat32(t);
    const h = heads[key];
    return h ? permuteForHalfRotary(w, h, c.headDim, t.dims[0]!) : w;
  };
  const q4 = (key: string, t: GgufTensor): Q4Matrix => {
    const out = t.dims[1]!;
    const m = toQ4Rows(t.type, file.readRaw(t), out, t.dims[0]!);
    const h = heads[key];
    if (!h) return m;
    // The same row permutation, on the output columns of the blocks.
    return selectQ4Columns([m], Array.from({ length: out }, (_, j): [number, number] => {
      const head = Math.floor(j / c.headDim);
      return [0, head * c.headDim + halfRotarySource(j % c.headDim, c.headDim)];
    }));
  };
  const table = (name: string) => (start: number, count: number) => file.readFloat32(get(name), start, count);
  return {
    checked: true,
    embed: () => file.readFloat32(get("token_embd.weight")),
    layer(i) {
      opts.onLayer?.(i);
      const l = {} as LlamaLayerWeights;
      const quantized: Partial<Record<LlamaMatrixKey, Q4Matrix>> = {};
      for (const [key, spec] of Object.entries(layerTensors(c, i))) {
        const t = get(spec.name);
        const matrix = (MATRICES as string[]).includes(key);
        Object.defineProperty(l, key, { get: () => (matrix ? transpose(rows(key, t), t.dims[1]!, t.dims[0]!) : rows(key, t)), enumerable: true });
        if (matrix && opts.q4 && Q4_DIRECT_TYPES.has(t.type.name)) Object.defineProperty(quantized, key, { get: () => q4(key, t), enumerable: true });
      }
      if (Object.keys(quantized).length > 0) l.q4 = quantized;
      return l;
    },
    finalNorm: () => file.readFloat32(get("output_norm.weight")),
    lmHead: () => (c.tieWordEmbeddings ? undefined : transpose(file.readFloat32(get("output.weight")), c.vocabSize, c.hiddenSize)),
    embedRows: table("token_embd.weight"),
    lmHeadRows: table("output.weight"),
    // GatherBlockQuantized takes integer zero points only: Q4_0's rows go as they are.
    embedQ4Rows(start, count) {
      const t = get("token_embd.weight");
      return opts.q4 && t.type.name === "Q4_0" ? toQ4Rows(t.type, file.readRaw(t, start, count), count, t.dims[0]!) : null;
    },
  };
}
