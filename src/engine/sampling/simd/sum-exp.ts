// The SIMD kernels of sum-exp.wat over one row of float32 values, copied once into the module's
// memory (a copy costs about a tenth of a pass over the values in JavaScript) and read by the
// calls that follow.
import { SUM_EXP_WASM } from "./sum-exp.wasm.ts";

interface Kernels {
  memory: WebAssembly.Memory;
  max(n: number): number;
  sumExp(n: number, max: number): number;
  top(n: number, k: number, at: number): void;
}

/** Compiled when first used; one instance per thread (each model worker has its own). */
let kernels: Kernels | null = null;
let view: Float32Array = new Float32Array(0);
/** The row in the module's memory, and where the alternatives go after it. */
let row: Float32Array = new Float32Array(0);
let topAt = 0;

function load(): Kernels {
  const module = new WebAssembly.Module(Buffer.from(SUM_EXP_WASM, "base64"));
  return new WebAssembly.Instance(module).exports as unknown as Kernels;
}

/** Room for a row and up to `maxTop` alternatives. */
function reserve(values: number, maxTop: number): Kernels {
  const k = (kernels ??= load());
  const bytes = Math.ceil((values * 4) / 16) * 16 + maxTop * 8;
  if (k.memory.buffer.byteLength < bytes) k.memory.grow(Math.ceil((bytes - k.memory.buffer.byteLength) / 65536));
  if (view.buffer !== k.memory.buffer) view = new Float32Array(k.memory.buffer);
  return k;
}

/** Copies `values` into the kernels' memory: the row the next calls read. */
export function placeRow(values: Float32Array, maxTop = 0): void {
  reserve(values.length, maxTop);
  view.set(values);
  row = values;
  topAt = Math.ceil((values.length * 4) / 16) * 16;
}

/** The row's largest value (NaN skipped; -Infinity when there is none). */
export function rowMax(): number {
  const n = row.length;
  let max = kernels!.max(n);
  for (let i = n & ~3; i < n; i++) if (row[i]! > max) max = row[i]!;
  return max;
}

/**
 * Σ e^(v - max) over the row, each term within (1 + max - v)·2e-7 of its value, relative
 * (float32 arithmetic, float64 sum; see sum-exp.wat); `max` is at least every value.
 */
export function rowSumExp(max: number): number {
  const n = row.length;
  let sum = kernels!.sumExp(n, max);
  for (let i = n & ~3; i < n; i++) sum += Math.exp(row[i]! - max);
  return sum;
}

/**
 * The row's k = topIds.length (at most placeRow's maxTop) largest values, best first, the earlier
 * index first among equals, into topIds and topVals; -1 and -Infinity where there are fewer
 * (NaN and -Infinity are never taken).
 */
export function rowTop(topIds: Int32Array, topVals: Float64Array): void {
  const n = row.length;
  const k = topIds.length;
  if (k === 0) return;
  kernels!.top(n, k, topAt);
  const vals = new Float32Array(view.buffer, topAt, k);
  const ids = new Int32Array(view.buffer, topAt + 4 * k, k);
  for (let j = 0; j < k; j++) {
    topVals[j] = vals[j]!;
    topIds[j] = ids[j]!;
  }
  // The last values, after the kernel's: inserted as it does.
  for (let i = n & ~3; i < n; i++) {
    const v = row[i]!;
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
