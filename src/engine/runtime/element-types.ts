// ONNX's tensor element types by number (TensorProto.DataType, onnxruntime_c_api.h's
// ONNXTensorElementDataType), named as onnxruntime-node names them; null for the ones neither
// binding's tensors carry.
export const ELEMENT_TYPES = [
  null,
  "float32",
  "uint8",
  "int8",
  "uint16",
  "int16",
  "int32",
  "int64",
  "string",
  "bool",
  "float16",
  "float64",
  "uint32",
  "uint64",
  null, // complex64
  null, // complex128
  "bfloat16",
  null,
  null,
  null,
  null,
  "uint4",
  "int4",
] as const;

export type ElementType = Exclude<(typeof ELEMENT_TYPES)[number], null>;

/** The name of element type `n`, or null when it has none here. */
export function elementType(n: number): ElementType | null {
  return ELEMENT_TYPES[n] ?? null;
}
