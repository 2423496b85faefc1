// preprocessor_config.json -> pixel_values, following transformers.js's ImageProcessor.preprocess
// and Idefics3ImageProcessor (SmolVLM): convert to RGB, resize (aspect kept, within `size`),
// rescale and normalise in float32, then for Idefics3 resize to multiples of the encoder's tile
// size and split into tiles plus a global image. The arithmetic is done in the same order so the
// values agree with transformers.js up to float rounding.
import { resizeImage, toRgb, type RawImage } from "./decode.ts";

export interface PreprocessorConfig {
  image_processor_type?: string;
  processor_class?: string;
  do_convert_rgb?: boolean;
  do_resize?: boolean;
  size?: { longest_edge?: number; shortest_edge?: number; width?: number; height?: number } | number;
  resample?: number;
  do_rescale?: boolean;
  rescale_factor?: number;
  do_normalize?: boolean;
  image_mean?: number | number[];
  image_std?: number | number[];
  do_image_splitting?: boolean;
  max_image_size?: { longest_edge: number };
}

/** Tiles of one image, channel-first: [count, 3, height, width]. */
export interface ImageTiles {
  data: Float32Array;
  count: number;
  height: number;
  width: number;
  /** Grid of the split tiles (0 and 0 when the image was not split). */
  rows: number;
  cols: number;
}

/** A float32 image, channel-first [3, height, width]. */
export interface Planes {
  data: Float32Array;
  height: number;
  width: number;
}

/** transformers.js get_resize_output_image_size for `size` objects and integers. */
export function resizeTarget(cfg: PreprocessorConfig, width: number, height: number): [number, number] {
  const size = cfg.size;
  let shortest: number | undefined;
  let longest: number | undefined;
  if (typeof size === "number") {
    shortest = size;
    longest = size;
  } else if (size) {
    shortest = size.shortest_edge;
    longest = size.longest_edge;
  }
  if (shortest !== undefined || longest !== undefined) {
    const short = shortest === undefined ? 1 : Math.max(shortest / width, shortest / height);
    const w = width * short;
    const h = height * short;
    const long = longest === undefined ? 1 : Math.min(longest / w, longest / h);
    // At least one pixel: a long thin image must not be resized to a side of zero.
    return [Math.max(1, Math.floor(Number((w * long).toFixed(2)))), Math.max(1, Math.floor(Number((h * long).toFixed(2))))];
  }
  if (typeof size === "object" && size.width !== undefined && size.height !== undefined) return [size.width, size.height];
  throw new Error(`unsupported preprocessor size ${JSON.stringify(size)}`);
}

const perChannel = (v: number | number[] | undefined, fallback: number): number[] =>
  Array.isArray(v) ? v : new Array<number>(3).fill(v ?? fallback);

/** The [width, height] an image is resized to, or null to keep its size. */
export type ResizeRule = (width: number, height: number) => [number, number] | null;

const sizeRule =
  (cfg: PreprocessorConfig): ResizeRule =>
  (w, h) =>
    cfg.do_resize !== false && cfg.size !== undefined ? resizeTarget(cfg, w, h) : null;

/**
 * Resize (by `rule`, default the config's `size`), RGB, rescale and normalise: one image as
 * float32 planes (transformers.js ImageProcessor.preprocess).
 */
export async function baseProcess(cfg: PreprocessorConfig, img: RawImage, rule: ResizeRule = sizeRule(cfg)): Promise<Planes> {
  let image = cfg.do_convert_rgb === false ? img : toRgb(img);
  const target = rule(image.width, image.height);
  if (target) image = await resizeImage(image, target[0], target[1], cfg.resample ?? 2);
  if (image.channels !== 3) image = toRgb(image);
  const hwc = Float32Array.from(image.data);
  if (cfg.do_rescale !== false) {
    const f = cfg.rescale_factor ?? 1 / 255;
    for (let i = 0; i < hwc.length; i++) hwc[i] = hwc[i]! * f;
  }
  if (cfg.do_normalize) {
    const mean = perChannel(cfg.image_mean, 0.5);
    const std = perChannel(cfg.image_std, 0.5);
    for (let i = 0; i < hwc.length; i += 3) {
      for (let c = 0; c < 3; c++) hwc[i + c] = (hwc[i + c]! - mean[c]!) / std[c]!;
    }
  }
  const { width, height } = image;
  const chw = new Float32Array(hwc.length);
  const plane = width * height;
  for (let p = 0; p < plane; p++) for (let c = 0; c < 3; c++) chw[c * plane + p] = hwc[p * 3 + c]!;
  return { data: chw, height, width };
}

