// The in-process rate limiter (one node: SQLite): token buckets for requests and tokens per minute
// and a count of requests in flight, per scope, in memory. Several nodes count in the database
// instead (store.rates); both share the arithmetic of store/rate-buckets.ts.
import { emptyCounters, idle, refresh, settle, take, view, type ScopeCounters } from "../../store/rate-buckets.ts";
import type { LimitScope, RateRefusal, RateState } from "../../store/index.ts";

export type { DimensionState, LimitScope, RateState } from "../../store/index.ts";
export type Refusal = RateRefusal;

export interface Ticket {
  ok: true;
  state: RateState;
  /** Settles the token estimate against the real count and frees the concurrency slot; idempotent. */
  finish(actualTokens: number): void;
}

const SWEEP_AT = 10_000;

export class RateLimiter {
  private readonly states = new Map<string, ScopeCounters>();

  constructor(private readonly clock: () => number = () => performance.now()) {}

  private state(scope: LimitScope, now: number): ScopeCounters {
    let s = this.states.get(scope.id);
    if (!s) {
      if (this.states.size >= SWEEP_AT) this.sweep(now);
      s = emptyCounters();
      this.states.set(scope.id, s);
    }
    refresh(s, scope.limits, now);
    return s;
  }

  /** Forgets scopes that hold nothing: full buckets and no request in flight. */
  private sweep(now: number): void {
    for (const [id, s] of this.states) {
      refresh(s, { requestsPerMinute: s.rpm, tokensPerMinute: s.tpm, maxConcurrent: null }, now);
      if (idle(s)) this.states.delete(id);
    }
  }

  /**
   * Admits one request that may use up to `estimatedTokens`, or says which limit refuses it and
   * when to retry (see rate-buckets.ts `take`); `hold` takes a concurrency slot until finish().
   */
  admit(scopes: readonly LimitScope[], estimatedTokens: number, hold: boolean): Ticket | Refusal {
    const now = this.clock();
    const pairs = scopes.map((sc) => [sc, this.state(sc, now)] as const);
    const refused = take(pairs, estimatedTokens, hold);
    if (refused) return refused;
    let done = false;
    return {
      ok: true,
      state: view(pairs.map((p) => p[1])),
      finish: (actualTokens: number) => {
        if (done) return;
        done = true;
        const t = this.clock();
        for (const [sc, s0] of pairs) {
          // The same object unless the scope was swept or its limits changed meanwhile.
          const s = this.states.get(sc.id) ?? s0;
          if (hold) s.running = Math.max(0, s.running - 1);
          settle(s, t, estimatedTokens, actualTokens);
        }
      },
    };
  }

  /** Requests in flight for a scope (for tests and metrics). */
  running(scopeId: string): number {
    return this.states.get(scopeId)?.running ?? 0;
  }
}
