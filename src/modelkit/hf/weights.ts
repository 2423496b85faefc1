// The tensor names of a transformers Llama-family checkpoint, and the model kit's weights read from
// (and written to) them. transformers stores each projection as nn.Linear.weight [out, in]; the
// graphs want [in, out], so every matrix is transposed on the way. q and k rows are already in
// the rotate-half order the graphs use (that is the HF convention), so nothing is permuted.

import type { LlamaConfig } from "../llama/config.ts";
import { type LlamaLayerWeights, type LlamaWeightSource, type LlamaWeights, transpose } from "../llama/weights.ts";
import type { SafetensorsCheckpoint, SafetensorsEntry, SafetensorsFloat } from "./safetensors.ts";

type MatrixKey = "q" | "k" | "v" | "o" | "gate" | "up" | "down";
type VectorKey = "inputNorm" | "postNorm" | "qNorm" | "kNorm" | "qBias" | "kBias" | "vBias" | "oBias";

interface TensorSpec {
  name: string;
  shape: number[];
}

/** Every tensor a layer has under this config, keyed as LlamaLayerWeights. */
function layerTensors(c: LlamaConfig, i: number): { matrices: Record<MatrixKey, TensorSpec>; vectors: Partial<Record<VectorKey, TensorSpec>> } {
  const H = c.hiddenSize;
  const q = c.numHeads * c.headDim;
  const kv = c.numKvHeads * c.headDim;
  const I = c.intermediateSize;
  const p = `model.layers.${i}`;
  const a = `${p}.self_attn`;
  const vectors: Partial<Record<VectorKey, TensorSpec>> = {
    inputNorm: { name: `${p}.input_layernorm.weight`, shape: [H] },
    postNorm: { name: `${p}.post_attention_layernorm.weight`, shape: [H] },
  };
  if (c.qkNorm) {
    vectors.qNorm = { name: `${a}.q_norm.weight`, shape: [c.headDim] };
    vectors.kNorm = { name: `${a}.k_norm.weight`, shape: [c.headDim] };
  }
  if (c.qkvBias) {
    vectors.qBias = { name: `${a}.q_proj.bias`, shape: [q] };
    vectors.kBias = { name: `${a}.k_proj.bias`, shape: [kv] };
    vectors.vBias = { name: `${a}.v_proj.bias`, shape: [kv] };
  }
  if (c.oBias) vectors.oBias = { name: `${a}.o_proj.bias`, shape: [H] };
  return {
    matrices: {
      q: { name: `${a}.q_proj.weight`, shape: [q, H] },
      k: { name: `${a}.k_proj.weight`, shape: [kv, H] },
      v: { name: `${a}.v_proj.weight`, shape: [kv, H] },
      o: { name: `${a}.o_proj.weight`, shape: [H, q] },
      gate: { name: `${p}.mlp.gate_proj.weight`, shape: [I, H] },
      up: { name: `${p}.mlp.up_proj.weight`, shape: [I, H] },
      down: { name: `${p}.mlp.down_proj.weight`, shape: [H, I] },
    },
    vectors,
  };
}

/** Every tensor the checkpoint must hold, with its shape. */
export function expectedTensors(c: LlamaConfig): TensorSpec[] {
  const out: TensorSpec[] = [{ name: "model.embed_tokens.weight", shape: [c.vocabSize, c.hiddenSize] }];
  for (let i = 0; i < c.numLayers; i++) {
    const { matrices, vectors } = layerTensors(c, i);
    out.push(...Object.values(matrices), ...Object.values(vectors));
  }
  out.push({ name: "model.norm.weight", shape: [c.hiddenSize] });
  if (!c.tieWordEmbeddings) out.push({ name: "lm_head.weight", shape: [c.vocabSize, c.hiddenSize] });
  return out;
}

/**
 * Checks, before anything is written, that the checkpoint holds exactly this model: every
 * expected tensor with its shape and a float type, and nothing the graph would silently drop.
 */
