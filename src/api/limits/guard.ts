// Rate limits for an authenticated request: the account's and, when set, the key's. Refusals are
// OpenAI's 429 rate_limit_exceeded with Retry-After; every admitted request carries the headers.
import type { ApiKeyInfo, Store } from "../../store/index.ts";
import { ApiError } from "../errors.ts";
import { formatDuration, rateHeaders } from "./headers.ts";
import { RateLimiter, type LimitScope, type Ticket } from "./rate-limiter.ts";
import type { RequestScope } from "./scope.ts";

const NOOP_TICKET: Ticket = { ok: true, state: { requests: null, tokens: null }, finish: () => {} };

export class RateGuard {
  constructor(
    private readonly store: Store,
    readonly limiter: RateLimiter = new RateLimiter(),
  ) {}

  /** The limited scopes of a request; null when neither its account nor its key has limits. */
  private scopes(key: ApiKeyInfo): LimitScope[] | null {
    const { account, key: own } = this.store.limits.effective(key.accountId, key.id);
    if (!account && !own) return null;
    const scopes: LimitScope[] = [];
    if (account) scopes.push({ id: `account:${key.accountId}`, limits: account });
    if (own) scopes.push({ id: `key:${key.id}`, limits: own });
    return scopes;
  }

  /**
   * Admits the request or throws the 429. The headers go into `scope.headers` either way, so the
   * response (or the error) carries them. `hold` keeps a concurrency slot until ticket.finish().
   */
  admit(key: ApiKeyInfo, estimatedTokens: number, hold: boolean, scope?: RequestScope): Ticket {
    const scopes = this.scopes(key);
    if (scopes === null) return NOOP_TICKET;
    const r = this.limiter.admit(scopes, estimatedTokens, hold);
    const headers = rateHeaders(r.state);
    if (scope) Object.assign(scope.headers, headers);
    if (r.ok) return r;
    const wait = Math.max(1, Math.ceil(r.retryAfterMs / 1000));
    const on = r.scope.startsWith("key:") ? "this API key" : `account '${key.accountName}'`;
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
