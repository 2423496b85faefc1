// A Hugging Face checkpoint's config.json, read into the model kit's decoder description, with
// everything this importer cannot reproduce exactly refused by name.

import { ARCHITECTURES, type Llama3RopeScaling, type LlamaConfig, type ModelType } from "../llama/config.ts";

export const SUPPORTED_ARCHITECTURES = Object.values(ARCHITECTURES);

export interface HfModelConfig {
  config: LlamaConfig;
  architecture: string;
  /** The longest sequence the imported graph serves (Mistral's sliding window caps it). */
  contextLength: number;
  /** What the operator should know about the import (printed by the CLI). */
  notes: string[];
}

type Json = Record<string, unknown>;

function integer(raw: Json, key: string, fallback?: number): number {
  const v = raw[key] ?? fallback;
  if (typeof v !== "number" || !Number.isInteger(v) || v <= 0) throw new Error(`config.json: ${key} must be a positive integer (got ${JSON.stringify(raw[key])})`);
  return v;
}

function number(raw: Json, key: string, fallback: number): number {
  const v = raw[key] ?? fallback;
  if (typeof v !== "number" || !Number.isFinite(v)) throw new Error(`config.json: ${key} must be a number (got ${JSON.stringify(raw[key])})`);
  return v;
}

function ids(v: unknown): number | number[] | undefined {
  if (typeof v === "number" && Number.isInteger(v)) return v;
  if (Array.isArray(v) && v.length > 0 && v.every((x) => typeof x === "number" && Number.isInteger(x))) return v as number[];
  return undefined;
}

/**
 * rope_scaling (transformers 4) or rope_parameters (transformers 5): null or "default" rotate
 * plainly, "llama3" is Llama 3.1's frequency scaling; the other kinds change the attention in
 * ways the graphs do not implement.
 */
function ropeScaling(raw: Json): { theta: number | undefined; scaling: Llama3RopeScaling | null } {
  const params = (raw.rope_parameters ?? raw.rope_scaling ?? null) as Json | null;
  const theta = typeof raw.rope_theta === "number" ? raw.rope_theta : typeof params?.rope_theta === "number" ? params.rope_theta : undefined;
  if (params === null || typeof params !== "object") return { theta, scaling: null };
  const kind = params.rope_type ?? params.type ?? "default";
  if (kind === "default") return { theta, scaling: null };
  if (kind !== "llama3") throw new Error(`config.json: rope scaling "${String(kind)}" is not supported (supported: none, default, llama3)`);
  const n = (key: string) => {
    const v = params[key];
    if (typeof v !== "number" || !Number.isFinite(v)) throw new Error(`config.json: rope scaling llama3 needs ${key}`);
    return v;
  };
  return {
    theta,
    scaling: {
      type: "llama3",
      factor: n("factor"),
      lowFreqFactor: n("low_freq_factor"),
      highFreqFactor: n("high_freq_factor"),
      originalMaxPositionEmbeddings: n("original_max_position_embeddings"),
    },
  };
}

/** Reads config.json; throws with the reason for anything unsupported. */
export function readHfModelConfig(raw: Json): HfModelConfig {
  const archs = raw.architectures;
  const architecture = Array.isArray(archs) && typeof archs[0] === "string" ? archs[0] : undefined;
  const modelType = (Object.keys(ARCHITECTURES) as ModelType[]).find((t) => ARCHITECTURES[t] === architecture);
  if (!modelType) {
    throw new Error(`unsupported architecture ${architecture ?? "(config.json names none)"}; supported: ${SUPPORTED_ARCHITECTURES.join(", ")}`);
  }
  const quant = raw.quantization_config as Json | undefined;
  if (quant) {
    throw new Error(`the checkpoint is already quantised (${String(quant.quant_method ?? "quantization_config")}); import the float (bf16, fp16 or fp32) checkpoint instead`);
  }
  const act = raw.hidden_act ?? raw.hidden_activation ?? "silu";
  if (act !== "silu") throw new Error(`config.json: hidden_act ${JSON.stringify(act)} is not supported (supported: silu)`);
  if (raw.mlp_bias === true) throw new Error("config.json: mlp_bias is not supported");
  const partial = raw.partial_rotary_factor;
  if (partial !== undefined && partial !== 1 && partial !== 1.0) throw new Error(`config.json: partial_rotary_factor ${JSON.stringify(partial)} is not supported (only 1)`);

  const hiddenSize = integer(raw, "hidden_size");
  const numHeads = integer(raw, "num_attention_heads");
  const headDim = raw.head_dim === undefined || raw.head_dim === null ? hiddenSize / numHeads : integer(raw, "head_dim");
  if (!Number.isInteger(headDim)) throw new Error("config.json: hidden_size is not a multiple of num_attention_heads and head_dim is not given");
  const maxPos = integer(raw, "max_position_embeddings", 2048);
  const { theta, scaling } = ropeScaling(raw);
  const notes: string[] = [];
  let contextLength = maxPos;

  // Sliding-window attention differs from full attention only past the window: serving at most
  // the window keeps it exact.
  if (modelType === "mistral" && typeof raw.sliding_window === "number" && raw.sliding_window < maxPos) {
    contextLength = raw.sliding_window;
    notes.push(`sliding_window ${raw.sliding_window}: the context is capped at the window (max_position_embeddings is ${maxPos})`);
  }
  if ((modelType === "qwen2" || modelType === "qwen3") && raw.use_sliding_window === true) {
    throw new Error("config.json: use_sliding_window (sliding attention in some layers) is not supported");
  }
  const layerTypes = raw.layer_types;
  if (Array.isArray(layerTypes) && layerTypes.some((t) => t !== "full_attention")) {
    throw new Error(`config.json: layer_types other than full_attention (${[...new Set(layerTypes)].join(", ")}) are not supported`);
  }

  // Which projections carry biases, as each architecture's attention module builds them.
  const attentionBias = raw.attention_bias === true;
  const qkvBias = modelType === "qwen2" ? true : modelType === "mistral" ? false : attentionBias;
  const oBias = modelType === "llama" || modelType === "qwen3" ? attentionBias : false;

  const eos = ids(raw.eos_token_id);
  const config: LlamaConfig = {
    modelType,
    hiddenSize,
    intermediateSize: integer(raw, "intermediate_size"),
    numLayers: integer(raw, "num_hidden_layers"),
    numHeads,
    numKvHeads: integer(raw, "num_key_value_heads", numHeads),
    headDim,
    vocabSize: integer(raw, "vocab_size"),
    maxPositionEmbeddings: maxPos,
    rmsNormEps: number(raw, "rms_norm_eps", 1e-6),
    ropeTheta: theta ?? 10000,
    tieWordEmbeddings: raw.tie_word_embeddings === true,
    qkNorm: modelType === "qwen3",
    qkvBias,
    oBias,
    ropeScaling: scaling,
    bosTokenId: typeof raw.bos_token_id === "number" ? raw.bos_token_id : 1,
    eosTokenId: eos ?? 2,
    ...(typeof raw.pad_token_id === "number" ? { padTokenId: raw.pad_token_id } : {}),
  };
  if (config.numHeads % config.numKvHeads !== 0) throw new Error("config.json: num_attention_heads must be a multiple of num_key_value_heads");
  return { config, architecture: architecture!, contextLength, notes };
}
