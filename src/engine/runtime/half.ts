// IEEE 754 half precision to single precision, for float16 logits.
const table = (() => {
  const t = new Float32Array(65536);
  for (let h = 0; h < 65536; h++) {
    const s = h & 0x8000 ? -1 : 1;
    const e = (h >> 10) & 0x1f;
    const m = h & 0x3ff;
    t[h] = e === 0 ? s * m * 2 ** -24 : e === 31 ? (m ? NaN : s * Infinity) : s * (1 + m / 1024) * 2 ** (e - 15);
  }
  return t;
})();

export function halfToFloat(src: Uint16Array, dst: Float32Array = new Float32Array(src.length)): Float32Array {
  for (let i = 0; i < src.length; i++) dst[i] = table[src[i]!]!;
  return dst;
}
