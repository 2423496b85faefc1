// Qwen2-VL pixel_values and image_grid_thw from src/vision must equal transformers.js's
// Qwen2VLImageProcessor's for the same preprocessor_config.json and the same PNG / JPEG bytes.
import { describe, expect, test } from "bun:test";
import { Qwen2VLImageProcessor, RawImage } from "@huggingface/transformers";
import { decodeImage } from "../../src/vision/decode.ts";
import { preprocessQwen2VL, qwen2vlGeometry, smartResize, type Qwen2VLPreprocessorConfig } from "../../src/vision/qwen2vl.ts";
import { qwen2vlPreprocessorConfig } from "../../src/modelkit/vlm/qwen2vl.ts";
import { makeImage } from "./images.ts";

const BASE = qwen2vlPreprocessorConfig() as Qwen2VLPreprocessorConfig;

async function reference(cfg: Qwen2VLPreprocessorConfig, bytes: Uint8Array) {
  const processor = new Qwen2VLImageProcessor(cfg as never);
  const image = await RawImage.fromBlob(new Blob([new Uint8Array(bytes)]));
  const out = (await processor(image)) as unknown as {
    pixel_values: { data: Float32Array; dims: number[] };
    image_grid_thw: { data: BigInt64Array };
  };
  return { data: out.pixel_values.data, dims: out.pixel_values.dims, grid: Array.from(out.image_grid_thw.data, Number) };
}

function maxDiff(a: Float32Array, b: Float32Array): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}

const CASES: { name: string; format: "png" | "jpeg"; w: number; h: number; cfg: Qwen2VLPreprocessorConfig; alpha?: boolean }[] = [
  { name: "wide PNG, bicubic", format: "png", w: 150, h: 70, cfg: BASE },
  { name: "tall JPEG, bicubic", format: "jpeg", w: 45, h: 130, cfg: BASE },
  { name: "tiny PNG with alpha, scaled up to the factor", format: "png", w: 20, h: 17, cfg: BASE, alpha: true },
  { name: "JPEG above max_pixels, bilinear", format: "jpeg", w: 200, h: 160, cfg: { ...BASE, resample: 2, max_pixels: 28 * 28 * 12 } },
  { name: "PNG below min_pixels, grown", format: "png", w: 60, h: 40, cfg: { ...BASE, min_pixels: 28 * 28 * 9 } },
  { name: "pixel bounds given as size", format: "png", w: 90, h: 64, cfg: { ...BASE, min_pixels: undefined, max_pixels: undefined, size: { shortest_edge: 3136, longest_edge: 28 * 28 * 6 } } },
];

describe("Qwen2-VL preprocessing matches transformers.js", () => {
  for (const c of CASES) {
    test(c.name, async () => {
      const bytes = await makeImage(c.format, c.w, c.h, c.w * 17 + c.h, c.alpha ? 4 : 3);
      const ref = await reference(c.cfg, bytes);
      const ours = await preprocessQwen2VL(c.cfg, await decodeImage(bytes));
      expect(ours.grid).toEqual(ref.grid as [number, number, number]);
      expect([ours.grid[0] * ours.grid[1] * ours.grid[2], ours.patchValues]).toEqual(ref.dims);
      expect(ours.tokens).toBe((ours.grid[1] * ours.grid[2]) / 4);
      expect(ours.data.length).toBe(ref.data.length);
      expect(maxDiff(ours.data, ref.data)).toBeLessThan(1e-4);
    });
  }

  test("different images give different patches", async () => {
    const a = await preprocessQwen2VL(BASE, await decodeImage(await makeImage("png", 50, 40, 1)));
    const b = await preprocessQwen2VL(BASE, await decodeImage(await makeImage("png", 50, 40, 2)));
    expect(maxDiff(a.data, b.data)).toBeGreaterThan(0.05);
  });

  test("smart_resize keeps multiples of the factor within the bounds", () => {
    expect(smartResize(70, 150, 28, 3136, 1e7)).toEqual([140, 84]);
    const [w, h] = smartResize(1000, 3000, 28, 3136, 28 * 28 * 100);
    expect(w % 28).toBe(0);
    expect(h % 28).toBe(0);
    expect(w * h).toBeLessThanOrEqual(28 * 28 * 100);
    expect(() => smartResize(10, 2100, 28, 3136, 1e7)).toThrow(/aspect ratio/);
  });

  test("detail low caps the image tokens; high and auto keep the processor's bounds", async () => {
    const cfg = { ...BASE, max_pixels: 28 * 28 * 1280 };
    expect(qwen2vlGeometry(cfg, "high")).toEqual(qwen2vlGeometry(cfg, "auto"));
    expect(qwen2vlGeometry(cfg, "low").maxPixels).toBe(256 * 28 * 28);
    // A processor already below the low cap is left alone.
    expect(qwen2vlGeometry({ ...BASE, max_pixels: 28 * 28 * 10 }, "low").maxPixels).toBe(28 * 28 * 10);
    const img = await decodeImage(await makeImage("jpeg", 700, 560, 5));
    const low = await preprocessQwen2VL(cfg, img, "low");
    const high = await preprocessQwen2VL(cfg, img, "high");
    expect(low.tokens).toBeLessThanOrEqual(256);
    expect(high.tokens).toBeGreaterThan(low.tokens);
  });
});
