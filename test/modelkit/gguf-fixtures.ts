// GGUF model files built at test time as llama.cpp's convert_hf_to_gguf.py lays them out: tensor
// names (token_embd, blk.N.attn_q, …), torch's [out, in] rows, the `llama` architecture's q and k
// rows permuted to adjacent-pair rotation (its LlamaModel.permute), hyperparameters under the
// architecture's keys, and a tokenizer's metadata. Weights are written in the type asked per
// tensor by the test's own quantiser (test/helpers/gguf-writer.ts).
import type { LlamaConfig } from "../../src/modelkit/llama/config.ts";
import type { LlamaWeights } from "../../src/modelkit/llama/weights.ts";
import { type GgufTensorSpec, type GgufValue, quantizeFloats, T, writeGguf } from "../helpers/gguf-writer.ts";

/** [in, out] (the model kit's layout) -> torch's [out, in]. */
function toRows(w: Float32Array, inDim: number, outDim: number): Float32Array {
  const out = new Float32Array(w.length);
  for (let i = 0; i < inDim; i++) for (let o = 0; o < outDim; o++) out[o * inDim + i] = w[i * outDim + o]!;
  return out;
}

/** convert_hf_to_gguf's LlamaModel.permute: rotate-half rows -> adjacent-pair rows, per head. */
function toAdjacentPairs(rows: Float32Array, heads: number, headDim: number, inDim: number): Float32Array {
  const out = new Float32Array(rows.length);
  const half = headDim / 2;
  for (let h = 0; h < heads; h++) {
    for (let i = 0; i < half; i++) {
      for (const [dst, src] of [[2 * i, i], [2 * i + 1, i + half]] as const) {
        out.set(rows.subarray((h * headDim + src) * inDim, (h * headDim + src + 1) * inDim), (h * headDim + dst) * inDim);
      }
    }
  }
  return out;
}

export interface GgufModelSpec {
  arch: "llama" | "qwen2" | "qwen3";
  config: LlamaConfig;
  weights: LlamaWeights;
  /** The type of each 2-D tensor by its GGUF name (default F32); 1-D tensors are F32. */
  typeOf?: (name: string) => number;
  tokenizer: Record<string, GgufValue>;
  extra?: Record<string, GgufValue>;
  /** Tensors beyond the weights (rope_freqs.weight). */
  extraTensors?: GgufTensorSpec[];
}

/** Writes the file; returns the tensors' names and ggml dims, for tests that break them. */
export function writeGgufModel(path: string, s: GgufModelSpec): GgufTensorSpec[] {
  const c = s.config;
  const H = c.hiddenSize;
  const q = c.numHeads * c.headDim;
  const kv = c.numKvHeads * c.headDim;
  const I = c.intermediateSize;
  const tensors: GgufTensorSpec[] = [];
  const put = (name: string, torch: number[], values: Float32Array) => {
    const type = torch.length === 2 ? (s.typeOf?.(name) ?? T.F32) : T.F32;
    tensors.push({ name, dims: [...torch].reverse(), type, bytes: quantizeFloats(type, values).bytes });
  };
  const permute = (rows: Float32Array, heads: number) => (s.arch === "llama" ? toAdjacentPairs(rows, heads, c.headDim, H) : rows);
  const permuteBias = (b: Float32Array, heads: number) => (s.arch === "llama" ? toAdjacentPairs(b, heads, c.headDim, 1) : b);
  put("token_embd.weight", [c.vocabSize, H], s.weights.embed);
  s.weights.layers.forEach((l, i) => {
    const b = `blk.${i}`;
    put(`${b}.attn_norm.weight`, [H], l.inputNorm);
    put(`${b}.attn_q.weight`, [q, H], permute(toRows(l.q, H, q), c.numHeads));
    put(`${b}.attn_k.weight`, [kv, H], permute(toRows(l.k, H, kv), c.numKvHeads));
    put(`${b}.attn_v.weight`, [kv, H], toRows(l.v, H, kv));
    put(`${b}.attn_output.weight`, [H, q], toRows(l.o, q, H));
    if (l.qBias) put(`${b}.attn_q.bias`, [q], permuteBias(l.qBias, c.numHeads));
    if (l.kBias) put(`${b}.attn_k.bias`, [kv], permuteBias(l.kBias, c.numKvHeads));
    if (l.vBias) put(`${b}.attn_v.bias`, [kv], l.vBias);
    if (l.qNorm) put(`${b}.attn_q_norm.weight`, [c.headDim], l.qNorm);
    if (l.kNorm) put(`${b}.attn_k_norm.weight`, [c.headDim], l.kNorm);
    put(`${b}.ffn_norm.weight`, [H], l.postNorm);
    put(`${b}.ffn_gate.weight`, [I, H], toRows(l.gate, H, I));
    put(`${b}.ffn_up.weight`, [I, H], toRows(l.up, H, I));
    put(`${b}.ffn_down.weight`, [H, I], toRows(l.down, I, H));
  });
  put("output_norm.weight", [H], s.weights.finalNorm);
  if (s.weights.lmHead) put("output.weight", [c.vocabSize, H], toRows(s.weights.lmHead, H, c.vocabSize));
  tensors.push(...(s.extraTensors ?? []));
  const a = s.arch;
  writeGguf(
    path,
    {
      "general.architecture": a,
      "general.name": `test ${a}`,
      [`${a}.context_length`]: c.maxPositionEmbeddings,
      [`${a}.embedding_length`]: H,
      [`${a}.feed_forward_length`]: I,
      [`${a}.block_count`]: c.numLayers,
      [`${a}.attention.head_count`]: c.numHeads,
      [`${a}.attention.head_count_kv`]: c.numKvHeads,
      [`${a}.attention.key_length`]: c.headDim,
      [`${a}.attention.value_length`]: c.headDim,
      [`${a}.rope.freq_base`]: { f32: c.ropeTheta },
      [`${a}.attention.layer_norm_rms_epsilon`]: { f32: c.rmsNormEps },
      ...s.tokenizer,
      ...s.extra,
    },
    tensors,
  );
  return tensors;
}

