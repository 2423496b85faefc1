// Qwen2-VL's get_rope_index for one prompt of images and text: the 3-D positions the decoder's
// multimodal rotary embedding takes. Text runs count up on all three rows from the largest
// position so far + 1; an image's tokens (one per merge x merge group of patches, in row-major
// order of the merged grid) sit at offset + (t, h, w) where offset is where the image starts.
import type { RopePlan } from "../runtime/mrope.ts";

export interface RopeImage {
  /** image_grid_thw in patches, before merging. */
  grid: readonly [number, number, number];
}

/**
 * The rope plan of `ids`, whose image tokens come in consecutive runs, one per image in order,
 * each as long as its merged grid; null when the tokens and the images disagree.
 */
export function ropeIndex(ids: ArrayLike<number>, images: readonly RopeImage[], imageTokenId: number, mergeSize: number): RopePlan | null {
  const n = ids.length;
  const positions = new Int32Array(3 * n);
  const set = (i: number, t: number, h: number, w: number) => {
    positions[i] = t;
    positions[n + i] = h;
    positions[2 * n + i] = w;
  };
  let next = 0; // the position the next text token takes
  let image = 0;
  for (let i = 0; i < n; ) {
    if (ids[i] !== imageTokenId) {
      set(i, next, next, next);
      next++;
      i++;
      continue;
    }
    const img = images[image++];
    if (!img) return null;
    const t = img.grid[0];
    const h = Math.floor(img.grid[1] / mergeSize);
    const w = Math.floor(img.grid[2] / mergeSize);
    const count = t * h * w;
    if (i + count > n) return null;
    let top = next;
    for (let k = 0; k < count; k++) {
      if (ids[i + k] !== imageTokenId) return null;
      const pt = next + Math.floor(k / (h * w));
      const ph = next + (Math.floor(k / w) % h);
      const pw = next + (k % w);
      set(i + k, pt, ph, pw);
      top = Math.max(top, pt, ph, pw);
    }
    next = top + 1;
    i += count;
  }
  if (image !== images.length) return null;
  return { positions, length: n, delta: next - n };
}
