// ONNX element types the model kit writes, and the conversions their raw bytes need.

export type DType = "float32" | "float16" | "int64" | "int32" | "bool" | "uint8";

/** TensorProto.DataType codes (onnx.proto). */
export const ONNX_DTYPE: Record<DType, number> = {
  float32: 1,
  bool: 9,
  uint8: 2,
  int32: 6,
  int64: 7,
  float16: 10,
};

export const DTYPE_BYTES: Record<DType, number> = {
  float32: 4,
  float16: 2,
  int64: 8,
  int32: 4,
  bool: 1,
  uint8: 1,
};

/** The typed array that holds one dtype's elements (float16 as raw IEEE half bit patterns). */
export type DTypeArray = {
  float32: Float32Array;
  float16: Uint16Array;
  int64: BigInt64Array;
  int32: Int32Array;
  bool: Uint8Array;
  uint8: Uint8Array;
};

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** Round-to-nearest-even float32 -> IEEE half bits (handles subnormals, inf, NaN). */
export function toHalfBits(value: number): number {
  f32[0] = value;
  const x = u32[0];
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let half = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const mid = 1 << (shift - 1);
    if (rem > mid || (rem === mid && (half & 1))) half++;
    return sign | half;
  }
  let half = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (half & 1))) half++;
  return sign | half;
}

/** IEEE half bits -> number. */
export function fromHalfBits(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant ? NaN : sign * Infinity;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

/** The largest finite float16; float32 values from 65520 on round to infinity. */
export const HALF_MAX = 65504;

/**
 * Throws when a finite value of `values` has no float16 counterpart (it would become infinity):
 * a bf16 or float32 checkpoint may hold weights past ±65504, which a float16 export would turn
 * into inf silently, and every logit after them into NaN.
 */
export function checkHalfRange(name: string, values: Float32Array): void {
  let worst = 0;
  for (let i = 0; i < values.length; i++) {
    const a = Math.abs(values[i]!);
    if (a > worst && a !== Infinity) worst = a;
  }
  if (worst >= 65520) throw new RangeError(`${name} holds ${worst.toPrecision(6)}, beyond float16's range (±${HALF_MAX}): it cannot be stored as float16`);
}

export function float32ToHalf(values: Float32Array): Uint16Array {
  const out = new Uint16Array(values.length);
  for (let i = 0; i < values.length; i++) out[i] = toHalfBits(values[i]);
  return out;
}

let halfTable: Float32Array | null = null;

/** IEEE half bits -> float32, through a table of all 65,536 values (checkpoints hold billions). */
export function halfToFloat32(bits: Uint16Array): Float32Array {
  return halfToFloat32Into(bits, new Float32Array(bits.length), 0);
}

/** Converts into `out` from `offset` on (no allocation), and returns `out`. */
export function halfToFloat32Into(bits: Uint16Array, out: Float32Array, offset: number): Float32Array {
  if (!halfTable) {
    halfTable = new Float32Array(65536);
    for (let h = 0; h < 65536; h++) halfTable[h] = fromHalfBits(h);
  }
  const table = halfTable;
  for (let i = 0; i < bits.length; i++) out[offset + i] = table[bits[i]!]!;
  return out;
}
