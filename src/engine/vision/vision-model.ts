// The image side of a split vision-language export (transformers.js ImageTextToText layout):
// onnx/vision_encoder.onnx, preprocessor_config.json, processor_config.json and config.json's
// image_token_id. Turns a request's images into image features and the prompt text that holds
// their tokens; the prefill then swaps those tokens' embeddings for the features.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import * as ort from "onnxruntime-node";
import type { ImagePart } from "../types.ts";
import { floatInput, floatSlice } from "../runtime/tensors.ts";
import { decodeImage } from "../../vision/decode.ts";
import { ImageInputError } from "../../vision/errors.ts";
import { preprocessImage, type PreprocessorConfig } from "../../vision/preprocess.ts";
import { decodeDataUrl } from "../../vision/resolve.ts";
import { imagePromptString, type ImageTokens } from "./placeholders.ts";

export interface VisionSessionOptions {
  providers: ("cuda" | "cpu")[];
  threads: number;
}

/** An image part of the request and the param that names it (`messages[i].content[j]`). */
export interface RequestImage {
  part: ImagePart;
  param: string;
}

export interface EncodedImage {
  /** What replaces the image's placeholder in the rendered prompt. */
  promptText: string;
  /** [rows, hidden] */
  features: Float32Array;
  rows: number;
}

/** Image features of one prompt: which prompt position takes which feature row. */
export interface PromptImages {
  /** Per prompt position: the feature row it takes, or -1 for ordinary tokens. */
  rowAt: Int32Array;
  features: Float32Array;
  hidden: number;
  tokenCount: number;
}

interface ModelConfig {
  image_token_id?: number;
  image_token_index?: number;
}

const readJson = <T>(path: string): T | null => (existsSync(path) ? (JSON.parse(readFileSync(path, "utf8")) as T) : null);

export class VisionModel {
  private constructor(
    private readonly encoder: ort.InferenceSession,
    readonly preprocessor: PreprocessorConfig,
    readonly imageSeqLen: number,
    readonly imageTokenId: number,
    readonly tokens: ImageTokens,
  ) {}

  /** The directory's vision model, or null when it has no vision encoder (a text-only model). */
  static async load(dir: string, opts: VisionSessionOptions): Promise<VisionModel | null> {
    const path = [join(dir, "onnx", "vision_encoder.onnx"), join(dir, "vision_encoder.onnx")].find((p) => existsSync(p));
    if (!path) return null;
    const pre = readJson<PreprocessorConfig>(join(dir, "preprocessor_config.json"));
    if (!pre) throw new Error("the model has a vision encoder but no preprocessor_config.json");
    const proc = readJson<{ image_seq_len?: number; processor_class?: string }>(join(dir, "processor_config.json")) ?? {};
    const config = readJson<ModelConfig>(join(dir, "config.json")) ?? {};
    const imageTokenId = config.image_token_id ?? config.image_token_index;
    if (imageTokenId === undefined) throw new Error("config.json has no image_token_id");
    const kind = proc.processor_class ?? pre.processor_class ?? pre.image_processor_type ?? "";
    if (!/idefics3|smolvlm/i.test(kind)) {
      throw new Error(`image processor '${kind || "unknown"}' is not supported (supported: Idefics3 / SmolVLM layout)`);
    }
    if (!proc.image_seq_len) throw new Error("processor_config.json has no image_seq_len");
    const encoder = await ort.InferenceSession.create(path, {
      executionProviders: opts.providers.map((p) => ({ name: p })),
      graphOptimizationLevel: "all",
      ...(opts.threads > 0 ? { intraOpNumThreads: opts.threads } : {}),
      interOpNumThreads: 1,
    });
    const tokens: ImageTokens = { image: "<image>", fake: "<fake_token_around_image>", global: "<global-img>" };
    return new VisionModel(encoder, pre, proc.image_seq_len, imageTokenId, tokens);
  }

  /** Decodes, preprocesses and encodes one image; failures name the part. */
  async encode(img: RequestImage): Promise<EncodedImage> {
    const url = img.part.image_url.url;
    const fail = (why: string) => new ImageInputError(`Invalid image in ${img.param}: ${why}.`, img.param);
    if (!/^data:/i.test(url)) throw fail("the image was not resolved to inline data before reaching the engine");
    let tiles;
    try {
      const raw = await decodeImage(decodeDataUrl(url, Number.MAX_SAFE_INTEGER));
      // detail "low": one global tile; "high" and "auto": the processor's own tiling.
      tiles = await preprocessImage(this.preprocessor, raw, img.part.image_url.detail === "low" ? false : undefined);
    } catch (e) {
      throw e instanceof ImageInputError ? fail(e.message) : e;
    }
    const { count, height, width } = tiles;
    const pixelType = this.encoder.inputMetadata.find((m) => m.name === "pixel_values");
    const half = pixelType?.isTensor === true && pixelType.type === "float16";
    const out = await this.encoder.run({
      pixel_values: floatInput(half ? "float16" : "float32", tiles.data, [1, count, 3, height, width]),
      pixel_attention_mask: new ort.Tensor("bool", new Uint8Array(count * height * width).fill(1), [1, count, height, width]),
    });
    const t = out.image_features ?? out[this.encoder.outputNames[0]!]!;
    const hidden = t.dims[t.dims.length - 1]!;
    const features = floatSlice(t, 0, t.size);
    const rows = features.length / hidden;
    const expected = count * this.imageSeqLen;
    if (rows !== expected) throw new Error(`the vision encoder gave ${rows} feature rows for ${count} tiles; image_seq_len ${this.imageSeqLen} needs ${expected}`);
    return { promptText: imagePromptString(tiles.rows, tiles.cols, this.imageSeqLen, this.tokens), features, rows };
  }

  /** Maps the tokenised prompt's image tokens onto the images' feature rows, in order. */
  placeFeatures(ids: number[], images: EncodedImage[]): PromptImages | null {
    const total = images.reduce((n, i) => n + i.rows, 0);
    const rowAt = new Int32Array(ids.length).fill(-1);
    let row = 0;
    ids.forEach((id, p) => {
      if (id === this.imageTokenId) rowAt[p] = row++;
    });
    if (row !== total) return null;
    const hidden = total > 0 ? images[0]!.features.length / images[0]!.rows : 0;
    const features = new Float32Array(total * hidden);
    let at = 0;
    for (const img of images) {
      features.set(img.features, at);
      at += img.features.length;
    }
    return { rowAt, features, hidden, tokenCount: total };
  }

  async release(): Promise<void> {
    await this.encoder.release();
  }
}

/** Prompt positions [start, start + embeds rows) with image tokens take their feature rows. */
export function mergeImageFeatures(embeds: Float32Array, tokens: number, images: PromptImages, start: number): Float32Array {
  const width = images.rowAt.length;
  const hidden = images.hidden;
  const n = tokens;
  if (embeds.length !== n * hidden) {
    throw new Error(`token embeddings of size ${embeds.length / n} do not match image features of size ${hidden}`);
  }
  for (let i = 0; i < n && start + i < width; i++) {
    const row = images.rowAt[start + i]!;
    if (row >= 0) embeds.set(images.features.subarray(row * hidden, (row + 1) * hidden), i * hidden);
  }
  return embeds;
}
