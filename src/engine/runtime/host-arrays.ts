// Host arrays in the element types ONNX graphs take, for either binding (no onnxruntime-node here).

export type FloatType = "float32" | "float16";

/**
 * Integers (|v| < 2^31: ids, positions, mask bits) as int64. Written as two 32-bit halves
 * (little-endian) rather than through BigInt, which costs a conversion per element: the mask of a
 * batch at a long context has tens of thousands of them per step. An int64 array is used as it is.
 */
export function int64Array(values: ArrayLike<number> | BigInt64Array): BigInt64Array {
  if (values instanceof BigInt64Array) return values;
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
  return data;
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

/** A float32 array as `type`'s elements: itself, or rounded to half precision (as bits). */
export function floatArray(type: FloatType, values: Float32Array): Float32Array | Uint16Array {
  return type === "float32" ? values : new Uint16Array(new Float16Array(values).buffer);
}
