// Writes a model directory in the Hugging Face / transformers.js layout, plus sluice.json.

import { mkdirSync, rmSync, writeFileSync, openSync, writeSync, closeSync } from "node:fs";
import { join } from "node:path";
import { type GraphVariant, type LlamaConfig, type WeightDType, hfConfigJson } from "./llama/config.ts";
import { buildDecoderModel, gqaHeadDim } from "./llama/graph.ts";
import type { LlamaWeights } from "./llama/weights.ts";

export interface SluiceCapabilities {
  tools: boolean;
  structured_output: boolean;
  images: boolean;
}

/** How the ONNX graph was built: what an engine needs to feed and read it. */
export interface SluiceGraphInfo {
  variant: GraphVariant;
  /** Weights, KV cache and logits all use this type, as real fp16 exports do. */
  dtype: WeightDType;
  kv_cache_dtype: WeightDType;
  logits_dtype: WeightDType;
  /**
   * fused only: GroupQueryAttention accepts a past buffer longer than the past (past/present
   * shared-buffer mode, valid length from attention_mask via seqlens_k). The buffer may hold at
   * most `max_cache_length` positions (the rotary cache size).
   */
  past_present_share_buffer: boolean;
  max_cache_length: number;
  /**
   * Head size of the KV cache tensors. Equals config.json head_dim, except in the fused graph
   * when head_dim is not a multiple of 16 (GroupQueryAttention's CPU requirement): there the
   * heads are zero-padded to the next multiple of 16.
   */
  kv_head_dim: number;
  external_data: boolean;
  /** The decoder's path in the directory, when it is not onnx/model.onnx (e.g. onnx/model_q4.onnx). */
  file?: string;
  /** Block-quantised weights (absent: weights in `dtype`). */
  quantization?: { method: "MatMulNBits"; bits: 4; block_size: number; accuracy_level: number };
}

/** sluice.json `reasoning`: the thinking block's tags and budgets, or false for none. */
export interface SluiceReasoning {
  start?: string;
  end?: string;
  budgets?: { low?: number; medium?: number; high?: number };
}

export interface SluiceJson {
  id: string;
  display_name: string;
  context_length: number;
  capabilities: SluiceCapabilities;
  description: string;
  reasoning?: SluiceReasoning | false;
  /** Sampling defaults over generation_config.json's, or false to ignore that file. */
  defaults?: false | { temperature?: number; top_p?: number; top_k?: number; min_p?: number };
  graph?: SluiceGraphInfo;
  /** The tool-call format (docs/TOOLS.md) or "none"; absent: detected from the chat template. */
  tool_format?: string;
  /** false: no generic JSON-envelope fallback for a template without tool syntax. */
  tool_fallback?: boolean;
}

export interface ModelDirContents {
  config: LlamaConfig;
  weights: LlamaWeights;
  variant: GraphVariant;
  dtype: WeightDType;
  /** An object to serialise, or text written verbatim. */
  tokenizerJson: unknown;
  tokenizerConfig: Record<string, unknown>;
  specialTokensMap: Record<string, unknown>;
  generationConfig: Record<string, unknown>;
  sluice: Omit<SluiceJson, "graph">;
  /** Rotary cache rows of the fused graph (default: context_length). */
  maxCacheLength?: number;
  /** Store initializers in onnx/model.onnx_data when their total exceeds this many bytes. */
  externalDataThreshold?: number;
  readme?: string;
  /** Also write genai_config.json (onnxruntime-genai) for the fused variant. */
  genaiConfig?: boolean;
  /** Fused variant: one packed q/k/v MatMul (see DecoderGraphOptions.packedQkv). */
  packedQkv?: boolean;
}

/** Protobuf cannot exceed 2 GiB; stay well below it by default. */
export const DEFAULT_EXTERNAL_THRESHOLD = 1536 * 1024 * 1024;

function weightBytes(w: LlamaWeights, dtype: WeightDType): number {
  let n = w.embed.length + w.finalNorm.length + (w.lmHead?.length ?? 0);
  for (const l of w.layers) {
    for (const a of Object.values(l)) if (a) n += (a as Float32Array).length;
  }
  return n * (dtype === "float16" ? 2 : 4);
}

export function writeJson(path: string, value: unknown): void {
  writeFileSync(path, `${JSON.stringify(value, null, 2)}\n`);
}

