// The architecture description of a Llama-family decoder, and its config.json rendering.

export type ModelType = "llama" | "mistral" | "qwen2" | "qwen3";

/** transformers' class for each model type (config.json `architectures`). */
export const ARCHITECTURES: Record<ModelType, string> = {
  llama: "LlamaForCausalLM",
  mistral: "MistralForCausalLM",
  qwen2: "Qwen2ForCausalLM",
  qwen3: "Qwen3ForCausalLM",
};

/**
 * Llama 3.1's rotary frequency scaling (rope_scaling.rope_type "llama3"): long wavelengths are
 * slowed by `factor`, short ones kept, and the band between interpolated.
 */
export interface Llama3RopeScaling {
  type: "llama3";
  factor: number;
  lowFreqFactor: number;
  highFreqFactor: number;
  originalMaxPositionEmbeddings: number;
}

/** `standard`: plain ONNX ops for any execution provider; `fused`: ORT contrib ops (CPU + CUDA). */
export type GraphVariant = "standard" | "fused";
export type WeightDType = "float32" | "float16";

export interface LlamaConfig {
  modelType: ModelType;
  hiddenSize: number;
  intermediateSize: number;
  numLayers: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  vocabSize: number;
  maxPositionEmbeddings: number;
  rmsNormEps: number;
  ropeTheta: number;
  tieWordEmbeddings: boolean;
  /** Per-head RMSNorm of q and k before the rotary embedding (Qwen3). */
  qkNorm: boolean;
  /** Biases on the q, k and v projections (Qwen2; Llama's attention_bias). */
  qkvBias?: boolean;
  /** A bias on the output projection (Llama's attention_bias). */
  oBias?: boolean;
  ropeScaling?: Llama3RopeScaling | null;
  /**
   * Per-frequency divisors of the rotary frequencies, as llama.cpp applies a GGUF file's
   * rope_freqs.weight (Llama 3.1's scaling, stored as the factors it computes).
   */
  ropeFreqFactors?: number[];
  bosTokenId: number;
  eosTokenId: number | number[];
  padTokenId?: number;
}

export function validateConfig(c: LlamaConfig): void {
  const pos = ["hiddenSize", "intermediateSize", "numLayers", "numHeads", "numKvHeads", "headDim", "vocabSize", "maxPositionEmbeddings"] as const;
  for (const k of pos) if (!Number.isInteger(c[k]) || c[k] <= 0) throw new Error(`config.${k} must be a positive integer`);
  if (c.numHeads % c.numKvHeads !== 0) throw new Error("numHeads must be a multiple of numKvHeads");
  if (c.headDim % 2 !== 0) throw new Error("headDim must be even for rotary embeddings");
  if (c.ropeFreqFactors && c.ropeFreqFactors.length !== c.headDim / 2) throw new Error(`ropeFreqFactors must hold headDim / 2 = ${c.headDim / 2} factors`);
  const r = c.ropeScaling;
  if (r && !(r.factor > 0 && r.highFreqFactor > r.lowFreqFactor && r.originalMaxPositionEmbeddings > 0)) {
    throw new Error("rope scaling llama3 needs factor > 0, high_freq_factor > low_freq_factor and original_max_position_embeddings > 0");
  }
}

/** config.json as transformers writes it for these architectures. */
export function hfConfigJson(c: LlamaConfig, dtype: "float32" | "float16" | "bfloat16"): Record<string, unknown> {
  const out: Record<string, unknown> = {
    architectures: [ARCHITECTURES[c.modelType]],
    model_type: c.modelType,
    hidden_size: c.hiddenSize,
    intermediate_size: c.intermediateSize,
    num_hidden_layers: c.numLayers,
    num_attention_heads: c.numHeads,
    num_key_value_heads: c.numKvHeads,
    head_dim: c.headDim,
    hidden_act: "silu",
    vocab_size: c.vocabSize,
    max_position_embeddings: c.maxPositionEmbeddings,
    rms_norm_eps: c.rmsNormEps,
    rope_theta: c.ropeTheta,
    rope_scaling: c.ropeScaling
      ? {
          rope_type: "llama3",
          factor: c.ropeScaling.factor,
          low_freq_factor: c.ropeScaling.lowFreqFactor,
          high_freq_factor: c.ropeScaling.highFreqFactor,
          original_max_position_embeddings: c.ropeScaling.originalMaxPositionEmbeddings,
        }
      : null,
    attention_bias: c.oBias === true,
    attention_dropout: 0.0,
    mlp_bias: false,
    tie_word_embeddings: c.tieWordEmbeddings,
    bos_token_id: c.bosTokenId,
    eos_token_id: c.eosTokenId,
    torch_dtype: dtype,
    use_cache: true,
    initializer_range: 0.02,
    transformers_version: "4.51.0",
  };
  if (c.padTokenId !== undefined) out.pad_token_id = c.padTokenId;
  return out;
}
