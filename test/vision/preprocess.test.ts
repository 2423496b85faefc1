// pixel_values from src/vision must equal transformers.js's Idefics3 (SmolVLM) image processor's
// for the same preprocessor_config.json and the same PNG / JPEG bytes.
import { describe, expect, test } from "bun:test";
import { Idefics3ImageProcessor, RawImage } from "@huggingface/transformers";
import { decodeImage } from "../../src/vision/decode.ts";
import { preprocessImage, type PreprocessorConfig } from "../../src/vision/preprocess.ts";
import { idefics3PreprocessorConfig } from "../../src/modelkit/vlm/synthetic.ts";
import { makeImage } from "./images.ts";

// SmolVLM's preprocessor_config.json with the sizes scaled down (1536/384 -> 96/32) to stay fast.
const SMOLVLM_LIKE = idefics3PreprocessorConfig(32, 96) as PreprocessorConfig;

async function reference(cfg: PreprocessorConfig, bytes: Uint8Array, split?: boolean) {
  const processor = new Idefics3ImageProcessor(cfg as never);
  const image = await RawImage.fromBlob(new Blob([new Uint8Array(bytes)]));
  const out = (await processor(image, { do_image_splitting: split ?? null, return_row_col_info: true } as never)) as unknown as {
    pixel_values: { data: Float32Array; dims: number[] };
    rows: number[][];
    cols: number[][];
  };
  return out;
}

function maxDiff(a: Float32Array, b: Float32Array): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}

const CASES: { name: string; format: "png" | "jpeg"; w: number; h: number; cfg: PreprocessorConfig; split?: boolean; alpha?: boolean }[] = [
  { name: "wide PNG, split into tiles (lanczos)", format: "png", w: 150, h: 70, cfg: SMOLVLM_LIKE },
  { name: "tall JPEG, split into tiles (lanczos)", format: "jpeg", w: 45, h: 130, cfg: SMOLVLM_LIKE },
  { name: "PNG with alpha, no splitting (detail low)", format: "png", w: 77, h: 61, cfg: SMOLVLM_LIKE, split: false, alpha: true },
  { name: "small JPEG, bicubic, not split", format: "jpeg", w: 20, h: 18, cfg: { ...SMOLVLM_LIKE, resample: 3, size: { longest_edge: 30 } } },
  { name: "PNG, bilinear, other mean/std", format: "png", w: 64, h: 48, cfg: { ...SMOLVLM_LIKE, resample: 2, image_mean: [0.48, 0.45, 0.4], image_std: [0.26, 0.26, 0.27] } },
];

describe("preprocessing matches transformers.js", () => {
  for (const c of CASES) {
    test(c.name, async () => {
      const bytes = await makeImage(c.format, c.w, c.h, c.w * 31 + c.h, c.alpha ? 4 : 3);
      const ref = await reference(c.cfg, bytes, c.split);
      const ours = await preprocessImage(c.cfg, await decodeImage(bytes), c.split);
      const [, n, ch, h, w] = ref.pixel_values.dims as [number, number, number, number, number];
      expect([ours.count, 3, ours.height, ours.width]).toEqual([n, ch, h, w]);
      expect([ours.rows, ours.cols]).toEqual([ref.rows[0]![0]!, ref.cols[0]![0]!]);
      expect(ours.data.length).toBe(ref.pixel_values.data.length);
      expect(maxDiff(ours.data, ref.pixel_values.data)).toBeLessThan(1e-4);
    });
  }

  test("different images give different pixel values", async () => {
    const a = await preprocessImage(SMOLVLM_LIKE, await decodeImage(await makeImage("png", 50, 40, 1)));
    const b = await preprocessImage(SMOLVLM_LIKE, await decodeImage(await makeImage("png", 50, 40, 2)));
    expect(maxDiff(a.data, b.data)).toBeGreaterThan(0.05);
  });

  test("WebP and GIF (first frame) decode to their pixels", async () => {
    for (const format of ["webp", "gif"] as const) {
      const img = await decodeImage(await makeImage(format, 23, 17, 9));
      expect([img.width, img.height]).toEqual([23, 17]);
      const tiles = await preprocessImage(SMOLVLM_LIKE, img);
      expect(tiles.count).toBeGreaterThan(0);
    }
  });

  test("a corrupt image is refused with a reason", async () => {
    const bytes = await makeImage("png", 10, 10, 3);
    await expect(decodeImage(bytes.subarray(0, 40))).rejects.toThrow(/could not be decoded/);
  });
});

test("an image with more pixels than the limit is refused before decoding", async () => {
  const { MAX_INPUT_PIXELS } = await import("../../src/vision/decode.ts");
  // A 1x1 PNG whose header is rewritten to claim 10000 x 10000: only the header gets read.
  const png = await makeImage("png", 1, 1, 1);
  const view = new DataView(png.buffer, png.byteOffset);
  view.setUint32(16, 10000);
  view.setUint32(20, 10000);
  view.setUint32(29, crc32(png.subarray(12, 29)));
  expect(10000 * 10000).toBeGreaterThan(MAX_INPUT_PIXELS);
  await expect(decodeImage(png)).rejects.toThrow(/could not be decoded.*pixel limit/i);
});

function crc32(bytes: Uint8Array): number {
  let c = 0xffffffff;
  for (const b of bytes) {
    c ^= b;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0xedb88320 : c >>> 1;
  }
  return (c ^ 0xffffffff) >>> 0;
}
