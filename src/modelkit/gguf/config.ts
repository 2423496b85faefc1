// A GGUF file's hyperparameters (`general.architecture` and its `ARCH.*` keys, as llama.cpp's
// llama-model.cpp reads them) and tensor names, read into the model kit's decoder description.
// Everything the graphs would not reproduce exactly is refused by name.

import type { LlamaConfig, ModelType } from "../llama/config.ts";
import type { GgufFile, GgufMetadata, GgufTensor } from "./file.ts";

/** general.architecture values read, and what they are. */
export const GGUF_ARCHITECTURES: Record<string, { modelType: ModelType; what: string }> = {
  llama: { modelType: "llama", what: "Llama 1-3, Mistral and others llama.cpp converts to it" },
  qwen2: { modelType: "qwen2", what: "Qwen2, Qwen2.5" },
  qwen3: { modelType: "qwen3", what: "Qwen3 (dense)" },
};

export interface GgufModelConfig {
  config: LlamaConfig;
  architecture: string;
  /** The context the file was trained for (ARCH.context_length). */
  contextLength: number;
  /** llama.cpp's `llama` rotates adjacent pairs: q and k rows are permuted to the half rotation. */
  adjacentPairRotary: boolean;
  notes: string[];
}

type LayerTensor = { name: string; shape: number[] };

function positive(meta: GgufMetadata, key: string, fallback?: number): number {
  const v = meta[key] ?? fallback;
  if (Array.isArray(v)) throw new Error(`${key} differs between layers (${v.slice(0, 4).join(", ")}, …); this importer reads models whose layers are all alike`);
  if (typeof v !== "number" || !Number.isInteger(v) || v <= 0) throw new Error(`the file's ${key} must be a positive integer (got ${v === undefined ? "nothing" : JSON.stringify(typeof v === "bigint" ? String(v) : v)})`);
  return v;
}

function finite(meta: GgufMetadata, key: string, fallback: number): number {
  const v = meta[key] ?? fallback;
  if (typeof v !== "number" || !Number.isFinite(v)) throw new Error(`the file's ${key} must be a number`);
  return v;
}

/** The tensors of layer i under this config: ggml's names, shapes as torch writes them ([out, in]). */
export function layerTensors(c: LlamaConfig, i: number): Record<string, LayerTensor> {
  const H = c.hiddenSize;
  const q = c.numHeads * c.headDim;
  const kv = c.numKvHeads * c.headDim;
  const I = c.intermediateSize;
  const b = `blk.${i}`;
  const out: Record<string, LayerTensor> = {
    inputNorm: { name: `${b}.attn_norm.weight`, shape: [H] },
    q: { name: `${b}.attn_q.weight`, shape: [q, H] },
    k: { name: `${b}.attn_k.weight`, shape: [kv, H] },
    v: { name: `${b}.attn_v.weight`, shape: [kv, H] },
    o: { name: `${b}.attn_output.weight`, shape: [H, q] },
    postNorm: { name: `${b}.ffn_norm.weight`, shape: [H] },
    gate: { name: `${b}.ffn_gate.weight`, shape: [I, H] },
    up: { name: `${b}.ffn_up.weight`, shape: [I, H] },
    down: { name: `${b}.ffn_down.weight`, shape: [H, I] },
  };
  if (c.qkNorm) {
    out.qNorm = { name: `${b}.attn_q_norm.weight`, shape: [c.headDim] };
    out.kNorm = { name: `${b}.attn_k_norm.weight`, shape: [c.headDim] };
  }
  if (c.qkvBias) {
    out.qBias = { name: `${b}.attn_q.bias`, shape: [q] };
    out.kBias = { name: `${b}.attn_k.bias`, shape: [kv] };
    out.vBias = { name: `${b}.attn_v.bias`, shape: [kv] };
  }
  if (c.oBias) out.oBias = { name: `${b}.attn_output.bias`, shape: [H] };
  return out;
}

/** Every tensor the file must hold, with torch's shape. */
export function expectedTensors(c: LlamaConfig): LayerTensor[] {
  const out: LayerTensor[] = [{ name: "token_embd.weight", shape: [c.vocabSize, c.hiddenSize] }];
  for (let i = 0; i < c.numLayers; i++) out.push(...Object.values(layerTensors(c, i)));
  out.push({ name: "output_norm.weight", shape: [c.hiddenSize] });
  if (!c.tieWordEmbeddings) out.push({ name: "output.weight", shape: [c.vocabSize, c.hiddenSize] });
  if (c.ropeFreqFactors) out.push({ name: "rope_freqs.weight", shape: [c.headDim / 2] });
  return out;
}

/** torch's shape of a tensor: ggml's dimensions reversed. */
export const torchShape = (t: GgufTensor) => [...t.dims].reverse();

/**
 * Checks, before anything is written, that the file holds exactly this model: every expected
 * tensor with the shape the hyperparameters imply, and nothing the graph would silently drop.
 */
