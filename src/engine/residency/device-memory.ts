// The default memory budget: what the device the models run on has. On CUDA, the GPU's memory
// (the weights and, by construction, the working memory of the model sessions live there); on the
// CPU, the machine's RAM. A share of it: the rest is for what the budget does not count (ONNX
// Runtime's arenas and prepacked weights, the CUDA context, the server itself, the OS).
import { totalmem } from "node:os";
import { cudaDeviceMemoryBytes } from "../../packaging/cuda.ts";

export const GPU_SHARE = 0.9;
export const RAM_SHARE = 0.75;

export interface DeviceMemory {
  /** All of the device's memory, bytes. */
  totalBytes: number;
  device: "gpu" | "ram";
  /** The share the default budget takes. */
  share: number;
}

/** The memory of the device models run on: the GPU's when CUDA is used and its size can be read, else RAM. */
export function deviceMemory(cuda: boolean, readGpu: () => number | null = cudaDeviceMemoryBytes): DeviceMemory {
  const gpu = cuda ? readGpu() : null;
  if (gpu !== null && gpu > 0) return { totalBytes: gpu, device: "gpu", share: GPU_SHARE };
  return { totalBytes: totalmem(), device: "ram", share: RAM_SHARE };
}

/** The budget from serve --memory-budget (bytes, or a share of the device), or the default share. */
export function memoryBudgetBytes(device: DeviceMemory, given: { bytes: number } | { fraction: number } | null): number {
  if (given && "bytes" in given) return given.bytes;
  return Math.floor(device.totalBytes * (given?.fraction ?? device.share));
}
