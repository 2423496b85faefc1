// Requests and tokens per minute as token buckets (a bucket holds up to one minute's allowance and
// refills continuously), plus a count of requests in flight. In memory: limits are per process.
import type { RateLimits } from "../../store/index.ts";

export interface LimitScope {
  /** "account:1" or "key:key_…": buckets are kept per scope. */
  id: string;
  limits: RateLimits;
}

interface Bucket {
  level: number;
  at: number;
}

interface ScopeState {
  requests: Bucket | null;
  tokens: Bucket | null;
  running: number;
  /** Limits the buckets were made for; a change of limit starts a fresh bucket. */
  rpm: number | null;
  tpm: number | null;
}

export interface DimensionState {
  limit: number;
  remaining: number;
  /** Until the bucket is full again. */
  resetMs: number;
}

export interface RateState {
  requests: DimensionState | null;
  tokens: DimensionState | null;
}

export type Refusal = {
  ok: false;
  dimension: "requests" | "tokens" | "concurrency";
  scope: string;
  limit: number;
  retryAfterMs: number;
  state: RateState;
};

export interface Ticket {
  ok: true;
  state: RateState;
  /** Settles the token estimate against the real count and frees the concurrency slot; idempotent. */
  finish(actualTokens: number): void;
}

const MINUTE = 60_000;
const SWEEP_AT = 10_000;

function refill(b: Bucket, capacity: number, now: number): void {
  b.level = Math.min(capacity, b.level + ((now - b.at) * capacity) / MINUTE);
  b.at = now;
}

const msToFill = (b: Bucket, capacity: number, target: number) => Math.max(0, ((target - b.level) * MINUTE) / capacity);

export class RateLimiter {
  private readonly states = new Map<string, ScopeState>();

  constructor(private readonly clock: () => number = () => performance.now()) {}

  private state(scope: LimitScope, now: number): ScopeState {
    let s = this.states.get(scope.id);
    if (!s) {
      if (this.states.size >= SWEEP_AT) this.sweep(now);
      s = { requests: null, tokens: null, running: 0, rpm: null, tpm: null };
      this.states.set(scope.id, s);
    }
    const { requestsPerMinute: rpm, tokensPerMinute: tpm } = scope.limits;
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
    return s;
  }

  /** Forgets scopes that hold nothing: full buckets and no request in flight. */
  private sweep(now: number): void {
    for (const [id, s] of this.states) {
      if (s.requests) refill(s.requests, s.rpm!, now);
      if (s.tokens) refill(s.tokens, s.tpm!, now);
      const full = (!s.requests || s.requests.level >= s.rpm!) && (!s.tokens || s.tokens.level >= s.tpm!);
      if (full && s.running === 0) this.states.delete(id);
    }
  }

  /** The tightest state per dimension over the scopes (for the x-ratelimit-* headers). */
  private view(pairs: [LimitScope, ScopeState][]): RateState {
    let requests: DimensionState | null = null;
    let tokens: DimensionState | null = null;
    for (const [, s] of pairs) {
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
   * Admits one request that may use up to `estimatedTokens`, or says which limit refuses it and
   * when to retry. A request estimated above a whole minute's tokens needs a full bucket (else it
   * could never run); `hold` takes a concurrency slot until finish().
   */
  admit(scopes: readonly LimitScope[], estimatedTokens: number, hold: boolean): Ticket | Refusal {
    const now = this.clock();
    const pairs = scopes.map((sc): [LimitScope, ScopeState] => [sc, this.state(sc, now)]);
    for (const [sc, s] of pairs) {
      const max = sc.limits.maxConcurrent;
      if (hold && max !== null && s.running >= max) {
        return { ok: false, dimension: "concurrency", scope: sc.id, limit: max, retryAfterMs: 1000, state: this.view(pairs) };
      }
      if (s.requests && s.requests.level < 1) {
        return { ok: false, dimension: "requests", scope: sc.id, limit: s.rpm!, retryAfterMs: msToFill(s.requests, s.rpm!, 1), state: this.view(pairs) };
      }
      if (s.tokens) {
        const need = Math.min(estimatedTokens, s.tpm!);
        if (s.tokens.level < need) {
          return { ok: false, dimension: "tokens", scope: sc.id, limit: s.tpm!, retryAfterMs: msToFill(s.tokens, s.tpm!, need), state: this.view(pairs) };
        }
      }
    }
    for (const [, s] of pairs) {
      if (s.requests) s.requests.level -= 1;
      if (s.tokens) s.tokens.level -= estimatedTokens;
      if (hold) s.running++;
    }
    let done = false;
    return {
      ok: true,
      state: this.view(pairs),
      finish: (actualTokens: number) => {
        if (done) return;
        done = true;
        const t = this.clock();
        for (const [sc, s0] of pairs) {
          // The same object unless the scope was swept or its limits changed meanwhile.
          const s = this.states.get(sc.id) ?? s0;
          if (hold) s.running = Math.max(0, s.running - 1);
          if (s.tokens && s.tpm !== null) {
            refill(s.tokens, s.tpm, t);
            s.tokens.level = Math.min(s.tpm, s.tokens.level + estimatedTokens - actualTokens);
          }
        }
      },
    };
  }

  /** Requests in flight for a scope (for tests and metrics). */
  running(scopeId: string): number {
    return this.states.get(scopeId)?.running ?? 0;
  }
}