/**
 * Bilinear resize of float planes with half-pixel centres and edge clamping, no antialiasing:
 * ONNX Resize (mode linear, the default coordinate transformation), which transformers.js's
 * interpolate_4d runs.
 */
export function interpolateBilinear(src: Planes, height: number, width: number): Planes {
  if (src.height === height && src.width === width) return src;
  const out = new Float32Array(3 * height * width);
  const axis = (outLen: number, inLen: number) => {
    const scale = outLen / inLen;
    const lo = new Int32Array(outLen);
    const hi = new Int32Array(outLen);
    const frac = new Float32Array(outLen);
    for (let o = 0; o < outLen; o++) {
      let x = (o + 0.5) / scale - 0.5;
      if (x < 0) x = 0;
      if (x > inLen - 1) x = inLen - 1;
      const x0 = Math.floor(x);
      lo[o] = x0;
      hi[o] = Math.min(x0 + 1, inLen - 1);
      frac[o] = x - x0;
    }
    return { lo, hi, frac };
  };
  const ys = axis(height, src.height);
  const xs = axis(width, src.width);
  const inPlane = src.height * src.width;
  for (let c = 0; c < 3; c++) {
    const base = c * inPlane;
    for (let y = 0; y < height; y++) {
      const r0 = base + ys.lo[y]! * src.width;
      const r1 = base + ys.hi[y]! * src.width;
      const dy = ys.frac[y]!;
      for (let x = 0; x < width; x++) {
        const dx = xs.frac[x]!;
        const a = src.data[r0 + xs.lo[x]!]!;
        const b = src.data[r0 + xs.hi[x]!]!;
        const cc = src.data[r1 + xs.lo[x]!]!;
        const d = src.data[r1 + xs.hi[x]!]!;
        const top = a + (b - a) * dx;
        const bottom = cc + (d - cc) * dx;
        out[(c * height + y) * width + x] = top + (bottom - top) * dy;
      }
    }
  }
  return { data: out, height, width };
}

function crop(src: Planes, y0: number, y1: number, x0: number, x1: number): Planes {
  const h = y1 - y0;
  const w = x1 - x0;
  const out = new Float32Array(3 * h * w);
  for (let c = 0; c < 3; c++) {
    for (let y = 0; y < h; y++) {
      const from = (c * src.height + y0 + y) * src.width + x0;
      out.set(src.data.subarray(from, from + w), (c * h + y) * w);
    }
  }
  return { data: out, height: h, width: w };
}

/** Idefics3ImageProcessor.get_resize_for_vision_encoder. */
export function sizeForEncoder(height: number, width: number, max: number): { height: number; width: number } {
  const aspect = width / height;
  if (width >= height) {
    width = Math.ceil(width / max) * max;
    height = Math.ceil(Math.floor(width / aspect) / max) * max;
  } else {
    height = Math.ceil(height / max) * max;
    width = Math.ceil(Math.floor(height * aspect) / max) * max;
  }
  return { height, width };
}

function tilesOf(frames: Planes[], rows: number, cols: number): ImageTiles {
  const { height, width } = frames[0]!;
  const size = 3 * height * width;
  const data = new Float32Array(frames.length * size);
  frames.forEach((f, i) => data.set(f.data, i * size));
  return { data, count: frames.length, height, width, rows, cols };
}

/**
 * One image through the processor. `split` overrides do_image_splitting (the request's `detail`:
 * low = one global tile; high/auto = the processor's default).
 */
export async function preprocessImage(cfg: PreprocessorConfig, img: RawImage, split?: boolean): Promise<ImageTiles> {
  const planes = await baseProcess(cfg, img);
  const max = cfg.max_image_size?.longest_edge;
  if (max === undefined) return tilesOf([planes], 0, 0);
  if (!(split ?? cfg.do_image_splitting ?? true)) return tilesOf([interpolateBilinear(planes, max, max)], 0, 0);
  const size = sizeForEncoder(planes.height, planes.width, max);
  const resized = interpolateBilinear(planes, size.height, size.width);
  const { height, width } = resized;
  if (height <= max && width <= max) return tilesOf([resized], 0, 0);
  const rows = Math.ceil(height / max);
  const cols = Math.ceil(width / max);
  const th = Math.ceil(height / rows);
  const tw = Math.ceil(width / cols);
  const frames: Planes[] = [];
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) {
      const y0 = r === rows - 1 ? height - th : r * th;
      const x0 = c === cols - 1 ? width - tw : c * tw;
      frames.push(crop(resized, y0, y0 + th, x0, x0 + tw));
    }
  }
  frames.push(interpolateBilinear(resized, max, max));
  return tilesOf(frames, rows, cols);
}
