// Requests and tokens per minute as token buckets (a bucket holds up to one minute's allowance and
// refills continuously), plus a count of requests in flight: the arithmetic alone, shared by the
// in-process limiter (one node) and the database's counters (several nodes).
import type { DimensionState, LimitScope, RateLimits, RateRefusal, RateState } from "./types.ts";

export interface Bucket {
  level: number;
  at: number;
}

export interface ScopeCounters {
  requests: Bucket | null;
  tokens: Bucket | null;
  running: number;
  /** Limits the buckets were made for; a change of limit starts a fresh bucket. */
  rpm: number | null;
  tpm: number | null;
}

export const MINUTE = 60_000;

export function refill(b: Bucket, capacity: number, now: number): void {
  b.level = Math.min(capacity, b.level + (Math.max(0, now - b.at) * capacity) / MINUTE);
  b.at = Math.max(b.at, now);
}

export const msToFill = (b: Bucket, capacity: number, target: number) => Math.max(0, ((target - b.level) * MINUTE) / capacity);

export const emptyCounters = (): ScopeCounters => ({ requests: null, tokens: null, running: 0, rpm: null, tpm: null });

/** Brings a scope's buckets to `now` under its current limits. */
export function refresh(s: ScopeCounters, limits: RateLimits, now: number): void {
  const { requestsPerMinute: rpm, tokensPerMinute: tpm } = limits;
  if (s.rpm !== rpm) {
    s.rpm = rpm;
    s.requests = rpm === null ? null : { level: rpm, at: now };
  }
  if (s.tpm !== tpm) {
    s.tpm = tpm;
    s.tokens = tpm === null ? null : { level: tpm, at: now };
  }
  if (s.requests) refill(s.requests, rpm!, now);
  if (s.tokens) refill(s.tokens, tpm!, now);
}

/** Full buckets and nothing running: the scope may be forgotten. */
export const idle = (s: ScopeCounters) => (!s.requests || s.requests.level >= s.rpm!) && (!s.tokens || s.tokens.level >= s.tpm!) && s.running === 0;

/** The tightest state per dimension over the scopes (for the x-ratelimit-* headers). */
export function view(states: readonly ScopeCounters[]): RateState {
  let requests: DimensionState | null = null;
  let tokens: DimensionState | null = null;
  for (const s of states) {
    if (s.requests) {
      const d = { limit: s.rpm!, remaining: Math.max(0, Math.floor(s.requests.level)), resetMs: msToFill(s.requests, s.rpm!, s.rpm!) };
      if (!requests || d.remaining < requests.remaining) requests = d;
    }
    if (s.tokens) {
      const d = { limit: s.tpm!, remaining: Math.max(0, Math.floor(s.tokens.level)), resetMs: msToFill(s.tokens, s.tpm!, s.tpm!) };
      if (!tokens || d.remaining < tokens.remaining) tokens = d;
    }
  }
  return { requests, tokens };
}

/**
 * Admits one request that may use up to `estimatedTokens` (taking from every scope), or says
 * which limit refuses it and when to retry (taking nothing). A request estimated above a whole
 * minute's tokens needs a full bucket (else it could never run); `hold` takes a concurrency slot.
 */
export function take(
  pairs: readonly (readonly [LimitScope, ScopeCounters])[],
  estimatedTokens: number,
  hold: boolean,
): RateRefusal | null {
  for (const [sc, s] of pairs) {
    const max = sc.limits.maxConcurrent;
    const state = () => view(pairs.map((p) => p[1]));
    if (hold && max !== null && s.running >= max) {
      return { ok: false, dimension: "concurrency", scope: sc.id, limit: max, retryAfterMs: 1000, state: state() };
    }
    if (s.requests && s.requests.level < 1) {
      return { ok: false, dimension: "requests", scope: sc.id, limit: s.rpm!, retryAfterMs: msToFill(s.requests, s.rpm!, 1), state: state() };
    }
    if (s.tokens) {
      const need = Math.min(estimatedTokens, s.tpm!);
      if (s.tokens.level < need) {
        return { ok: false, dimension: "tokens", scope: sc.id, limit: s.tpm!, retryAfterMs: msToFill(s.tokens, s.tpm!, need), state: state() };
      }
    }
  }
  for (const [, s] of pairs) {
    if (s.requests) s.requests.level -= 1;
    if (s.tokens) s.tokens.level -= estimatedTokens;
    if (hold) s.running++;
  }
  return null;
}

/** Gives back to a token bucket what a request estimated and did not use (or takes the excess). */
export function settle(s: ScopeCounters, now: number, estimatedTokens: number, actualTokens: number): void {
  if (!s.tokens || s.tpm === null) return;
  refill(s.tokens, s.tpm, now);
  s.tokens.level = Math.min(s.tpm, s.tokens.level + estimatedTokens - actualTokens);
}
