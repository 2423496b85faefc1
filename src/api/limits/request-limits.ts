// Limits on one request's shape and run time, set by the operator (serve flags / SLUICE_* env).
import type { MaxTokensSource } from "../../engine/types.ts";
import { badRequest } from "../errors.ts";

export interface RequestLimits {
  /** Largest JSON body accepted (413 above). */
  maxBodyBytes: number;
  /** A request body must arrive within this long once its handler reads it (408 after); 0: no bound. */
  bodyTimeoutMs: number;
  /** Most messages in one chat request (400 above); 0: no limit. */
  maxMessages: number;
  /** Largest max_tokens a request may ask for (400 above) and the bound when it asks for none; 0: the context length. */
  maxTokensCap: number;
  /** A generation running longer is ended with finish_reason "length"; 0: no limit. */
  maxGenerationMs: number;
  /** A stream whose client reads nothing for this long is cut off and its generation freed; 0: never. */
  streamIdleMs: number;
  /** Longest stop string, in characters (400 above); 0: no limit. Each one is matched at every token. */
  maxStopChars: number;
  /** Most logit_bias entries (400 above); 0: no limit. Every entry is copied and checked per request. */
  maxLogitBias: number;
}

export const DEFAULT_REQUEST_LIMITS: RequestLimits = {
  maxBodyBytes: 20 * 1024 * 1024,
  bodyTimeoutMs: 30_000,
  maxMessages: 2048,
  maxTokensCap: 0,
  maxGenerationMs: 600_000,
  streamIdleMs: 60_000,
  maxStopChars: 1000,
  maxLogitBias: 4096,
};

/**
 * Checks that need only a glance at the parsed body, made before the body is validated in full:
 * a logit_bias of 150,000 entries costs a second to validate, copy and check.
 */
export function checkBodyLimits(body: Record<string, unknown>, limits: RequestLimits): void {
  const bias = body.logit_bias;
  if (limits.maxLogitBias > 0 && bias !== null && typeof bias === "object") {
    let n = 0;
    for (const _ in bias) {
      if (++n > limits.maxLogitBias) {
        throw badRequest(`'logit_bias' has more than ${limits.maxLogitBias} entries, this server's limit.`, "logit_bias", "invalid_value");
      }
    }
  }
}

/** Refuses what is over a limit; fills in the server's cap when the request names no max_tokens. */
export function applyRequestLimits<P extends { messages: unknown[]; maxTokens?: number; maxTokensFrom?: MaxTokensSource; stop?: string[] }>(plan: P, limits: RequestLimits): P {
  if (limits.maxMessages > 0 && plan.messages.length > limits.maxMessages) {
    throw badRequest(
      `Too many messages: ${plan.messages.length}; this server accepts at most ${limits.maxMessages} in one request.`,
      "messages",
      "too_many_messages",
    );
  }
  const longStop = limits.maxStopChars > 0 ? (plan.stop ?? []).findIndex((s) => s.length > limits.maxStopChars) : -1;
  if (longStop >= 0) {
    throw badRequest(
      `Stop string ${longStop} is ${plan.stop![longStop]!.length} characters long; this server accepts stop strings of at most ${limits.maxStopChars} characters.`,
      "stop",
      "invalid_value",
    );
  }
  if (limits.maxTokensCap > 0) {
    if (plan.maxTokens !== undefined && plan.maxTokens > limits.maxTokensCap) {
      const name = plan.maxTokensFrom === "max_completion_tokens" ? "max_completion_tokens" : "max_tokens";
      throw badRequest(
        `${name} is too large: ${plan.maxTokens}; this server allows at most ${limits.maxTokensCap} completion tokens per request.`,
        name,
        "max_tokens_too_large",
      );
    }
    if (plan.maxTokens === undefined) return { ...plan, maxTokens: limits.maxTokensCap, maxTokensFrom: "max_tokens_cap" };
  }
  return plan;
}
