// The engine's public surface: what the api room may know of it. Plain data only; nothing of
// HTTP, keys or accounts, and nothing of ONNX Runtime leaks through these types.

export type {
  ChatMessage,
  ChatRole,
  ContentPart,
  FunctionTool,
  ImagePart,
  ReasoningEffort,
  ResponseFormat,
  TextPart,
  ToolCall,
  ToolChoice,
} from "../protocol/chat.ts";
export { REASONING_EFFORTS } from "../protocol/chat.ts";
import type { ChatMessage, FunctionTool, ReasoningEffort, ResponseFormat, ToolChoice } from "../protocol/chat.ts";
import type { SamplingDefaults } from "../protocol/sampling.ts";
export type { SamplingDefaults } from "../protocol/sampling.ts";
import type { ToolFormatName } from "../protocol/tools.ts";

/**
 * A request's sampling. temperature, top_p, top_k and min_p are undefined where the request left
 * them out: the engine then takes the model's defaults (generation_config.json, sluice.json
 * `defaults`; see sampling/defaults.ts), else the OpenAI API's.
 */
export interface SamplingParams {
  /** 0 means greedy. */
  temperature?: number;
  topP?: number;
  /** 0 or less means disabled. */
  topK?: number;
  minP?: number;
  presencePenalty: number;
  frequencyPenalty: number;
  /** token id -> bias added to its logit, as in the OpenAI API (-100..100). */
  logitBias: Record<number, number>;
  seed?: number;
}

export type MaxTokensSource = "max_tokens" | "max_completion_tokens" | "max_tokens_cap";

export interface GenerateRequest {
  requestId: string;
  modelId: string;
  messages: ChatMessage[];
  tools?: FunctionTool[];
  toolChoice?: ToolChoice;
  parallelToolCalls?: boolean;
  responseFormat?: ResponseFormat;
  sampling: SamplingParams;
  /** Upper bound on generated tokens per choice; undefined means up to the context length. */
  maxTokens?: number;
  /**
   * What set maxTokens: the client's max_tokens or max_completion_tokens, or the operator's
   * --max-tokens-cap filled in for a request that named none (a refusal names what to change).
   */
  maxTokensFrom?: MaxTokensSource;
  stop: string[];
  n: number;
  logprobs: boolean;
  topLogprobs: number;
  reasoningEffort?: ReasoningEffort;
  /** Extra chat template variables (vLLM's chat_template_kwargs), checked against what it reads. */
  chatTemplateKwargs?: Record<string, unknown>;
  signal: AbortSignal;
  /**
   * Opaque: requests with the same key (the api passes the account) take turns with other keys
   * where the engine queues work (a model's queue for KV memory: see worker/fair-queue.ts; schema
   * compilation).
   */
  fairnessKey?: string;
  /** Higher is admitted first, and may preempt lower ones when memory runs out (default 0). */
  priority?: number;
}

export interface TopLogprob {
  token: string;
  logprob: number;
  bytes: number[] | null;
}

export interface TokenLogprob extends TopLogprob {
  top_logprobs: TopLogprob[];
}

export type FinishReason = "stop" | "length" | "tool_calls" | "content_filter";

export type GenerationEvent =
  /** Once per request, before its choices' events: prompt tokens the prefix cache served. */
  | { type: "prompt"; cachedTokens: number }
  | { type: "reasoning"; index: number; text: string }
  | { type: "content"; index: number; text: string; logprobs?: TokenLogprob[] }
  | { type: "tool_call"; index: number; toolIndex: number; id?: string; name?: string; argumentsDelta: string }
  /** completionTokens include reasoningTokens (the thinking block's tokens, tags included). */
  | { type: "finish"; index: number; reason: FinishReason; completionTokens: number; reasoningTokens: number };

/** A step of a request: when it began and ended, epoch ms (see worker/request-clock.ts epochMs). */
export interface Interval {
  start: number;
  end: number;
}

/** Where a generation's time went in the engine: for its trace and the latency histograms. */
export interface GenerationTimings {
  /** Waiting for its model to be loaded (absent: it was loaded already). */
  modelLoad?: Interval;
  /** The chat template rendered and the prompt tokenised (images read). */
  prompt?: Interval;
  /** Its response format's or tools' grammar compiled or found compiled (absent: none). */
  compile?: Interval;
  /** Waiting for KV memory in the model's queue, until first admitted. */
  queue?: Interval;
  /** From admission to the first token: the prompt read, in chunks between other requests' steps. */
  prefill?: Interval;
  /** From the first token to the last. */
  decode?: Interval;
  /** Seconds between a choice's consecutive tokens (a step that gives several counts once), every choice. */
  interTokenSeconds: number[];
  /** Per choice of two tokens or more: its time from first to last token over the tokens after the first, seconds. */
  timePerOutputTokenSeconds: number[];
  /** Times it was preempted (its memory taken) and resumed. */
  preemptions: number;
}

