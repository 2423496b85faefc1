// Messages between the engine host (HTTP thread) and a model's worker. Structured-clone data only.
import type { Device } from "../providers.ts";
import type { EngineModel, GenerateRequest, GenerationEvent, ModelStats, SpeculateMode } from "../types.ts";

export type WireRequest = Omit<GenerateRequest, "signal">;

export interface WorkerOptions {
  id: string;
  dir: string;
  device: Device;
  threads: number;
  /** KV memory this model may use (running sequences + prefix cache); 0 = the default. */
  kvBudgetBytes: number;
  /** Requests that may wait for KV memory before new ones get EngineBusyError; 0 = the default. */
  maxQueue: number;
  /** Speculative decoding (absent: "ngram"). */
  speculate?: SpeculateMode;
  /** Wall time to warm the worker's code with synthetic requests at load (see warm-up.ts); 0 = none. */
  warmupMs?: number;
}

export type HostMessage =
  | { type: "load"; options: WorkerOptions }
  | { type: "start"; rid: number; request: WireRequest }
  | { type: "cancel"; rid: number }
  | { type: "close" };

export interface RejectInfo {
  kind: "request" | "busy" | "internal";
  message: string;
  param: string | null;
  code: string | null;
  retryAfterSeconds?: number;
}

export type WorkerMessage =
  | { type: "loaded"; model: EngineModel; notes: string[] }
  | { type: "load-failed"; error: string }
  | { type: "started"; rid: number; promptTokens: number }
  | { type: "rejected"; rid: number; error: RejectInfo }
  /** A scheduler round's events and endings, in order: one message instead of one per request. */
  | { type: "round"; messages: RoundMessage[] }
  | { type: "log"; level: "debug" | "info" | "warn" | "error"; msg: string; fields?: Record<string, unknown> }
  | { type: "stats"; stats: ModelStats }
  | { type: "closed" };

/** What a round reports of one request: its new events, or its end (with the error, if it failed). */
export type RoundMessage = { type: "events"; rid: number; events: GenerationEvent[] } | { type: "done"; rid: number; error?: string };
