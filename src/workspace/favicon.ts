// The icon browsers ask for at /favicon.ico: drawn here (a navy tile with three light-blue waves,
// the header's colours) and written as a 16 and 32 pixel ICO, so no binary file has to be kept in
// the repository and embedded in the executable.

type Rgba = [number, number, number, number];

const NAVY: Rgba = [0x14, 0x1a, 0x29, 255];
const WAVE: Rgba = [0x8f, 0xb0, 0xff, 255];
const CLEAR: Rgba = [0, 0, 0, 0];

/** The picture on a 1×1 square: what colour covers the point (x, y). */
function colourAt(x: number, y: number): Rgba {
  const r = 0.2;
  const dx = Math.max(r - x, 0, x - (1 - r));
  const dy = Math.max(r - y, 0, y - (1 - r));
  if (dx * dx + dy * dy > r * r) return CLEAR;
  for (const base of [0.3, 0.5, 0.7]) {
    const centre = base + 0.045 * Math.sin((x - 0.1) * 2 * Math.PI * 1.6);
    if (x > 0.16 && x < 0.84 && Math.abs(y - centre) < 0.045) return WAVE;
  }
  return NAVY;
}

/** size×size BGRA rows, bottom row first as BMP stores them, 4×4 samples per pixel. */
function pixels(size: number): Uint8Array {
  const out = new Uint8Array(size * size * 4);
  const n = 4;
  for (let py = 0; py < size; py++) {
    for (let px = 0; px < size; px++) {
      const sum = [0, 0, 0, 0];
      for (let sy = 0; sy < n; sy++) {
        for (let sx = 0; sx < n; sx++) {
          const c = colourAt((px + (sx + 0.5) / n) / size, (py + (sy + 0.5) / n) / size);
          for (let k = 0; k < 3; k++) sum[k]! += c[k]! * c[3];
          sum[3]! += c[3];
        }
      }
      const a = sum[3]!;
      const o = ((size - 1 - py) * size + px) * 4;
      if (a > 0) {
        out[o] = Math.round(sum[2]! / a);
        out[o + 1] = Math.round(sum[1]! / a);
        out[o + 2] = Math.round(sum[0]! / a);
      }
      out[o + 3] = Math.round(a / (n * n));
    }
  }
  return out;
}

/** An ICO file holding 32-bit BMP images (alpha in the pixels, an all-zero AND mask). */
export function faviconIco(sizes = [16, 32]): Uint8Array<ArrayBuffer> {
  const images = sizes.map((size) => {
    const maskRow = Math.ceil(size / 32) * 4;
    const body = new Uint8Array(40 + size * size * 4 + maskRow * size);
    const v = new DataView(body.buffer);
    v.setUint32(0, 40, true);
    v.setInt32(4, size, true);
    v.setInt32(8, size * 2, true); // colour rows and mask rows
    v.setUint16(12, 1, true);
    v.setUint16(14, 32, true);
    v.setUint32(20, size * size * 4 + maskRow * size, true);
    body.set(pixels(size), 40);
    return { size, body };
  });
  const header = 6 + 16 * images.length;
  const file = new Uint8Array(header + images.reduce((n, i) => n + i.body.length, 0));
  const v = new DataView(file.buffer);
  v.setUint16(2, 1, true);
  v.setUint16(4, images.length, true);
  let offset = header;
  images.forEach((img, i) => {
    const e = 6 + 16 * i;
    v.setUint8(e, img.size);
    v.setUint8(e + 1, img.size);
    v.setUint16(e + 4, 1, true);
    v.setUint16(e + 6, 32, true);
    v.setUint32(e + 8, img.body.length, true);
    v.setUint32(e + 12, offset, true);
    file.set(img.body, offset);
    offset += img.body.length;
  });
  return file;
}

let cached: Uint8Array<ArrayBuffer> | null = null;

/** GET /favicon.ico, wherever a browser asks for it (the API's root, the workspace's). */
export function faviconResponse(): Response {
  cached ??= faviconIco();
  return new Response(cached, {
    headers: { "content-type": "image/x-icon", "cache-control": "public, max-age=86400", "x-content-type-options": "nosniff" },
  });
}
