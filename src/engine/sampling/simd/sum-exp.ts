// The SIMD kernels of sum-exp.wat, over a float32 vocabulary copied into the module's memory
// (a copy costs about a tenth of a pass over the values in JavaScript).
import { SUM_EXP_WASM } from "./sum-exp.wasm.ts";

interface Kernels {
  memory: WebAssembly.Memory;
  max(n: number): number;
  sumExp(n: number, max: number): number;
}

/** Compiled when first used; one instance per thread (each model worker has its own). */
let kernels: Kernels | null = null;
let view = new Float32Array(0);

function load(): Kernels {
  const module = new WebAssembly.Module(Buffer.from(SUM_EXP_WASM, "base64"));
  return new WebAssembly.Instance(module).exports as unknown as Kernels;
}

/** The values in the module's memory, from address 0. */
function place(values: Float32Array): Kernels {
  const k = (kernels ??= load());
  const bytes = values.length * 4;
  if (k.memory.buffer.byteLength < bytes) k.memory.grow(Math.ceil((bytes - k.memory.buffer.byteLength) / 65536));
  if (view.buffer !== k.memory.buffer || view.length < values.length) view = new Float32Array(k.memory.buffer);
  view.set(values);
  return k;
}

/**
 * The largest of `values` (NaN skipped; -Infinity when empty) and Σ e^(v - max) over them, each
 * term within (1 + max - v)·2e-7 of its value, relative (float32 arithmetic, float64 sum; see
 * sum-exp.wat).
 */
export function maxAndSumExp(values: Float32Array): { max: number; sum: number } {
  const k = place(values);
  const n = values.length;
  let max = k.max(n);
  for (let i = n & ~3; i < n; i++) if (values[i]! > max) max = values[i]!;
  if (max === -Infinity) return { max, sum: 0 };
  let sum = k.sumExp(n, max);
  for (let i = n & ~3; i < n; i++) sum += Math.exp(values[i]! - max);
  return { max, sum };
}

/** Σ e^(v - max) over `values`, `max` at least each of them (as maxAndSumExp's sum). */
export function sumExp(values: Float32Array, max: number): number {
  const n = values.length;
  let sum = place(values).sumExp(n, max);
  for (let i = n & ~3; i < n; i++) sum += Math.exp(values[i]! - max);
  return sum;
}
