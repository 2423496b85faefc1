// Rate limits for an authenticated request: the account's and, when set, the key's. Refusals are
// OpenAI's 429 rate_limit_exceeded with Retry-After; every admitted request carries the headers.
// One node counts in memory (RateLimiter); several count in the database (store.rates), so a
// limit of N per minute admits N in total, not N per node.
import type { ApiKeyInfo, EffectiveLimits, RateStore, Store } from "../../store/index.ts";
import { ApiError } from "../errors.ts";
import { formatDuration, rateHeaders } from "./headers.ts";
import { RateLimiter, type LimitScope, type Refusal, type Ticket } from "./rate-limiter.ts";
import type { RequestScope } from "./scope.ts";

const NOOP_TICKET: Ticket = { ok: true, state: { requests: null, tokens: null }, finish: () => {} };

/** Where admissions are counted. */
export interface RateCounter {
  admit(scopes: readonly LimitScope[], estimatedTokens: number, hold: boolean): Ticket | Refusal | Promise<Ticket | Refusal>;
}

/** The database's counters, for several nodes; `onError` hears of a settlement that failed. */
export function storeCounter(rates: RateStore, nodeId: string, onError: (e: unknown) => void): RateCounter {
  return {
    async admit(scopes, estimatedTokens, hold) {
      const r = await rates.admit(nodeId, scopes, estimatedTokens, hold);
      if (!r.ok) return r;
      const ids = scopes.map((s) => s.id);
      let done = false;
      return {
        ok: true,
        state: r.state,
        finish(actualTokens) {
          if (done) return;
          done = true;
          if (hold) rates.release(nodeId, ids).catch(onError);
          rates.settle(ids, estimatedTokens, actualTokens).catch(onError);
        },
      };
    },
  };
}

/** The scope of a per-model limit: counted apart from the scope's limits for every model. */
const modelScope = (base: string, modelId: string) => `${base}:model:${modelId}`;

/** The scope ids a request of this key for this model counts against (for a settlement made on another node). */
export const scopeIds = (accountId: number, keyId: string | null, modelId?: string) => {
  const bases = [`account:${accountId}`, ...(keyId ? [`key:${keyId}`] : [])];
  return modelId === undefined ? bases : [...bases, ...bases.map((b) => modelScope(b, modelId))];
};

const NO_MODEL = "";

export class RateGuard {
  readonly limiter: RateLimiter | null;
  private readonly counter: RateCounter;

  constructor(
    private readonly store: Store,
    counter?: RateCounter,
  ) {
    this.limiter = counter ? null : new RateLimiter();
    this.counter = counter ?? this.limiter!;
  }

  // The scopes made from one effective-limits answer (per model asked for): the store hands out the
  // same frozen object while its cache stays valid, so a request finds its scopes without building
  // ids or objects.
  private readonly made = new WeakMap<object, { keyId: string; accountId: number; byModel: Map<string, readonly LimitScope[] | null> }>();

  /** The limited scopes of a request; null when neither its account nor its key has limits (for this model). */
  private scopes(key: ApiKeyInfo, effective: EffectiveLimits, modelId: string): readonly LimitScope[] | null {
    if (!effective.account && !effective.key && effective.models.length === 0) return null;
    let known = this.made.get(effective);
    // Checked against the key too: nothing promises that one answer object serves one key only.
    if (!known || known.keyId !== key.id || known.accountId !== key.accountId) {
      known = { keyId: key.id, accountId: key.accountId, byModel: new Map() };
      this.made.set(effective, known);
    }
    const cached = known.byModel.get(modelId);
    if (cached !== undefined) return cached;
    const { account, key: own } = effective;
    const list: LimitScope[] = [];
    if (account) list.push({ id: `account:${key.accountId}`, limits: account });
    if (own) list.push({ id: `key:${key.id}`, limits: own });
    for (const m of effective.models) {
      if (m.modelId === modelId) list.push({ id: modelScope(m.onKey ? `key:${key.id}` : `account:${key.accountId}`, modelId), limits: m.limits });
    }
    const scopes = list.length ? Object.freeze(list) : null;
    if (known.byModel.size < 1024) known.byModel.set(modelId, scopes);
    return scopes;
  }

  /**
   * Admits the request or throws the 429. The headers go into `scope.headers` either way, so the
   * response (or the error) carries them. `hold` keeps a concurrency slot until ticket.finish().
   * Synchronous when the limits are cached and counted in memory (the hot path of GET /v1/models).
   */
  admit(key: ApiKeyInfo, estimatedTokens: number, hold: boolean, scope?: RequestScope, modelId: string = NO_MODEL): Ticket | Promise<Ticket> {
    const effective = this.store.limits.peekEffective(key.accountId, key.id);
    if (effective === undefined) {
      return this.store.limits.effective(key.accountId, key.id).then((e) => this.count(key, e, estimatedTokens, hold, scope, modelId));
    }
    return this.count(key, effective, estimatedTokens, hold, scope, modelId);
  }

  private count(key: ApiKeyInfo, effective: EffectiveLimits, estimatedTokens: number, hold: boolean, scope: RequestScope | undefined, modelId: string): Ticket | Promise<Ticket> {
    const scopes = this.scopes(key, effective, modelId);
    if (scopes === null) return NOOP_TICKET;
    const r = this.counter.admit(scopes, estimatedTokens, hold);
    return r instanceof Promise ? r.then((x) => this.answer(key, estimatedTokens, x, scope)) : this.answer(key, estimatedTokens, r, scope);
  }

  private answer(key: ApiKeyInfo, estimatedTokens: number, r: Ticket | Refusal, scope?: RequestScope): Ticket {
    // Straight into the request's headers (the response copies them from there).
    const headers = rateHeaders(r.state, scope?.headers);
    if (r.ok) return r;
    const wait = Math.max(1, Math.ceil(r.retryAfterMs / 1000));
    const model = /:model:(.+)$/.exec(r.scope)?.[1];
    const on = `${r.scope.startsWith("key:") ? "this API key" : `account '${key.accountName}'`}${model ? ` for model '${model}'` : ""}`;
    const what =
      r.dimension === "concurrency"
        ? `Too many concurrent requests on ${on}: the limit is ${r.limit} at a time.`
        : r.dimension === "requests"
          ? `Rate limit reached for requests per minute on ${on}: limit ${r.limit}.`
          : `Rate limit reached for tokens per minute on ${on}: limit ${r.limit}, requested about ${estimatedTokens} (prompt estimate plus max_tokens).`;
    throw new ApiError(429, `${what} Please try again in ${formatDuration(r.retryAfterMs)}.`, "rate_limit_error", null, "rate_limit_exceeded", {
      ...headers,
      "retry-after": String(wait),
    });
  }
}
