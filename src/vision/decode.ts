// Image decoding and resampling through sharp (libvips). sharp is what transformers.js uses in
// Node, so decoding, EXIF orientation and resizing here match its RawImage bit for bit; the same
// calls are made in the same order (see RawImage.fromBlob / resize in transformers.js).
import type { Sharp } from "sharp";
import { ImageInputError } from "./errors.ts";
import { nativeCall } from "../native-calls.ts";

/** Interleaved 8-bit pixels, row-major (height, width, channels). */
export interface RawImage {
  data: Uint8Array;
  width: number;
  height: number;
  channels: number;
}

/** PIL's resampling codes as they appear in preprocessor_config.json's `resample`. */
const RESAMPLE: Record<number, "nearest" | "lanczos" | "bilinear" | "bicubic"> = {
  0: "nearest",
  1: "lanczos",
  2: "bilinear",
  3: "bicubic",
  // Box and hamming have no libvips kernel; transformers.js uses bilinear for them too.
  4: "bilinear",
  5: "bilinear",
};

// Loaded on first use: text-only models never load libvips, and a missing image library fails
// only the requests that carry images.
let sharpModule: Promise<typeof import("sharp").default> | null = null;
const loadSharp = () => (sharpModule ??= import("sharp").then((m) => m.default));

async function toRaw(img: Sharp): Promise<RawImage> {
  const meta = await nativeCall(() => img.metadata());
  const { data, info } = await nativeCall(() => img.rotate().raw().toBuffer({ resolveWithObject: true }));
  const out: RawImage = { data: new Uint8Array(data.buffer, data.byteOffset, data.byteLength), width: info.width, height: info.height, channels: info.channels };
  return meta.channels !== undefined && meta.channels !== out.channels ? convertChannels(out, meta.channels) : out;
}

/** Larger images are refused before their pixels are decoded (a decompression bomb guard). */
export const MAX_INPUT_PIXELS = 64 * 1024 * 1024;

/** Sides of one image may differ by at most this factor (as Qwen2-VL's processor requires). */
export const MAX_ASPECT_RATIO = 200;

/**
 * Refuses an image by its header alone, before any pixel is decoded: too many pixels (a
 * decompression bomb) or sides so unequal that resizing would make one of them zero.
 */
export async function checkImageSize(bytes: Uint8Array): Promise<{ width: number; height: number }> {
  let width: number | undefined;
  let height: number | undefined;
  try {
    const sharp = await loadSharp();
    ({ width, height } = await sharp(bytes, { failOn: "error", limitInputPixels: false }).metadata());
  } catch (e) {
    throw new ImageInputError(`the image could not be decoded (${(e as Error).message})`);
  }
  if (!width || !height) throw new ImageInputError("the image has no pixels");
  if (width * height > MAX_INPUT_PIXELS) {
    throw new ImageInputError(`the image is ${width}×${height} pixels, more than the limit of ${MAX_INPUT_PIXELS} pixels`);
  }
  if (Math.max(width, height) / Math.min(width, height) > MAX_ASPECT_RATIO) {
    throw new ImageInputError(`the image is ${width}×${height} pixels: its sides may differ by a factor of at most ${MAX_ASPECT_RATIO}`);
  }
  return { width, height };
}

/** Decodes PNG, JPEG, WebP or GIF (its first frame), applying EXIF orientation. */
export async function decodeImage(bytes: Uint8Array): Promise<RawImage> {
  try {
    const sharp = await loadSharp();
    return await toRaw(sharp(bytes, { failOn: "error", limitInputPixels: MAX_INPUT_PIXELS }));
  } catch (e) {
    throw new ImageInputError(`the image could not be decoded (${(e as Error).message})`);
  }
}

function convertChannels(img: RawImage, channels: number): RawImage {
  if (channels === img.channels) return img;
  if (channels === 3) return toRgb(img);
  const n = img.width * img.height;
  const data = new Uint8Array(n * channels);
  for (let i = 0; i < n; i++) {
    const r = img.data[i * img.channels]!;
    const g = img.channels >= 3 ? img.data[i * img.channels + 1]! : r;
    const b = img.channels >= 3 ? img.data[i * img.channels + 2]! : r;
    const a = img.channels === 4 ? img.data[i * 4 + 3]! : img.channels === 2 ? img.data[i * 2 + 1]! : 255;
    if (channels === 1) data[i] = Math.round(0.2989 * r + 0.587 * g + 0.114 * b);
    else if (channels === 4) data.set([r, g, b, a], i * 4);
    else throw new ImageInputError(`images with ${channels} channels are not supported`);
  }
  return { data, width: img.width, height: img.height, channels };
}

/** RGB without compositing: alpha is dropped and grey replicated, as transformers.js does. */
export function toRgb(img: RawImage): RawImage {
  if (img.channels === 3) return img;
  const n = img.width * img.height;
  const data = new Uint8Array(n * 3);
  for (let i = 0; i < n; i++) {
    const s = i * img.channels;
    if (img.channels <= 2) data.fill(img.data[s]!, i * 3, i * 3 + 3);
    else data.set(img.data.subarray(s, s + 3), i * 3);
  }
  return { data, width: img.width, height: img.height, channels: 3 };
}

/** Resizes with the preprocessor's PIL resampling code, the way transformers.js does with sharp. */
export async function resizeImage(img: RawImage, width: number, height: number, resample: number): Promise<RawImage> {
  if (img.width === width && img.height === height) return img;
  const method = RESAMPLE[resample];
  if (!method) throw new Error(`resampling method ${resample} is not supported`);
  const sharp = await loadSharp();
  let s = sharp(img.data, { raw: { width: img.width, height: img.height, channels: img.channels as 1 | 2 | 3 | 4 } });
  s =
    method === "lanczos"
      ? s.resize({ width, height, fit: "fill", kernel: "lanczos3" })
      : s.affine([width / img.width, 0, 0, height / img.height], { interpolator: method === "bilinear" ? "bilinear" : method === "bicubic" ? "bicubic" : "nearest" });
  return toRaw(s);
}
