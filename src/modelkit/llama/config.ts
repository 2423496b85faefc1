// The architecture description of a Llama-family decoder, and its config.json rendering.

export type ModelType = "llama" | "qwen3";

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
  bosTokenId: number;
  eosTokenId: number | number[];
  padTokenId?: number;
}

export function validateConfig(c: LlamaConfig): void {
  const pos = ["hiddenSize", "intermediateSize", "numLayers", "numHeads", "numKvHeads", "headDim", "vocabSize", "maxPositionEmbeddings"] as const;
  for (const k of pos) if (!Number.isInteger(c[k]) || c[k] <= 0) throw new Error(`config.${k} must be a positive integer`);
  if (c.numHeads % c.numKvHeads !== 0) throw new Error("numHeads must be a multiple of numKvHeads");
  if (c.headDim % 2 !== 0) throw new Error("headDim must be even for rotary embeddings");
}

/** config.json as transformers writes it for LlamaForCausalLM / Qwen3ForCausalLM. */
export function hfConfigJson(c: LlamaConfig, dtype: "float32" | "float16"): Record<string, unknown> {
  const arch = c.modelType === "qwen3" ? "Qwen3ForCausalLM" : "LlamaForCausalLM";
  const out: Record<string, unknown> = {
    architectures: [arch],
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
    rope_scaling: null,
    attention_bias: false,
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
