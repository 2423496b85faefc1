// A synthetic vision-language model in the split layout transformers.js loads for Idefics3 /
// SmolVLM: onnx/vision_encoder.onnx, onnx/embed_tokens.onnx and onnx/decoder_model_merged.onnx
// (the Llama decoder fed inputs_embeds), preprocessor_config.json (Idefics3 tiling) and
// processor_config.json (image_seq_len). Random weights from a seed: for tests only.

import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { type GraphVariant, type LlamaConfig, type WeightDType, hfConfigJson } from "../llama/config.ts";
import { buildDecoderModel, gqaHeadDim } from "../llama/graph.ts";
import { randomWeights } from "../llama/random.ts";
import type { SluiceCapabilities, SluiceJson } from "../modeldir.ts";
import { Prng } from "../prng.ts";
import { type SpecialToken, byteLevelTokenizerJson, learnByteBpe } from "../tokenizer/bytelevel.ts";
import { CHATML_SPECIALS, CHATML_SPECIAL_TOKENS_MAP, chatmlTokenizerConfig } from "../tokenizer/chatml.ts";
import { TRAINING_TEXT } from "../tokenizer/corpus.ts";
import { type VisionEncoderShape, buildEmbedTokens, buildVisionEncoder, tokensPerTile } from "./graphs.ts";

export const IMAGE_TOKEN = "<image>";
export const FAKE_IMAGE_TOKEN = "<fake_token_around_image>";
export const GLOBAL_IMAGE_TOKEN = "<global-img>";
/** Idefics3 has tile markers <row_r_col_c> for grids up to 6 x 6. */
const MAX_GRID = 6;

/** ChatML whose user turns loop over content parts, writing `<image>` for each image part. */
export const VLM_CHAT_TEMPLATE = `{%- for message in messages %}
{{- '<|im_start|>' + message['role'] + '\\n' }}
{%- if message['content'] is string %}{{- message['content'] }}
{%- else %}{%- for part in message['content'] %}
{%- if part['type'] == 'image' %}{{- '<image>' }}{%- elif part['type'] == 'text' %}{{- part['text'] }}{%- endif %}
{%- endfor %}{%- endif %}
{{- '<|im_end|>\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}`;

export interface SyntheticVlmSpec {
  id?: string;
  seed?: number;
  variant?: GraphVariant;
  /** Decoder and token embeddings (inputs_embeds) type; the vision encoder stays float32. */
  dtype?: WeightDType;
  /** Longest edge after the first resize (preprocessor size.longest_edge). */
  longestEdge?: number;
  /** Tile side (max_image_size.longest_edge). */
  tileSize?: number;
  patchSize?: number;
  contextLength?: number;
  capabilities?: Partial<SluiceCapabilities>;
}

export interface SyntheticVlmInfo {
  dir: string;
  sluice: SluiceJson;
  config: LlamaConfig;
  imageTokenId: number;
  imageSeqLen: number;
}

function writeJson(path: string, value: unknown): void {
  writeFileSync(path, `${JSON.stringify(value, null, 2)}\n`);
}

