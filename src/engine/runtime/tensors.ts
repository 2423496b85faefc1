// Tensor construction that survives Bun: onnxruntime-common wraps float16 data in a native
// Float16Array where the runtime has one, and onnxruntime-node's native side then sees no bytes
// ("not enough space"). Keeping the raw Uint16Array bits as the tensor's storage avoids that.
import * as ort from "onnxruntime-node";
import { halfToFloat } from "./half.ts";
import { floatArray, int64Array, type FloatType } from "./host-arrays.ts";

export type { FloatType };

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

/** Integers (|v| < 2^31: ids, positions, mask bits) as an int64 tensor (see int64Array). */
export function int64Tensor(values: ArrayLike<number> | BigInt64Array, dims: readonly number[]): ort.Tensor {
  return new ort.Tensor("int64", int64Array(values), dims);
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
  return floatTensor(type, floatArray(type, values), dims);
}
