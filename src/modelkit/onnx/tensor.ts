// A named constant tensor (an initializer) before it becomes a TensorProto.

import { DTYPE_BYTES, type DType, type DTypeArray, float32ToHalf } from "./dtype.ts";

export interface TensorData<D extends DType = DType> {
  dtype: D;
  dims: number[];
  data: DTypeArray[D];
}

export function elementCount(dims: readonly number[]): number {
  return dims.reduce((a, b) => a * b, 1);
}

export function tensor<D extends DType>(dtype: D, dims: number[], data: DTypeArray[D]): TensorData<D> {
  const n = elementCount(dims);
  if (data.length !== n) throw new Error(`tensor ${dtype}[${dims.join(",")}] needs ${n} elements, got ${data.length}`);
  return { dtype, dims, data };
}

/** A float tensor stored as `dtype` (float32 values converted to half when asked). */
export function floatTensor(dtype: "float32" | "float16", dims: number[], values: Float32Array): TensorData {
  return dtype === "float16" ? tensor("float16", dims, float32ToHalf(values)) : tensor("float32", dims, values);
}

export function int64Tensor(dims: number[], values: readonly number[]): TensorData<"int64"> {
  return tensor("int64", dims, BigInt64Array.from(values, (v) => BigInt(v)));
}

export function int32Tensor(dims: number[], values: readonly number[]): TensorData<"int32"> {
  return tensor("int32", dims, Int32Array.from(values));
}

/** Little-endian raw bytes, as TensorProto.raw_data wants them (all supported hosts are little-endian). */
export function rawBytes(t: TensorData): Uint8Array {
  const d = t.data;
  const bytes = new Uint8Array(d.buffer, d.byteOffset, d.byteLength);
  if (bytes.length !== elementCount(t.dims) * DTYPE_BYTES[t.dtype]) throw new Error("tensor byte length mismatch");
  return bytes;
}
