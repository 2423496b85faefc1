// The image side of a split vision-language export (transformers.js ImageTextToText layout):
// onnx/vision_encoder.onnx, preprocessor_config.json, processor_config.json and config.json's
// image_token_id. Turns a request's images into image features and the prompt text that holds
// their tokens; the prefill then swaps those tokens' embeddings for the features. Families:
// Idefics3 / SmolVLM, and Qwen2-VL (whose image tokens also get 3-D rotary positions).
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { ImagePart } from "../types.ts";
import type { RopePlan } from "../runtime/mrope.ts";
import { hostFloats, type HostSession, type HostTensor } from "../runtime/host-session.ts";
import { modelDType } from "../runtime/decoder-spec.ts";
import { onnxFileName } from "../../onnx-dtypes.ts";
import { decodeImage } from "../../vision/decode.ts";
import { ImageInputError } from "../../vision/errors.ts";
import type { PreprocessorConfig } from "../../vision/preprocess.ts";
import { decodeDataUrl } from "../../vision/resolve.ts";
import type { ImageAdapter, PreparedImage } from "./adapter.ts";
import { Idefics3Adapter } from "./idefics3.ts";
import { Qwen2VLAdapter } from "./qwen2vl.ts";
import { ropeIndex } from "./rope-index.ts";

export interface VisionSessionOptions {
  /** Opens the encoder on the binding and provider the model's decoder uses. */
  open: (path: string) => Promise<HostSession>;
  /** Bytes of image features kept for images sent again; absent = ENCODED_CACHE_BYTES. */
  encodedCacheBytes?: number;
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
  /** image_grid_thw (Qwen2-VL), for the 3-D positions; null for other families. */
  grid: [number, number, number] | null;
}

/** Image features of one prompt: which prompt position takes which feature row. */
export interface PromptImages {
  /** Per prompt position: the feature row it takes, or -1 for ordinary tokens. */
  rowAt: Int32Array;
  features: Float32Array;
  hidden: number;
  tokenCount: number;
  /** The prompt's 3-D positions, for multimodal rotary decoders (Qwen2-VL); null otherwise. */
  rope: RopePlan | null;
}

interface ModelConfig {
  model_type?: string;
  image_token_id?: number;
  image_token_index?: number;
  vision_config?: { spatial_merge_size?: number };
}

const readJson = <T>(path: string): T | null => (existsSync(path) ? (JSON.parse(readFileSync(path, "utf8")) as T) : null);

/** The family's adapter; throws with the reason when the layout is not one we know. */
function adapterFor(dir: string, pre: PreprocessorConfig, config: ModelConfig, encoder: { inputNames: readonly string[] }): ImageAdapter {
  const proc = readJson<{ image_seq_len?: number; processor_class?: string }>(join(dir, "processor_config.json")) ?? {};
  const kind = proc.processor_class ?? pre.processor_class ?? pre.image_processor_type ?? "";
  if (config.model_type === "qwen2_vl" || /^qwen2vl/i.test(kind)) {
    const grid = ["grid_thw", "image_grid_thw"].find((n) => encoder.inputNames.includes(n));
    if (!grid || !encoder.inputNames.includes("pixel_values")) {
      throw new Error(`the Qwen2-VL vision encoder must take pixel_values and grid_thw (it takes ${encoder.inputNames.join(", ")})`);
    }
    return new Qwen2VLAdapter(pre, grid, config.vision_config?.spatial_merge_size ?? 2);
  }
  if (/idefics3|smolvlm/i.test(kind)) {
    if (!proc.image_seq_len) throw new Error("processor_config.json has no image_seq_len");
    return new Idefics3Adapter(pre, proc.image_seq_len);
  }
  throw new Error(`image processor '${kind || "unknown"}' is not supported (supported: Idefics3 / SmolVLM and Qwen2-VL layouts)`);
}

/**
 * Encoded images kept per model, least recently used first out: a chat about an image sends it
 * again with every turn, and with the prompt's prefix cached (see worker/prefix-key.ts) encoding
 * it again would be most of the turn's work.
 */
export const ENCODED_CACHE_BYTES = 64 * 2 ** 20;

export class VisionModel {
  /** By SHA-256 of the data URL and the detail asked for; insertion order is recency. */
  private readonly encoded = new Map<string, EncodedImage>();
  private encodedBytes = 0;
  /** Images answered from the cache (tests, diagnostics). */
  cacheHits = 0;

  private constructor(
    private readonly encoder: HostSession,
    private readonly adapter: ImageAdapter,
    readonly imageTokenId: number,
    private readonly encodedCacheBytes: number,
  ) {}