export function checkTensors(c: LlamaConfig, file: GgufFile): void {
  const expected = expectedTensors(c);
  for (const e of expected) {
    const t = file.tensor(e.name);
    if (!t) throw new Error(`the file lacks tensor ${e.name}`);
    const shape = torchShape(t);
    if (shape.length !== e.shape.length || shape.some((d, i) => d !== e.shape[i])) {
      throw new Error(`tensor ${e.name} has shape [${shape.join(", ")}] (ggml [${t.dims.join(", ")}]), but the file's hyperparameters imply [${e.shape.join(", ")}]`);
    }
  }
  const known = new Set(expected.map((t) => t.name));
  // Rotary tables some old converters stored: llama.cpp never reads them either.
  const unknown = [...file.tensors.keys()].filter((n) => !known.has(n) && !/^blk\.\d+\.attn_rot_embd$/.test(n));
  if (unknown.length > 0) {
    const more = unknown.length > 5 ? ` and ${unknown.length - 5} more` : "";
    throw new Error(`the file holds tensors this architecture does not use: ${unknown.slice(0, 5).join(", ")}${more}`);
  }
}

/** Reads the hyperparameters; throws with the reason for anything unsupported. */
export function readGgufConfig(file: GgufFile): GgufModelConfig {
  const meta = file.metadata;
  const arch = meta["general.architecture"];
  const known = GGUF_ARCHITECTURES[typeof arch === "string" ? arch : ""];
  if (!known) {
    const list = Object.entries(GGUF_ARCHITECTURES).map(([a, k]) => `${a} (${k.what})`).join(", ");
    throw new Error(`unsupported architecture ${typeof arch === "string" ? arch : "(the file names none)"} (general.architecture); supported: ${list}`);
  }
  const a = arch as string;
  const k = (key: string) => `${a}.${key}`;
  if (meta[k("expert_count")] !== undefined && Number(meta[k("expert_count")]) > 0) throw new Error(`${a} with ${meta[k("expert_count")]} experts (a mixture of experts) is not supported`);
  const scaling = meta[k("rope.scaling.type")];
  if (scaling !== undefined && scaling !== "none") {
    const factor = meta[k("rope.scaling.factor")];
    if (!(scaling === "linear" && (factor === undefined || factor === 1))) throw new Error(`rope scaling ${JSON.stringify(scaling)} (${k("rope.scaling.type")}) is not supported`);
  }
  const hiddenSize = positive(meta, k("embedding_length"));
  const numHeads = positive(meta, k("attention.head_count"));
  const headDim = meta[k("attention.key_length")] !== undefined ? positive(meta, k("attention.key_length")) : hiddenSize / numHeads;
  if (!Number.isInteger(headDim)) throw new Error(`${k("embedding_length")} is not a multiple of ${k("attention.head_count")} and ${k("attention.key_length")} is not given`);
  if (meta[k("attention.value_length")] !== undefined && positive(meta, k("attention.value_length")) !== headDim) throw new Error(`${k("attention.value_length")} differs from the key length; not supported`);
  const rotary = meta[k("rope.dimension_count")];
  if (rotary !== undefined && rotary !== headDim) throw new Error(`${k("rope.dimension_count")} ${String(rotary)} rotates part of each head of ${headDim}; only whole heads are supported`);
  const contextLength = positive(meta, k("context_length"));

  const has = (n: string) => file.tensor(n) !== undefined;
  const modelType = known.modelType;
  const qkvBias = modelType === "qwen2" || has("blk.0.attn_q.bias");
  const tokens = meta["tokenizer.ggml.tokens"];
  const embed = file.tensor("token_embd.weight");
  if (!embed) throw new Error("the file lacks tensor token_embd.weight");
  const vocabSize = meta[k("vocab_size")] !== undefined ? positive(meta, k("vocab_size")) : Array.isArray(tokens) ? tokens.length : embed.dims[1]!;
  const notes: string[] = [];

  let ropeFreqFactors: number[] | undefined;
  const freqs = file.tensor("rope_freqs.weight");
  if (freqs) {
    if (freqs.type.name !== "F32" || freqs.dims.length !== 1 || freqs.dims[0] !== headDim / 2) throw new Error(`rope_freqs.weight must be F32 [${headDim / 2}] (it is ${freqs.type.name} [${freqs.dims.join(", ")}])`);
    ropeFreqFactors = [...file.readFloat32(freqs)];
    notes.push("rope_freqs.weight: the rotary frequencies are divided by the file's factors (Llama 3.1's scaling), as llama.cpp does");
  }
  const config: LlamaConfig = {
    modelType,
    hiddenSize,
    intermediateSize: positive(meta, k("feed_forward_length")),
    numLayers: positive(meta, k("block_count")),
    numHeads,
    numKvHeads: positive(meta, k("attention.head_count_kv"), numHeads),
    headDim,
    vocabSize,
    maxPositionEmbeddings: contextLength,
    rmsNormEps: finite(meta, k("attention.layer_norm_rms_epsilon"), 1e-5),
    ropeTheta: finite(meta, k("rope.freq_base"), 10000),
    tieWordEmbeddings: !has("output.weight"),
    qkNorm: modelType === "qwen3",
    qkvBias,
    oBias: has("blk.0.attn_output.bias"),
    ...(ropeFreqFactors ? { ropeFreqFactors } : {}),
    bosTokenId: 1,
    eosTokenId: 2,
  };
  if (config.numHeads % config.numKvHeads !== 0) throw new Error(`${k("attention.head_count")} must be a multiple of ${k("attention.head_count_kv")}`);
  return { config, architecture: a, contextLength, adjacentPairRotary: modelType === "llama", notes };
}
