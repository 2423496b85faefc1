// Qwen2-VL's image processor, as transformers.js's Qwen2VLImageProcessor: smart_resize to
// multiples of patch_size * merge_size within [min_pixels, max_pixels], rescale and normalise,
// repeat a still image temporal_patch_size times, then cut it into patches ordered so that each
// merge_size x merge_size group of neighbouring patches is consecutive (the vision encoder's
// patch merger folds those groups into one image token).
import type { RawImage } from "./decode.ts";
import { ImageInputError } from "./errors.ts";
import { baseProcess, type PreprocessorConfig } from "./preprocess.ts";

export interface Qwen2VLPreprocessorConfig extends PreprocessorConfig {
  min_pixels?: number;
  max_pixels?: number;
  patch_size?: number;
  merge_size?: number;
  temporal_patch_size?: number;
}

/** Patches of one image: pixel_values [gridT * gridH * gridW, 3 * temporal * patch * patch]. */
export interface Qwen2VLPatches {
  data: Float32Array;
  /** image_grid_thw, in patches (before merging). */
  grid: [number, number, number];
  /** Values per patch row (3 * temporal_patch_size * patch_size²). */
  patchValues: number;
  /** Image tokens the encoder makes of it: gridT * gridH * gridW / merge_size². */
  tokens: number;
}

/**
 * Image detail as requested (`image_url.detail`). "low" caps the image at LOW_DETAIL_TOKENS
 * image tokens (256: about 448 x 448 pixels at Qwen2-VL's 28-pixel merged patches), or the
 * processor's own max_pixels when that is smaller; "high" and "auto" use the processor's bounds.
 */
export type ImageDetail = "low" | "high" | "auto";
export const LOW_DETAIL_TOKENS = 256;

/** transformers.js smart_resize: [width, height] as multiples of `factor`, within the pixel bounds. */
export function smartResize(height: number, width: number, factor: number, minPixels: number, maxPixels: number): [number, number] {
  if (height < factor || width < factor) {
    const scale = Math.max(factor / height, factor / width);
    height = Math.round(height * scale);
    width = Math.round(width * scale);
  }
  if (Math.max(height, width) / Math.min(height, width) > 200) {
    throw new ImageInputError(`the image's aspect ratio must be smaller than 200, got ${Math.max(height, width) / Math.min(height, width)}`);
  }
  let h = Math.round(height / factor) * factor;
  let w = Math.round(width / factor) * factor;
  if (h * w > maxPixels) {
    const beta = Math.sqrt((height * width) / maxPixels);
    h = Math.max(factor, Math.floor(height / beta / factor) * factor);
    w = Math.max(factor, Math.floor(width / beta / factor) * factor);
  } else if (h * w < minPixels) {
    const beta = Math.sqrt(minPixels / (height * width));
    h = Math.ceil((height * beta) / factor) * factor;
    w = Math.ceil((width * beta) / factor) * factor;
  }
  return [w, h];
}

interface Geometry {
  patch: number;
  merge: number;
  temporal: number;
  minPixels: number;
  maxPixels: number;
}

/** The processor's sizes, with the defaults of Qwen2-VL's own preprocessor_config.json. */
export function qwen2vlGeometry(cfg: Qwen2VLPreprocessorConfig, detail: ImageDetail = "auto"): Geometry {
  // Configs name the bounds min_pixels / max_pixels, or (newer) size.shortest_edge / longest_edge.
  const size = typeof cfg.size === "object" ? (cfg.size as { shortest_edge?: number; longest_edge?: number; min_pixels?: number; max_pixels?: number }) : undefined;
  const patch = cfg.patch_size ?? 14;
  const merge = cfg.merge_size ?? 2;
  let minPixels = cfg.min_pixels ?? size?.shortest_edge ?? size?.min_pixels ?? 56 * 56;
  let maxPixels = cfg.max_pixels ?? size?.longest_edge ?? size?.max_pixels ?? 28 * 28 * 1280;
  if (detail === "low") {
    maxPixels = Math.min(maxPixels, LOW_DETAIL_TOKENS * (patch * merge) ** 2);
    minPixels = Math.min(minPixels, maxPixels);
  }
  return { patch, merge, temporal: cfg.temporal_patch_size ?? 2, minPixels, maxPixels };
}

/** One still image through Qwen2VLImageProcessor. */
export async function preprocessQwen2VL(cfg: Qwen2VLPreprocessorConfig, img: RawImage, detail: ImageDetail = "auto"): Promise<Qwen2VLPatches> {
  const g = qwen2vlGeometry(cfg, detail);
  const factor = g.patch * g.merge;
  // Python's processor resizes unless told not to; a config without `size` still has pixel bounds.
  const planes = await baseProcess(cfg, img, (w, h) => (cfg.do_resize === false ? null : smartResize(h, w, factor, g.minPixels, g.maxPixels)));
  const { height, width } = planes;
  if (height % factor !== 0 || width % factor !== 0) {
    throw new Error(`the image is ${width}x${height}, not a multiple of ${factor} (do_resize is off)`);
  }
  const gh = height / g.patch;
  const gw = width / g.patch;
  const P = g.patch;
  const M = g.merge;
  const T = g.temporal;
  const patchValues = 3 * T * P * P;
  const data = new Float32Array(gh * gw * patchValues);
  const plane = height * width;
  // Patch order (transformers.js permute(0, 3, 6, 4, 7, 2, 1, 5, 8)): merge-group row, group
  // column, row within group, column within group; inside a patch: channel, frame, y, x. All
  // frames are the same image.
  let o = 0;
  for (let br = 0; br < gh / M; br++) {
    for (let bc = 0; bc < gw / M; bc++) {
      for (let mr = 0; mr < M; mr++) {
        for (let mc = 0; mc < M; mc++) {
          const y0 = (br * M + mr) * P;
          const x0 = (bc * M + mc) * P;
          for (let c = 0; c < 3; c++) {
            for (let t = 0; t < T; t++) {
              for (let y = 0; y < P; y++) {
                const from = c * plane + (y0 + y) * width + x0;
                data.set(planes.data.subarray(from, from + P), o);
                o += P;
              }
            }
          }
        }
      }
    }
  }
  return { data, grid: [1, gh, gw], patchValues, tokens: (gh * gw) / (M * M) };
}