  /** The directory's vision model, or null when it has no vision encoder (a text-only model). */
  static async load(dir: string, opts: VisionSessionOptions): Promise<VisionModel | null> {
    // The same dtype's encoder as the decoder (vision_encoder_q4.onnx beside decoder_model_merged_q4.onnx).
    const file = onnxFileName("vision_encoder", modelDType(dir));
    const path = [join(dir, "onnx", file), join(dir, file)].find((p) => existsSync(p));
    if (!path) return null;
    const pre = readJson<PreprocessorConfig>(join(dir, "preprocessor_config.json"));
    if (!pre) throw new Error("the model has a vision encoder but no preprocessor_config.json");
    const config = readJson<ModelConfig>(join(dir, "config.json")) ?? {};
    const imageTokenId = config.image_token_id ?? config.image_token_index;
    if (imageTokenId === undefined) throw new Error("config.json has no image_token_id");
    const encoder = await opts.open(path);
    try {
      return new VisionModel(encoder, adapterFor(dir, pre, config, encoder), imageTokenId, opts.encodedCacheBytes ?? ENCODED_CACHE_BYTES);
    } catch (e) {
      await encoder.release();
      throw e;
    }
  }

  /** What the chat template writes for each image, expanded per image by `encode`'s promptText. */
  get placeholder(): string {
    return this.adapter.placeholder;
  }

  /** True when image tokens take 3-D positions (the decoder must take [3, batch, seq] position_ids). */
  get needs3dPositions(): boolean {
    return this.adapter.mergeSize !== null;
  }

  /** Decodes, preprocesses and encodes one image (or finds it encoded already); failures name the part. */
  async encode(img: RequestImage): Promise<EncodedImage> {
    const url = img.part.image_url.url;
    const key = createHash("sha256").update(url).update(`\n${img.part.image_url.detail ?? "auto"}`).digest("base64");
    const cached = this.encoded.get(key);
    if (cached) {
      this.encoded.delete(key);
      this.encoded.set(key, cached);
      this.cacheHits++;
      return cached;
    }
    const image = await this.encodeNew(img);
    this.remember(key, image);
    return image;
  }

  private remember(key: string, image: EncodedImage): void {
    const bytes = image.features.byteLength;
    if (bytes > this.encodedCacheBytes) return;
    for (const [k, old] of this.encoded) {
      if (this.encodedBytes + bytes <= this.encodedCacheBytes) break;
      this.encoded.delete(k);
      this.encodedBytes -= old.features.byteLength;
    }
    this.encoded.set(key, image);
    this.encodedBytes += bytes;
  }

  private async encodeNew(img: RequestImage): Promise<EncodedImage> {
    const url = img.part.image_url.url;
    const fail = (why: string) => new ImageInputError(`Invalid image in ${img.param}: ${why}.`, img.param);
    if (!/^data:/i.test(url)) throw fail("the image was not resolved to inline data before reaching the engine");
    const half = this.encoder.inputType("pixel_values") === "float16";
    let prepared: PreparedImage;
    try {
      const raw = await decodeImage(decodeDataUrl(url, Number.MAX_SAFE_INTEGER));
      prepared = await this.adapter.prepare(raw, img.part.image_url.detail, half ? "float16" : "float32");
    } catch (e) {
      throw e instanceof ImageInputError ? fail(e.message) : e;
    }
    const out = await this.encoder.run(prepared.feeds as Record<string, HostTensor>);
    const t = out.image_features ?? out[this.encoder.outputNames[0]!]!;
    const hidden = t.dims[t.dims.length - 1]!;
    const features = hostFloats(t);
    const rows = features.length / hidden;
    if (rows !== prepared.rows) throw new Error(`the vision encoder gave ${rows} feature rows for an image of ${prepared.rows} image tokens`);
    return { promptText: prepared.promptText, features, rows, grid: prepared.grid };
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
    let rope: RopePlan | null = null;
    if (this.adapter.mergeSize !== null) {
      rope = ropeIndex(ids, images.map((i) => ({ grid: i.grid! })), this.imageTokenId, this.adapter.mergeSize);
      if (!rope) return null;
    }
    const hidden = total > 0 ? images[0]!.features.length / images[0]!.rows : 0;
    const features = new Float32Array(total * hidden);
    let at = 0;
    for (const img of images) {
      features.set(img.features, at);
      at += img.features.length;
    }
    return { rowAt, features, hidden, tokenCount: total, rope };
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
