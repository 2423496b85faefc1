// Messages between the engine host (HTTP thread) and a model's worker. Structured-clone data only.
import type { CompileLimits } from "../../structured/index.ts";
import type { Device } from "../providers.ts";
import type { OrtBinding } from "../ort-binding.ts";
import type { QueueOrder } from "./fair-queue.ts";
import type { WorkerTimings } from "./request-clock.ts";
import type { EngineModel, GenerateRequest, GenerationEvent, ModelStats, SpeculateMode } from "../types.ts";

export type WireRequest = Omit<GenerateRequest, "signal">;

export interface WorkerOptions {
  id: string;
  dir: string;
  device: Device;
  threads: number;
  /** How ONNX Runtime is called on the CPU (CUDA always through the C API; see decoders.ts); absent: the default. */
  binding?: OrtBinding;
  /**
   * Load the decoder batch-invariant (serve --batch-invariant): a request's greedy and seeded
   * output then depends on the request alone, not on what is batched with it, speculation,
   * preemption or the prefix cache (see runtime/canonical-attention.ts).
   */
  batchInvariant?: boolean;
  /** KV memory this model may use (running sequences + prefix cache); 0 = the default. */
  kvBudgetBytes: number;
  /** Requests that may wait for KV memory before new ones get EngineUnavailableError; 0 = the default. */
  maxQueue: number;
  /** An automatic KV budget: capped at this many full-context sequences (see SchedulerOptions). */
  kvCapSequences?: number;
  /** The part of the queue one fairness key may hold (absent: the scheduler's default). */
  keyQueueShare?: number;
  /** Admission order (absent: fair). */
  queueOrder?: QueueOrder;
  /** Speculative decoding (absent: "ngram"). */
  speculate?: SpeculateMode;
  /** How long a round's events may wait to go with the next round's (see round-batcher.ts); absent: the default. */
  streamIntervalMs?: number;
  /** Wall time to warm the worker's code with synthetic requests at load (see warm-up.ts); 0 = none. */
  warmupMs?: number;
  /** What compiling one request's schemas may cost (see structured/compile-budget.ts). */
  compileLimits: CompileLimits;
  /** Schema compilations running now, every model's together (one Int32; see structured's CompileShare). */
  compiling?: SharedArrayBuffer;
  /** Memory for this model's cached grammars, bytes. */
  grammarCacheBytes: number;
  /** Entry of the compile thread and its arguments (the binary runs every thread from one entry). */
  compileWorker: { url: string; argv: string[] };
  /** Accept the "block" message (tests of supervision: a worker that stops answering). */
  testHooks?: boolean;
  /** Native calls in flight, shared with the host (see native-calls.ts). */
  nativeCalls?: SharedArrayBuffer;
}

export type HostMessage =
  | { type: "load"; options: WorkerOptions }
  /** `structureKey`: canonical text of what decides the grammar (null: none, or not computed). */
  | { type: "start"; rid: number; request: WireRequest; structureKey?: string | null }
  | { type: "cancel"; rid: number }
  /** Liveness: answered with "pong" between scheduler rounds. */
  | { type: "ping" }
  /** Test hook (testHooks only): keep the thread busy for `ms`, as a stuck worker would be. */
  | { type: "block"; ms: number }
  | { type: "close" };

export interface RejectInfo {
  /** busy: the caller's share is waiting (429); unavailable: the model is full (503). */
  kind: "request" | "busy" | "unavailable" | "internal";
  message: string;
  param: string | null;
  code: string | null;
  retryAfterSeconds?: number;
}

export type WorkerMessage =
  /** `kvBudgetBytes`: the KV memory the model took (at most the one it was given). */
  | { type: "loaded"; model: EngineModel; notes: string[]; kvBudgetBytes: number }
  | { type: "load-failed"; error: string }
  | { type: "started"; rid: number; promptTokens: number }
  | { type: "rejected"; rid: number; error: RejectInfo }
  /** A scheduler round's events and endings, in order: one message instead of one per request. */
  | { type: "round"; messages: RoundMessage[] }
  | { type: "log"; level: "debug" | "info" | "warn" | "error"; msg: string; fields?: Record<string, unknown> }
  | { type: "stats"; stats: ModelStats }
  | { type: "pong" }
  /** An uncaught error: the thread ends as soon as no native call is in flight. */
  | { type: "fatal"; error: string }
  | { type: "closed" };

/** What a round reports of one request: its new events, or its end (with the error, if it failed). */
export type RoundMessage =
  | { type: "events"; rid: number; events: GenerationEvent[] }
  /** `code` is set when the request itself caused its error (a 400-class failure). */
  | { type: "done"; rid: number; error?: string; code?: string; timings?: WorkerTimings };