export function checkCheckpoint(c: LlamaConfig, ckpt: SafetensorsCheckpoint): void {
  const expected = expectedTensors(c);
  for (const t of expected) {
    const found = ckpt.tensor(t.name);
    if (!found) throw new Error(`the checkpoint lacks ${t.name}${t.name === "lm_head.weight" ? " (config.json says the output head is not tied to the embedding)" : ""}`);
    if (found.shape.length !== t.shape.length || found.shape.some((d, i) => d !== t.shape[i])) {
      throw new Error(`tensor ${t.name} has shape [${found.shape.join(", ")}], but config.json implies [${t.shape.join(", ")}]`);
    }
    if (!["F32", "F16", "BF16"].includes(found.dtype)) throw new Error(`tensor ${t.name} is ${found.dtype}; supported weight types: BF16, F16, F32`);
  }
  const known = new Set(expected.map((t) => t.name));
  // A tied checkpoint may still store the head (a copy of the embedding); rotary tables are derived.
  const ignorable = (n: string) => (c.tieWordEmbeddings && n === "lm_head.weight") || n.endsWith(".rotary_emb.inv_freq");
  const unknown = ckpt.names().filter((n) => !known.has(n) && !ignorable(n));
  if (unknown.length > 0) {
    const more = unknown.length > 5 ? ` and ${unknown.length - 5} more` : "";
    throw new Error(`the checkpoint holds tensors this architecture does not use: ${unknown.slice(0, 5).join(", ")}${more}`);
  }
}

/**
 * The weights of a checkpoint whose tensors checkCheckpoint has verified, read when the graph
 * takes them: each field of a layer is a getter that reads its tensor (and keeps nothing), so a
 * matrix is in memory only while it is written.
 */
export function checkpointSource(c: LlamaConfig, ckpt: SafetensorsCheckpoint, onLayer?: (i: number) => void): LlamaWeightSource {
  const matrix = (t: TensorSpec) => transpose(ckpt.readFloat32(t.name, t.shape), t.shape[0]!, t.shape[1]!);
  return {
    checked: true,
    embed: () => ckpt.readFloat32("model.embed_tokens.weight", [c.vocabSize, c.hiddenSize]),
    layer(i) {
      onLayer?.(i);
      const { matrices, vectors } = layerTensors(c, i);
      const l = {} as LlamaLayerWeights;
      for (const [key, t] of Object.entries(matrices)) Object.defineProperty(l, key, { get: () => matrix(t), enumerable: true });
      for (const [key, t] of Object.entries(vectors)) Object.defineProperty(l, key, { get: () => ckpt.readFloat32(t.name, t.shape), enumerable: true });
      return l;
    },
    finalNorm: () => ckpt.readFloat32("model.norm.weight", [c.hiddenSize]),
    lmHead: () => (c.tieWordEmbeddings ? undefined : matrix({ name: "lm_head.weight", shape: [c.vocabSize, c.hiddenSize] })),
    embedRows: (start, count) => ckpt.readFloat32Rows("model.embed_tokens.weight", [c.vocabSize, c.hiddenSize], start, count),
    lmHeadRows: (start, count) => ckpt.readFloat32Rows("lm_head.weight", [c.vocabSize, c.hiddenSize], start, count),
  };
}

/**
 * The safetensors entries of in-memory weights under transformers' names and layout (for tests and
 * benchmarks that need a checkpoint to import). Norm weights are stored as `dtype` too, as
 * save_pretrained does for a model cast to it.
 */
export function checkpointEntries(c: LlamaConfig, w: LlamaWeights, dtype: SafetensorsFloat): SafetensorsEntry[] {
  const out: SafetensorsEntry[] = [{ name: "model.embed_tokens.weight", shape: [c.vocabSize, c.hiddenSize], dtype, values: w.embed }];
  w.layers.forEach((l, i) => {
    const { matrices, vectors } = layerTensors(c, i);
    for (const [key, t] of Object.entries(matrices)) {
      // [in, out] back to nn.Linear's [out, in].
      out.push({ name: t.name, shape: t.shape, dtype, values: transpose(l[key as MatrixKey], t.shape[1]!, t.shape[0]!) });
    }
    for (const [key, t] of Object.entries(vectors)) {
      const v = l[key as VectorKey];
      if (!v) throw new Error(`layer ${i} has no ${key}, which this config needs`);
      out.push({ name: t.name, shape: t.shape, dtype, values: v });
    }
  });
  out.push({ name: "model.norm.weight", shape: [c.hiddenSize], dtype, values: w.finalNorm });
  if (!c.tieWordEmbeddings) {
    if (!w.lmHead) throw new Error("untied weights need lmHead");
    out.push({ name: "lm_head.weight", shape: [c.vocabSize, c.hiddenSize], dtype, values: transpose(w.lmHead, c.hiddenSize, c.vocabSize) });
  }
  return out;
}
