// Test images made on the fly with sharp (no binaries in the repo): smooth gradients plus
// deterministic noise, so resampling and tiling have something to get wrong.
import sharp from "sharp";

export function rawPattern(width: number, height: number, seed: number, channels = 3): Buffer {
  const data = Buffer.alloc(width * height * channels);
  let s = seed >>> 0 || 1;
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      for (let c = 0; c < channels; c++) {
        s = (s * 1664525 + 1013904223) >>> 0;
        const base = c === 0 ? (x * 255) / width : c === 1 ? (y * 255) / height : ((x + y) * 127) / (width + height) + (seed % 97);
        data[(y * width + x) * channels + c] = Math.max(0, Math.min(255, Math.round(base + ((s >>> 24) % 48) - 24)));
      }
    }
  }
  return data;
}

export async function makeImage(format: "png" | "jpeg" | "webp" | "gif", width: number, height: number, seed: number, channels: 3 | 4 = 3): Promise<Uint8Array> {
  const img = sharp(rawPattern(width, height, seed, channels), { raw: { width, height, channels } });
  const buf = await (format === "png" ? img.png() : format === "jpeg" ? img.jpeg({ quality: 90 }) : format === "webp" ? img.webp() : img.gif()).toBuffer();
  return new Uint8Array(buf);
}

export const dataUrl = (bytes: Uint8Array, mime: string) => `data:${mime};base64,${Buffer.from(bytes).toString("base64")}`;