export interface Generation {
  promptTokens: number;
  /** Filled in by the time the events end (absent from engines that do not measure). */
  timings?: GenerationTimings;
  /**
   * The events in the batches they arrive in: each step of the iteration gives every event that
   * has come since the last (at least one), so a reader that falls behind catches up in one step
   * rather than one per token. Ends after one `finish` event per choice. Aborting the request's
   * signal ends it early.
   */
  events: AsyncIterable<GenerationEvent[]>;
}

export interface EngineModel {
  id: string;
  displayName: string;
  contextLength: number;
  supportsImages: boolean;
  supportsTools: boolean;
  supportsStructuredOutput: boolean;
  /** The tool-call format its calls are parsed and constrained in (null: it takes no tools). */
  toolFormat: ToolFormatName | null;
  dir: string;
  provider: string;
  /** What the model samples with where a request leaves a parameter out (empty: the API's defaults). */
  samplingDefaults: SamplingDefaults;
}

/** A request the engine refuses before generating (maps to a 400 in the api room). */
export class EngineRequestError extends Error {
  constructor(
    message: string,
    readonly param: string | null = null,
    readonly code: string | null = null,
  ) {
    super(message);
    this.name = "EngineRequestError";
  }
}

/** This caller has too much waiting for the engine already (maps to a 429 with Retry-After). */
export class EngineBusyError extends Error {
  constructor(
    message: string,
    readonly retryAfterSeconds: number,
  ) {
    super(message);
    this.name = "EngineBusyError";
  }
}

/**
 * The model cannot take the request now: its queue is full, no memory could be freed to load it in
 * time, it could not be loaded, its worker crashed (and is being restarted) or keeps crashing
 * (unavailable for a while), or the engine is shutting down. Maps to a 503 with Retry-After.
 */
export class EngineUnavailableError extends Error {
  constructor(
    message: string,
    readonly retryAfterSeconds: number,
    /** The OpenAI-style error code the api answers with. */
    readonly code: string = "model_unavailable",
  ) {
    super(message);
    this.name = "EngineUnavailableError";
  }
}

/** A model directory the catalog wants served. */
export interface ModelSource {
  id: string;
  dir: string;
  /** Changes when the directory's contents were replaced; a loaded model is then loaded again. */
  stamp?: string;
  /** What the directory declares of the model: served as its description until it is loaded. */
  declared?: EngineModel;
  /** How long it stays loaded once idle, ms (-1: always); null or absent: the engine's default. Asked when it matters. */
  keepAliveMs?: () => number | null;
}

/** What the engine tells of models loading on demand (so the catalog can follow). */
export type ModelEvent =
  /** Loaded: its description as the model itself gives it. */
  | { type: "loaded"; model: EngineModel }
  | { type: "load-failed"; id: string; error: string };

export interface ModelLoadResult {
  id: string;
  /** Its description: as loaded, or as declared when it loads on its first request. */
  model: EngineModel | null;
  /** Why the directory could not be loaded; the model is then left out. */
  error: string | null;
}

/** A model's scheduler and KV cache at one moment (gauges) and since it loaded (counters). */
/** Speculative decoding: prompt-lookup drafts verified by the model, or none. */
export type SpeculateMode = "ngram" | "off";

