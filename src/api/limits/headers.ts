// OpenAI's x-ratelimit-* headers and durations ("1s", "6m0s", "250ms").
import type { RateState } from "./rate-limiter.ts";

/** A duration the way OpenAI writes its reset headers. */
export function formatDuration(ms: number): string {
  if (ms < 1000) return `${Math.ceil(ms)}ms`;
  const totalS = Math.ceil(ms / 100) / 10;
  if (totalS < 60) return `${Number.isInteger(totalS) ? totalS : totalS.toFixed(1)}s`;
  const h = Math.floor(totalS / 3600);
  const m = Math.floor((totalS % 3600) / 60);
  const s = Math.ceil(totalS % 60);
  return `${h ? `${h}h` : ""}${m}m${s}s`;
}

/** The headers for the dimensions that have a limit (an unlimited dimension has none), set on `h`. */
export function rateHeaders(state: RateState, h: Record<string, string> = {}): Record<string, string> {
  if (state.requests) {
    h["x-ratelimit-limit-requests"] = String(state.requests.limit);
    h["x-ratelimit-remaining-requests"] = String(state.requests.remaining);
    h["x-ratelimit-reset-requests"] = formatDuration(state.requests.resetMs);
  }
  if (state.tokens) {
    h["x-ratelimit-limit-tokens"] = String(state.tokens.limit);
    h["x-ratelimit-remaining-tokens"] = String(state.tokens.remaining);
    h["x-ratelimit-reset-tokens"] = formatDuration(state.tokens.resetMs);
  }
  return h;
}
