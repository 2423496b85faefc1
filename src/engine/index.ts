// The engine room's entry: build the engine the server uses.
import type { Logger } from "../log.ts";
import { commandLine } from "../invocation.ts";
import { cudaSearchDirs, linkCudaLibraries, nvidiaGpuPresent } from "../packaging/cuda.ts";
import { nativeDir, packagedWorkerUrl, unpackedThisStart } from "../packaging/native.ts";
import type { CompileLimits } from "../structured/index.ts";
import { WorkerEngine, type SupervisionOptions } from "./host.ts";
import { deviceMemory, memoryBudgetBytes as budgetFor } from "./residency/device-memory.ts";
import type { QueueOrder } from "./worker/fair-queue.ts";
import { chooseProviders, deviceLines, type Device } from "./providers.ts";
import type { Engine, SpeculateMode, WorkerHealth } from "./types.ts";
import type { OrtBinding } from "./ort-binding.ts";

export interface CreateEngineOptions {
  log: Logger;
  device: Device;
  threads: number;
  /** How ONNX Runtime is called on the CPU (CUDA always through the C API); absent: the default. */
  binding?: OrtBinding;
  /** serve --batch-invariant: each request's output a function of the request alone (see runtime/canonical-attention.ts). */
  batchInvariant?: boolean;
  /** KV cache memory per model, bytes (0: a quarter of the machine's memory, 256 MiB–8 GiB). */
  kvBudgetBytes?: number;
  /** Requests that may wait for KV memory per model before new ones get 503. */
  maxQueue?: number;
  /** Memory for the weights and KV budgets of loaded models; null or absent: a share of the device's. */
  memoryBudget?: { bytes: number } | { fraction: number } | null;
  /** How long an idle model stays loaded by default, ms (PINNED: always). */
  keepAliveMs?: number;
  /** Models loaded at start (the others on their first request). */
  preload?: string[] | "all";
  /** How long a request waits for memory to load its model. */
  loadWaitMs?: number;
  /** Share of a model's queue one fairness key (account) may have waiting. */
  accountQueueShare?: number;
  scheduling?: QueueOrder;
  /** Speculative decoding (absent: "ngram"). */
  speculate?: SpeculateMode;
  /** How long a stream's tokens may wait to go out together, ms (absent: the default, 10). */
  streamIntervalMs?: number;
  /** Warm-up per model at load, ms (absent: SLUICE_WARMUP_MS, else none). */
  warmupMs?: number;
  /** What compiling one request's schemas may cost (serve --max-schema-*). */
  compileLimits?: Partial<CompileLimits>;
  /** Memory for each model's cached grammars, bytes. */
  grammarCacheBytes?: number;
  /** Crash-loop and stall detection of the model workers. */
  supervision?: Partial<SupervisionOptions>;
  /** Called when a model worker's supervision state changes. */
  onHealthChange?: (health: WorkerHealth[]) => void;
  /** Lets tests make a worker stop answering. */
  testHooks?: boolean;
}

export async function createEngine(opts: CreateEngineOptions): Promise<Engine> {
  // In the binary: unpack the native libraries (first start) and link the operator's CUDA
  // libraries beside them here, once, before any model worker loads ONNX Runtime.
  const native = nativeDir();
  if (native) {
    if (unpackedThisStart()) opts.log.info("unpacked the native libraries", { dir: native });
    if (opts.device !== "cpu") {
      const linked = linkCudaLibraries(native, cudaSearchDirs());
      for (const error of linked.errors) opts.log.warn("CUDA library not linked", { error });
      if (linked.linked.length) opts.log.info("CUDA libraries linked", { libraries: linked.linked.map((l) => l.target) });
    }
  }
  // Decided once here so the reason is logged once, and `--device cuda` refuses to start early.
  const choice = chooseProviders(opts.device);
  for (const line of deviceLines(opts.device, choice, nvidiaGpuPresent(), commandLine("doctor"))) opts.log[line.level](line.msg, line.fields);
  const device = deviceMemory(choice.providers[0] === "cuda");
  const memoryBudgetBytes = budgetFor(device, opts.memoryBudget ?? null);
  opts.log.info("memory budget for loaded models", {
    mib: Math.round(memoryBudgetBytes / 2 ** 20),
    of: `${Math.round((100 * memoryBudgetBytes) / device.totalBytes)}% of ${device.device === "gpu" ? "the GPU's memory" : "RAM"} (${Math.round(device.totalBytes / 2 ** 20)} MiB)`,
  });
  return new WorkerEngine({
    log: opts.log,
    device: opts.device,
    threads: opts.threads,
    binding: opts.binding,
    batchInvariant: opts.batchInvariant,
    kvBudgetBytes: opts.kvBudgetBytes,
    maxQueue: opts.maxQueue,
    speculate: opts.speculate,
    streamIntervalMs: opts.streamIntervalMs,
    warmupMs: opts.warmupMs,
    workerUrl: packagedWorkerUrl(),
    memoryBudgetBytes,
    keepAliveMs: opts.keepAliveMs,
    preload: opts.preload,
    loadWaitMs: opts.loadWaitMs,
    accountQueueShare: opts.accountQueueShare,
    scheduling: opts.scheduling,
    compileLimits: opts.compileLimits,
    grammarCacheBytes: opts.grammarCacheBytes,
    supervision: opts.supervision,
    onHealthChange: opts.onHealthChange,
    testHooks: opts.testHooks,
  });
}