export interface ModelStats {
  model: string;
  /** Requests generating (prefilling or decoding) and their sequences (one per choice). */
  runningRequests: number;
  runningSequences: number;
  /** Requests admitted but waiting for KV memory, and the most that may wait. */
  queuedRequests: number;
  queueLimit: number;
  /** Sequences in the last batched decode step. */
  lastBatchSize: number;
  kvBudgetBytes: number;
  /** Reserved by running sequences plus held by the prefix cache. */
  kvUsedBytes: number;
  prefixCacheBytes: number;
  prefixCacheEntries: number;
  prefixCacheHits: number;
  prefixCacheReusedTokens: number;
  promptTokensComputed: number;
  generatedTokens: number;
  decodeSteps: number;
  /**
   * Bytes of host memory handed to the model's runs and copied into the KV cache's memory
   * (toDevice), and taken from runs and copied out of it (toHost): what crosses PCIe on a GPU.
   */
  hostToDeviceBytes: number;
  deviceToHostBytes: number;
  /** Speculated tokens checked by the model, and those it accepted (each saved a decode step). */
  draftTokens: number;
  acceptedDraftTokens: number;
  /** Requests refused because their fairness key had its share of the queue waiting (429). */
  rejectedBusy: number;
  /** Requests refused because the queue was full (503). */
  rejectedFull: number;
  /** Running requests preempted (for a higher priority, or a key holding less memory). */
  preemptions: number;
  /** Tokens computed again to resume preempted requests. */
  recomputedTokens: number;
  /** Compiled grammars kept for reuse (their transition tables), bytes. */
  grammarCacheBytes: number;
  /** Schemas compiled, and refused (over a limit or unsupported), since load. */
  schemasCompiled: number;
  schemasRefused: number;
  /** JavaScript heap of the model's worker thread, and of its compile thread (as last reported), bytes. */
  workerHeapBytes: number;
  compileHeapBytes: number;
  /** Token budget tables of json_object and the built-in formats, computed once per model (shared by its threads), bytes. */
  builtInTablesBytes: number;
}

/** A model's place in memory, as the engine's residency sees it. */
export interface ModelResidency {
  model: string;
  state: "unloaded" | "loading" | "resident" | "unloading";
  /** Estimated from the ONNX files and their external data. */
  weightsBytes: number;
  /** Its KV budget: what its KV cache may grow to (the planned one while not loaded). */
  kvBytes: number;
  /** weightsBytes + kvBytes: what it holds of the memory budget while loaded. */
  bytes: number;
  /** Requests using it now (waiting for it, queued or generating). */
  activeRequests: number;
  /** How long it stays loaded once idle, ms; -1: always. */
  keepAliveMs: number;
  /** Epoch ms. */
  lastUsedAt: number | null;
  /** When it unloads if nothing uses it meanwhile (epoch ms); null: it does not (in use, pinned, not loaded). */
  unloadAt: number | null;
  loadedAt: number | null;
  lastLoadMs: number | null;
  loads: number;
  /** Times it was unloaded to make room for another model. */
  evictions: number;
  /** Why its last load failed, if it did. */
  lastError: string | null;
}

export interface ResidencySummary {
  /** Memory for the weights and KV caches of every loaded model (serve --memory-budget). */
  budgetBytes: number;
  usedBytes: number;
  models: ModelResidency[];
}

/** How a model's worker thread is doing, as the engine's supervisor sees it. */
export interface WorkerHealth {
  model: string;
  /** loading: first start; ready; restarting: after a crash; unavailable: in a crash loop, waiting to retry. */
  state: "loading" | "ready" | "restarting" | "unavailable";
  /** Since the engine started. */
  crashes: number;
  restarts: number;
  lastError: string | null;
  /** Epoch milliseconds. */
  lastCrashAt: number | null;
  /** While unavailable: when the next start is tried (epoch milliseconds). */
  retryAt: number | null;
}

export interface EngineStats {
  models: ModelStats[];
  /** Per model, its worker's supervision state. */
  workers?: WorkerHealth[];
}

export interface Engine {
  /**
   * Makes exactly these models the served set: registers new ones (loading those named to preload;
   * the others load on their first request), reloads loaded ones whose directory changed, unloads
   * the rest. Never throws for one bad directory: it is reported.
   */
  load(sources: ModelSource[]): Promise<ModelLoadResult[]>;
  /** Every model served, loaded or not. */
  models(): EngineModel[];
  /** Validates and tokenises; throws EngineRequestError / EngineBusyError before any output. */
  start(request: GenerateRequest): Promise<Generation>;
  /** The latest scheduler and KV gauges per loaded model (for /metrics). */
  stats?(): EngineStats;
  /** What is loaded and the memory each model holds, under the memory budget. */
  residency?(): ResidencySummary;
  /** Loads a model now (an operator's command), waiting for room as a request would. */
  loadModel?(id: string): Promise<ModelResidency>;
  /** Unloads a model now; refuses (throws) while requests use it. */
  unloadModel?(id: string): Promise<ModelResidency>;
  /** Calls `listener` when a model loads on demand or fails to. */
  onModelEvent?(listener: (e: ModelEvent) => void): void;
  close(): Promise<void>;
}