/** A SentencePiece-style vocabulary of `n` tokens: <unk>, <s>, </s>, the 256 bytes, then pieces. */
export function spmTokenizer(n: number): Record<string, GgufValue> {
  const tokens = ["<unk>", "<s>", "</s>", ...Array.from({ length: 256 }, (_, b) => `<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`)];
  const words = ["▁", "e", "t", "a", "o", "n", "▁t", "he", "▁the", "▁a", "in", "▁w", "er", "on", "an"];
  for (let i = 0; tokens.length < n; i++) tokens.push(words[i % words.length]! + (i >= words.length ? String(i) : ""));
  return {
    "tokenizer.ggml.model": "llama",
    "tokenizer.ggml.tokens": tokens,
    "tokenizer.ggml.scores": { f32s: tokens.map((_, i) => (i < 259 ? 0 : -i)) },
    "tokenizer.ggml.token_type": { i32s: tokens.map((_, i) => (i === 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1)) },
    "tokenizer.ggml.bos_token_id": 1,
    "tokenizer.ggml.eos_token_id": 2,
    "tokenizer.ggml.unknown_token_id": 0,
  };
}

/** A file's metadata as the writer takes it, from @huggingface/gguf's typed metadata. */
export async function ggufMetadataOf(path: string): Promise<Record<string, GgufValue>> {
  const { gguf } = await import("@huggingface/gguf");
  const { typedMetadata } = await gguf(path, { allowLocalFile: true, typedMetadata: true });
  const out: Record<string, GgufValue> = {};
  for (const [k, e] of Object.entries(typedMetadata)) {
    if (k === "version" || k === "tensor_count" || k === "kv_count") continue;
    const { value, type, subType } = e as { value: unknown; type: number; subType?: number };
    if (type === 9) out[k] = subType === 8 ? (value as string[]) : subType === 6 ? { f32s: value as number[] } : { i32s: value as number[] };
    else if (type === 6) out[k] = { f32: value as number };
    else if (type === 5) out[k] = { i32: value as number };
    else out[k] = value as string | number | boolean;
  }
  return out;
}

/**
 * A GGUF file rewritten as llama.cpp's gguf-split lays a split model out: `NAME-0000i-of-0000n.gguf`,
 * the first with the model's metadata, each with split.no / split.count / split.tensors.count and
 * its share of the tensors; 2-D tensors whose rows are whole blocks stored as `type`.
 */
export async function writeSplitGguf(source: string, outPrefix: string, parts: number, type: number): Promise<string[]> {
  const { GgufFile } = await import("../../src/modelkit/gguf/file.ts");
  const meta = await ggufMetadataOf(source);
  const f = await GgufFile.open(source);
  try {
    const tensors: GgufTensorSpec[] = [...f.tensors.values()].map((t) => {
      const quantize = t.dims.length === 2 && t.dims[0]! % 32 === 0;
      return quantize
        ? { name: t.name, dims: t.dims, type, bytes: quantizeFloats(type, f.readFloat32(t)).bytes }
        : { name: t.name, dims: t.dims, type: T.F32, bytes: quantizeFloats(T.F32, f.readFloat32(t)).bytes };
    });
    const per = Math.ceil(tensors.length / parts);
    const paths: string[] = [];
    for (let i = 0; i < parts; i++) {
      const path = `${outPrefix}-${String(i + 1).padStart(5, "0")}-of-${String(parts).padStart(5, "0")}.gguf`;
      const split = { "split.no": i, "split.count": parts, "split.tensors.count": tensors.length };
      const own = i === 0 ? { ...meta, ...split } : { "general.architecture": meta["general.architecture"]!, ...split };
      writeGguf(path, own, tensors.slice(i * per, (i + 1) * per));
      paths.push(path);
    }
    return paths;
  } finally {
    f.close();
  }
}
