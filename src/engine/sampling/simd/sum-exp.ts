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
  split(n: number, max: number, scale: number, head: number, limit: number, listEnd: number, yPerD: number, table: number, list: number, nearList: number, out: number): number;
}

/** Compiled when first used; one instance per thread (each model worker has its own). */
let kernels: Kernels | null = null;
/** The module's memory as floats, integers and doubles (remade when it grows). */
let view: Float32Array = new Float32Array(0);
let ints: Int32Array = new Int32Array(0);
let doubles: Float64Array = new Float64Array(0);
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

/**
 * Where rowSplit's swizzle table (256 bytes), sum (8 bytes), near count (4, then 4 of padding)
 * and lists of indices (the head's, then the near tokens') go, after the alternatives.
 */
let splitAt = 0;
const SPLIT_TABLE = 256;
/** Where the swizzle table was last written (nothing else writes there until splitAt moves). */
let tableAt = -1;
let tableIn: ArrayBufferLike | null = null;
const SPLIT_LISTS = SPLIT_TABLE + 16;
/**
 * For each 4-bit lane mask, the byte shuffle that moves the set lanes' 32-bit values to the
 * front, in order (the split kernel's compaction).
 */
const COMPACT = Uint8Array.from({ length: 256 }, (_, at) => {
  const lanes = [0, 1, 2, 3].filter((l) => ((at >> 4) & (1 << l)) !== 0);
  const lane = lanes[(at & 15) >> 2];
  return lane === undefined ? 0 : lane * 4 + (at & 3);
});

/** Room for a row, its alternatives and rowSplit's outputs (at most one index per value). */
function reserve(values: number): Kernels {
  const k = (kernels ??= load());
  const bytes = Math.ceil((values * 4) / 16) * 16 + MAX_TOP * 8 + SPLIT_LISTS + 2 * (values + 4) * 4;
  if (k.memory.buffer.byteLength < bytes) k.memory.grow(Math.ceil((bytes - k.memory.buffer.byteLength) / 65536));
  if (view.buffer !== k.memory.buffer) {
    view = new Float32Array(k.memory.buffer);
    ints = new Int32Array(k.memory.buffer);
    doubles = new Float64Array(k.memory.buffer);
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
  splitAt = topAt + MAX_TOP * 8;
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

/** e^(-d/32) = 2^(d·Y_PER_D): d is in bins of 1/32 of a unit (see rowSplit). */
const Y_PER_D = Math.fround(-Math.LOG2E / 32);

/** What rowSplit found: two lists of indices (views into the kernels' memory) and the tail's mass. */
export interface RowSplitResult {
  head: Int32Array;
  near: Int32Array;
  tail: number;
}

/**
 * d = (max - v)·scale with float32 operations, as rowSplit's kernel computes it: `max` and `scale`
 * must be float32 values (Math.fround). Math.fround of a double operation on float32 operands
 * is the float32 operation's result.
 */
export function splitDistance(max: number, v: number, scale: number): number {
  return Math.fround(Math.fround(max - v) * scale);
}

/**
 * The temperature sampler's split of the row (see ../row-split.ts), with d = splitDistance(max,
 * v, scale) and float32 `head`, `limit` and `listEnd`: the indices with d < head, those with
 * head ≤ d ≤ limit and d < listEnd (the near tail), both in index order, and Σ e^(-d/32) over
 * those with head ≤ d ≤ limit (the tail), each term within (1 + d/32)·TAIL_TERM_ERROR of
 * e^(-d/32) for the float64 d, relative. The lists are valid until the next placeRow or rowSplit.
 */
export function rowSplit(max: number, scale: number, head: number, limit: number, listEnd: number): RowSplitResult {
  const r = row!;
  const n = r.length;
  if (tableAt !== splitAt || tableIn !== view.buffer) {
    new Uint8Array(view.buffer, splitAt, SPLIT_TABLE).set(COMPACT);
    tableAt = splitAt;
    tableIn = view.buffer;
  }
  const at = (splitAt + SPLIT_LISTS) >> 2;
  const nearAt = at + n + 4;
  let count = kernels!.split(n, max, scale, head, limit, listEnd, Y_PER_D, splitAt, at << 2, nearAt << 2, splitAt + SPLIT_TABLE);
  let tail = doubles[(splitAt + SPLIT_TABLE) >> 3]!;
  let nearCount = ints[(splitAt + SPLIT_TABLE + 8) >> 2]!;
  for (let i = n & ~3; i < n; i++) {
    const d = splitDistance(max, r[i]!, scale);
    if (d < head) ints[at + count++] = i;
    else if (d <= limit) {
      tail += Math.exp(-d / 32);
      if (d < listEnd) ints[nearAt + nearCount++] = i;
    }
  }
  return { head: ints.subarray(at, at + count), near: ints.subarray(nearAt, nearAt + nearCount), tail };
}

/** See rowSplit (float32 rounding of d, y and the series; see sum-exp.wat). */
export const TAIL_TERM_ERROR = 3e-7;
