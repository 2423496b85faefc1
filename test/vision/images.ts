// Test images made on the fly with sharp (no binaries in the repo): smooth gradients plus
// deterministic noise, so resampling and tiling have something to get wrong.
import sharp from "sharp";

export function rawPattern(width: number, height: number, seed: number, channels = 3): Buffer {
  const data = Buffer.alloc(width * height * channels);
  let s = seed >>> 0 || 1;
  const rand = () => ((s = (s * 1664525 + 1013904223) >>> 0) >>> 8) / 16777216;
  // Per channel: stripes of a seed-dependent frequency, direction and phase, plus noise.
  const waves = Array.from({ length: channels }, () => ({ fx: (rand() - 0.5) * 0.6, fy: (rand() - 0.5) * 0.6, phase: rand() * 6.283, amp: 60 + rand() * 60 }));
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      for (let c = 0; c < channels; c++) {
        const w = waves[c]!;
        const v = c === 3 ? 200 + 55 * Math.sin(x * 0.1) : 128 + w.amp * Math.sin(x * w.fx + y * w.fy + w.phase) + (rand() - 0.5) * 40;
        data[(y * width + x) * channels + c] = Math.max(0, Math.min(255, Math.round(v)));
      }
    }
  }
  return data;
}

export async function makeImage(format: "png" | "jpeg" | "webp" | "gif", width: number, height: number, seed: number, channels: 3 | 4 = 3): Promise<Uint8Array<ArrayBuffer>> {
  const img = sharp(rawPattern(width, height, seed, channels), { raw: { width, height, channels } });
  const buf = await (format === "png" ? img.png() : format === "jpeg" ? img.jpeg({ quality: 90 }) : format === "webp" ? img.webp() : img.gif()).toBuffer();
  return new Uint8Array(buf);
}

export const dataUrl = (bytes: Uint8Array, mime: string) => `data:${mime};base64,${Buffer.from(bytes).toString("base64")}`;
