// transformers.js's dtype names and the file-name suffix each gives an ONNX export
// (onnx/model.onnx, onnx/model_fp16.onnx, onnx/model_q4.onnx, …). Shared by the engine, which loads
// the file a model directory's card names, and the model kit's Hub pull, which fetches only that
// file: both must spell the convention the same way. Mirrors DEFAULT_DTYPE_SUFFIX_MAPPING in
// @huggingface/transformers (src/utils/dtypes.js), without its 1- and 2-bit types, which ONNX
// Runtime's CPU and CUDA providers do not run as we load them.

export const ONNX_DTYPES = ["fp32", "fp16", "q8", "int8", "uint8", "q4", "q4f16", "bnb4"] as const;
export type OnnxDType = (typeof ONNX_DTYPES)[number];

export const DTYPE_SUFFIX: Record<OnnxDType, string> = {
  fp32: "",
  fp16: "_fp16",
  q8: "_quantized",
  int8: "_int8",
  uint8: "_uint8",
  q4: "_q4",
  q4f16: "_q4f16",
  bnb4: "_bnb4",
};

export function isOnnxDType(v: unknown): v is OnnxDType {
  return typeof v === "string" && (ONNX_DTYPES as readonly string[]).includes(v);
}

/** `vision_encoder` + q4 → `vision_encoder_q4.onnx`. */
export function onnxFileName(base: string, dtype: OnnxDType): string {
  return `${base}${DTYPE_SUFFIX[dtype]}.onnx`;
}

/**
 * Whether `name` is external data of the graph file `onnxName` (same folder): transformers.js
 * names chunks `model.onnx_data`, `model.onnx_data_1`, …; onnxruntime-genai and optimum use
 * `model.onnx.data`.
 */
export function isExternalDataOf(onnxName: string, name: string): boolean {
  return name === `${onnxName}.data` || name === `${onnxName}_data` || new RegExp(`^${escape(onnxName)}_data_\\d+$`).test(name);
}

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
