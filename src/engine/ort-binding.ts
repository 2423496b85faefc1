// The two ways the engine calls ONNX Runtime, named where the command line and the engine both
// read them (this module imports nothing: the CLI's commands load no engine code).

/** "capi": ONNX Runtime's C API through bun:ffi; "node": onnxruntime-node's JavaScript binding. */
export type OrtBinding = "capi" | "node";

export const ORT_BINDINGS: readonly OrtBinding[] = ["capi", "node"];

/**
 * The binding when the operator names none: the C API. It keeps the KV cache in the execution
 * provider's memory, the only way a GPU serves without copying the cache at every step, and on
 * the CPU it is no slower than the JS binding (docs/BENCHMARKS.md, "The C API against the JS
 * binding").
 */
export const DEFAULT_ORT_BINDING: OrtBinding = "capi";

export function isOrtBinding(v: unknown): v is OrtBinding {
  return typeof v === "string" && (ORT_BINDINGS as readonly string[]).includes(v);
}