export function buildSyntheticVlm(outDir: string, spec: SyntheticVlmSpec = {}): SyntheticVlmInfo {
  const seed = spec.seed ?? 7;
  const variant = spec.variant ?? "standard";
  const dtype = spec.dtype ?? "float32";
  const tileSize = spec.tileSize ?? 32;
  const patchSize = spec.patchSize ?? 8;
  const longestEdge = spec.longestEdge ?? 64;
  const contextLength = spec.contextLength ?? 1024;

  const specials: SpecialToken[] = [...CHATML_SPECIALS, { content: FAKE_IMAGE_TOKEN, special: true }, { content: IMAGE_TOKEN, special: true }, { content: GLOBAL_IMAGE_TOKEN, special: true }];
  for (let r = 1; r <= MAX_GRID; r++) for (let c = 1; c <= MAX_GRID; c++) specials.push({ content: `<row_${r}_col_${c}>`, special: true });
  const bpe = learnByteBpe(TRAINING_TEXT, 400);
  const { json, addedTokens } = byteLevelTokenizerJson(bpe, specials);
  const id = (content: string) => addedTokens.find((t) => t.content === content)!.id;
  const vocab = bpe.vocab.size + addedTokens.length;

  const config: LlamaConfig = {
    modelType: "llama",
    hiddenSize: 64,
    intermediateSize: 128,
    numLayers: 2,
    numHeads: 4,
    numKvHeads: 2,
    headDim: 16,
    vocabSize: vocab,
    maxPositionEmbeddings: contextLength,
    rmsNormEps: 1e-6,
    ropeTheta: 10000,
    tieWordEmbeddings: true,
    qkNorm: false,
    bosTokenId: id("<|endoftext|>"),
    eosTokenId: id("<|im_end|>"),
    padTokenId: id("<|endoftext|>"),
  };
  const weights = randomWeights(config, seed);
  const vision: VisionEncoderShape = { tileSize, patchSize, visionHidden: 32, textHidden: config.hiddenSize };
  const imageSeqLen = tokensPerTile(vision);
  const rng = new Prng(seed ^ 0x7151);
  const fanIn = 3 * patchSize * patchSize;
  const visionWeights = {
    patchEmbed: rng.uniformArray(vision.visionHidden * fanIn, 2 / Math.sqrt(fanIn)),
    patchBias: rng.uniformArray(vision.visionHidden, 0.1),
    positions: rng.uniformArray(imageSeqLen * vision.visionHidden, 0.2),
    // Image features at the scale of the (tied, scaled) token embeddings.
    projection: rng.uniformArray(vision.visionHidden * config.hiddenSize, 0.4 / Math.sqrt(vision.visionHidden)),
  };

  const onnxDir = join(outDir, "onnx");
  mkdirSync(onnxDir, { recursive: true });
  writeFileSync(join(onnxDir, "vision_encoder.onnx"), buildVisionEncoder(vision, visionWeights).model);
  writeFileSync(join(onnxDir, "embed_tokens.onnx"), buildEmbedTokens(vocab, config.hiddenSize, weights.embed, dtype).model);
  const decoder = buildDecoderModel(config, weights, { variant, dtype, rotaryCacheLength: contextLength, inputsEmbeds: true });
  writeFileSync(join(onnxDir, "decoder_model_merged.onnx"), decoder.model);

  const textConfig = hfConfigJson(config, dtype);
  writeJson(join(outDir, "config.json"), {
    architectures: ["Idefics3ForConditionalGeneration"],
    model_type: "idefics3",
    image_token_id: id(IMAGE_TOKEN),
    scale_factor: 1,
    tie_word_embeddings: true,
    vocab_size: vocab,
    text_config: textConfig,
    vision_config: { model_type: "idefics3_vision", hidden_size: vision.visionHidden, image_size: tileSize, patch_size: patchSize, num_channels: 3 },
    torch_dtype: dtype,
    transformers_version: "4.51.0",
  });
  writeJson(join(outDir, "generation_config.json"), {
    bos_token_id: config.bosTokenId,
    eos_token_id: [id("<|im_end|>"), id("<|endoftext|>")],
    pad_token_id: config.padTokenId,
    transformers_version: "4.51.0",
  });
  writeJson(join(outDir, "tokenizer.json"), json);
  writeJson(join(outDir, "tokenizer_config.json"), { ...chatmlTokenizerConfig(addedTokens, contextLength), chat_template: VLM_CHAT_TEMPLATE, processor_class: "Idefics3Processor" });
  writeJson(join(outDir, "special_tokens_map.json"), CHATML_SPECIAL_TOKENS_MAP);
  writeJson(join(outDir, "preprocessor_config.json"), idefics3PreprocessorConfig(tileSize, longestEdge));
  writeJson(join(outDir, "processor_config.json"), { image_seq_len: imageSeqLen, processor_class: "Idefics3Processor" });
  const sluice: SluiceJson = {
    id: spec.id ?? "synthetic/tiny-vlm",
    display_name: "Synthetic tiny vision-language model (random weights)",
    context_length: contextLength,
    capabilities: { tools: false, structured_output: false, images: true, ...spec.capabilities },
    description: `Synthetic Idefics3-layout vision-language model with random weights (seed ${seed}); its output is noise. For tests only.`,
    graph: {
      variant,
      dtype,
      kv_cache_dtype: dtype,
      logits_dtype: dtype,
      past_present_share_buffer: variant === "fused",
      max_cache_length: contextLength,
      kv_head_dim: variant === "fused" ? gqaHeadDim(config.headDim) : config.headDim,
      external_data: false,
    },
  };
  writeJson(join(outDir, "sluice.json"), sluice);
  return { dir: outDir, sluice, config, imageTokenId: id(IMAGE_TOKEN), imageSeqLen };
}

/** SmolVLM's preprocessor_config.json (Idefics3ImageProcessor) for a tile size and longest edge. */
export function idefics3PreprocessorConfig(tileSize: number, longestEdge: number) {
  return {
    do_convert_rgb: true,
    do_image_splitting: true,
    do_normalize: true,
    do_pad: true,
    do_rescale: true,
    do_resize: true,
    image_mean: [0.5, 0.5, 0.5],
    image_processor_type: "Idefics3ImageProcessor",
    image_std: [0.5, 0.5, 0.5],
    max_image_size: { longest_edge: tileSize },
    processor_class: "Idefics3Processor",
    resample: 1,
    rescale_factor: 1 / 255,
    size: { longest_edge: longestEdge },
  };
}