export function writeModelDir(outDir: string, m: ModelDirContents): SluiceJson {
  const onnxDir = join(outDir, "onnx");
  mkdirSync(onnxDir, { recursive: true });
  const threshold = m.externalDataThreshold ?? DEFAULT_EXTERNAL_THRESHOLD;
  const external = weightBytes(m.weights, m.dtype) > threshold;
  const maxCache = m.maxCacheLength ?? m.sluice.context_length;
  const serialized = buildDecoderModel(m.config, m.weights, {
    variant: m.variant,
    dtype: m.dtype,
    rotaryCacheLength: maxCache,
    externalDataFile: external ? "model.onnx_data" : undefined,
    packedQkv: m.packedQkv,
  });
  writeFileSync(join(onnxDir, "model.onnx"), serialized.model);
  const dataPath = join(onnxDir, "model.onnx_data");
  rmSync(dataPath, { force: true });
  if (serialized.externalData) {
    const fd = openSync(dataPath, "w");
    try {
      for (const chunk of serialized.externalData) writeSync(fd, chunk);
    } finally {
      closeSync(fd);
    }
  }
  const graph: SluiceGraphInfo = {
    variant: m.variant,
    dtype: m.dtype,
    kv_cache_dtype: m.dtype,
    logits_dtype: m.dtype,
    past_present_share_buffer: m.variant === "fused",
    max_cache_length: maxCache,
    kv_head_dim: m.variant === "fused" ? gqaHeadDim(m.config.headDim) : m.config.headDim,
    external_data: external,
  };
  const sluice: SluiceJson = { ...m.sluice, graph };
  writeJson(join(outDir, "config.json"), hfConfigJson(m.config, m.dtype));
  writeJson(join(outDir, "generation_config.json"), m.generationConfig);
  if (typeof m.tokenizerJson === "string") writeFileSync(join(outDir, "tokenizer.json"), m.tokenizerJson);
  else writeJson(join(outDir, "tokenizer.json"), m.tokenizerJson);
  writeJson(join(outDir, "tokenizer_config.json"), m.tokenizerConfig);
  writeJson(join(outDir, "special_tokens_map.json"), m.specialTokensMap);
  writeJson(join(outDir, "sluice.json"), sluice);
  if (m.readme !== undefined) writeFileSync(join(outDir, "README.md"), m.readme);
  if (m.genaiConfig && m.variant === "fused") writeJson(join(outDir, "genai_config.json"), genaiConfig(m.config, maxCache, "onnx/model.onnx"));
  return sluice;
}

/** onnxruntime-genai's genai_config.json for the fused decoder at `filename` (relative to the directory). */
export function genaiConfig(c: LlamaConfig, maxCache: number, filename: string): Record<string, unknown> {
  const eos = Array.isArray(c.eosTokenId) ? c.eosTokenId : [c.eosTokenId];
  return {
    model: {
      bos_token_id: c.bosTokenId,
      context_length: maxCache,
      decoder: {
        session_options: { log_id: "onnxruntime-genai", provider_options: [] },
        filename,
        head_size: c.headDim,
        hidden_size: c.hiddenSize,
        inputs: {
          input_ids: "input_ids",
          attention_mask: "attention_mask",
          position_ids: "position_ids",
          past_key_names: "past_key_values.%d.key",
          past_value_names: "past_key_values.%d.value",
        },
        outputs: { logits: "logits", present_key_names: "present.%d.key", present_value_names: "present.%d.value" },
        num_attention_heads: c.numHeads,
        num_hidden_layers: c.numLayers,
        num_key_value_heads: c.numKvHeads,
      },
      eos_token_id: eos.length === 1 ? eos[0] : eos,
      pad_token_id: c.padTokenId ?? eos[0],
      type: c.modelType,
      vocab_size: c.vocabSize,
    },
    search: {
      diversity_penalty: 0.0,
      do_sample: false,
      early_stopping: true,
      length_penalty: 1.0,
      max_length: maxCache,
      min_length: 0,
      no_repeat_ngram_size: 0,
      num_beams: 1,
      num_return_sequences: 1,
      past_present_share_buffer: true,
      repetition_penalty: 1.0,
      temperature: 1.0,
      top_k: 1,
      top_p: 1.0,
    },
  };
}
