// Opens a model's decoder on the binding asked for: onnxruntime-node's JavaScript binding, or ONNX
// Runtime's C API through bun:ffi (capi/). Nothing above the engine knows which runs; the engine's
// batching code drives either through runtime/decoder.ts's interface. CUDA always takes the C API:
// the JS binding cannot keep a tensor on the device, so its KV cache would cross PCIe at every step.
import { CapiDecoder } from "./capi/decoder.ts";
import { CapiHostSession } from "./capi/host-session.ts";
import { NodeHostSession, type HostSession, type HostSessionOptions } from "./runtime/host-session.ts";
import type { OrtBinding } from "./ort-binding.ts";
import type { Decoder, SessionOptions } from "./runtime/decoder.ts";
import { NodeDecoder } from "./runtime/node-decoder.ts";

export { DEFAULT_ORT_BINDING } from "./ort-binding.ts";

/** The binding a model on these providers runs with: CUDA always the C API. */
export function bindingFor(asked: OrtBinding, providers: readonly ("cuda" | "cpu")[]): OrtBinding {
  return providers[0] === "cuda" ? "capi" : asked;
}

/** A session with host inputs and outputs (a vision encoder) on the binding a model's decoder uses. */
export async function openHostSession(path: string, opts: HostSessionOptions & { binding: OrtBinding }): Promise<HostSession> {
  return bindingFor(opts.binding, opts.providers) === "capi" ? CapiHostSession.open(path, opts) : NodeHostSession.open(path, opts);
}

export async function openDecoder(dir: string, opts: SessionOptions & { binding: OrtBinding }): Promise<Decoder> {
  return bindingFor(opts.binding, opts.providers) === "capi" ? CapiDecoder.create(dir, opts) : NodeDecoder.create(dir, opts);
}
