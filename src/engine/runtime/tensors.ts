// Tensor construction that survives Bun: onnxruntime-common wraps float16 data in a native
// Float16Array where the runtime has one, and onnxruntime-node's native side then sees no bytes
// ("not enough space"). Keeping the raw Uint16Array bits as the tensor's storage avoids that.
import * as ort from "onnxruntime-node";
import { halfToFloat } from "./half.ts";

export type FloatType = "float32" | "float16";

/** The float16 bits of a tensor's data, whichever typed array onnxruntime returned. */
export function halfBits(data: ort.Tensor["data"]): Uint16Array {
  const d = data as unknown as ArrayBufferView & { length: number };
  return new Uint16Array(d.buffer, d.byteOffset, d.length);
}

export function floatTensor(type: FloatType, data: Float32Array | Uint16Array, dims: readonly number[]): ort.Tensor {
  if (type === "float32") return new ort.Tensor("float32", data as Float32Array, dims);
  const bits = data as Uint16Array;
  const t = new ort.Tensor("float16", bits, dims);
  (t as unknown as { cpuData: Uint16Array }).cpuData = bits;
  return t;
}

/** An output tensor made safe to feed back as an input (float16 outputs come back as Float16Array). */
export function reusable(t: ort.Tensor): ort.Tensor {
  return t.type === "float16" ? floatTensor("float16", halfBits(t.data), t.dims) : t;
}

/**
 * Integers (|v| < 2^31: ids, positions, mask bits) as int64. Written as two 32-bit halves
 * (little-endian) rather than through BigInt, which costs a conversion per element: the mask of a
 * batch at a long context has tens of thousands of them per step. An int64 array is used as it is.
 */
export function int64Tensor(values: ArrayLike<number> | BigInt64Array, dims: readonly number[]): ort.Tensor {
  if (values instanceof BigInt64Array) return new ort.Tensor("int64", values, dims);
  // The buffer first: reading `.buffer` of a new typed array makes JavaScriptCore give it an
  // ArrayBuffer object after the fact, the slower way round.
  const buffer = new ArrayBuffer(values.length * 8);
  const data = new BigInt64Array(buffer);
  const halves = new Int32Array(buffer);
  // One loop per kind of source: a single loop fed masks (Uint8Array) and ids (arrays) in turn
  // left JavaScriptCore's optimised code bailing out on every call (its element loads are
  // specialised to the kind of array they first saw).
  if (values instanceof Uint8Array) writeBytes(values, halves);
  else if (Array.isArray(values)) writeNumbers(values as number[], halves);
  else writeNumbers(Array.from(values), halves);
  return new ort.Tensor("int64", data, dims);
}

function writeBytes(values: Uint8Array, halves: Int32Array): void {
  for (let i = 0; i < values.length; i++) halves[2 * i] = values[i]!;
}

function writeNumbers(values: number[], halves: Int32Array): void {
  for (let i = 0; i < values.length; i++) {
    const v = values[i]!;
    halves[2 * i] = v;
    halves[2 * i + 1] = v < 0 ? -1 : 0;
  }
}

/**
 * Rows [offset, offset+length) of float logits as float32. A float32 output that is exactly those
 * rows is returned as it is (the binding made it for this run alone): at a 151k vocabulary a
 * copy per token is some 20 µs.
 */
export function floatSlice(t: ort.Tensor, offset: number, length: number): Float32Array {
  if (t.type === "float16") return halfToFloat(halfBits(t.data).subarray(offset, offset + length));
  const data = t.data as Float32Array;
  return offset === 0 && length === data.length ? data : data.slice(offset, offset + length);
}

/** A float32 array as a tensor of `type`, rounding to half precision for float16 inputs. */
export function floatInput(type: FloatType, values: Float32Array, dims: readonly number[]): ort.Tensor {
  if (type === "float32") return floatTensor("float32", values, dims);
  return floatTensor("float16", new Uint16Array(new Float16Array(values).buffer), dims);
}
