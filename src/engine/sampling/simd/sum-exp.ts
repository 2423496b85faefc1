// The SIMD kernels of sum-exp.wat over one row of float32 values, copied once into the module's
// memory (a copy costs about a tenth of a pass over the values in JavaScript) and read by the
// calls that follow: the row a sampler took its maximum from serves the same token's
// log-probabilities too (see isPlaced).
import { SUM_EXP_WASM } from "./sum-exp.wasm.ts";

interface Kernels {
  memory: WebAssembly.Memory;
  max(n: number): number;
  sumExp(n: number, max: number): number;
  top(n: number, k: number, at: number): void;
}

/** Compiled when first used; one instance per thread (each model worker has its own). */
let kernels: Kernels | null = null;
/** The module's memory as floats and as integers (remade when it grows). */
let view: Float32Array = new Float32Array(0);
let ints: Int32Array = new Int32Array(0);
/** The row in the module's memory, and where the alternatives go after it. */
let row: Float32Array | null = null;
let topAt = 0;
/** rowMax() of the row, once computed. */
let rowMaxValue: number | null = null;
/** Room kept after each row for rowTop's alternatives. */
export const MAX_TOP = 20;

function load(): Kernels {
  const module = new WebAssembly.Module(Buffer.from(SUM_EXP_WASM, "base64"));
  return new WebAssembly.Instance(module).exports as unknown as Kernels;
}

/** Room for a row and its alternatives. */
function reserve(values: number): Kernels {
  const k = (kernels ??= load());
  const bytes = Math.ceil((values * 4) / 16) * 16 + MAX_TOP * 8;
  if (k.memory.buffer.byteLength < bytes) k.memory.grow(Math.ceil((bytes - k.memory.buffer.byteLength) / 65536));
  if (view.buffer !== k.memory.buffer) {
    view = new Float32Array(k.memory.buffer);
    ints = new Int32Array(k.memory.buffer);
  }
  return k;
}

/** Copies `values` into the kernels' memory: the row the next calls read. */
export function placeRow(values: Float32Array): void {
  reserve(values.length);
  view.set(values);
  row = values;
  rowMaxValue = null;
  topAt = Math.ceil((values.length * 4) / 16) * 16;
}

/**
 * Whether the last row placed is `values` (the same memory): then it is still the kernels' row
 * if the caller knows that array has not changed since.
 */
export function isPlaced(values: Float32Array): boolean {
  return row !== null && row.buffer === values.buffer && row.byteOffset === values.byteOffset && row.length === values.length;
}

/** The row's largest value (NaN skipped; -Infinity when there is none). */
export function rowMax(): number {
  if (rowMaxValue !== null) return rowMaxValue;
  const r = row!;
  const n = r.length;
  let max = kernels!.max(n);
  for (let i = n & ~3; i < n; i++) if (r[i]! > max) max = r[i]!;
  rowMaxValue = max;
  return max;
}

/**
 * Σ e^(v - max) over the row, each term within (1 + max - v)·2e-7 of its value, relative
 * (float32 arithmetic, float64 sum; see sum-exp.wat); `max` is at least every value.
 */
export function rowSumExp(max: number): number {
  const r = row!;
  const n = r.length;
  let sum = kernels!.sumExp(n, max);
  for (let i = n & ~3; i < n; i++) sum += Math.exp(r[i]! - max);
  return sum;
}

/**
 * The row's k = topIds.length (at most MAX_TOP) largest values, best first, the earlier
 * index first among equals, into topIds and topVals; -1 and -Infinity where there are fewer
 * (NaN and -Infinity are never taken).
 */
export function rowTop(topIds: Int32Array, topVals: Float64Array): void {
  const r = row!;
  const n = r.length;
  const k = topIds.length;
  if (k === 0) return;
  kernels!.top(n, k, topAt);
  const at = topAt >> 2;
  for (let j = 0; j < k; j++) {
    topVals[j] = view[at + j]!;
    topIds[j] = ints[at + k + j]!;
  }
  // The last values, after the kernel's: inserted as it does.
  for (let i = n & ~3; i < n; i++) {
    const v = r[i]!;
    if (!(v > topVals[k - 1]!)) continue;
    let j = k - 1;
    while (j > 0 && topVals[j - 1]! < v) {
      topVals[j] = topVals[j - 1]!;
      topIds[j] = topIds[j - 1]!;
      j--;
    }
    topVals[j] = v;
    topIds[j] = i;
  }
}
