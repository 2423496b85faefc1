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

  // The scopes made from one effective-limits answer: the store hands out the same frozen object
  // while its cache stays valid, so a request finds its scopes without building ids or objects.
  private readonly made = new WeakMap<object, { keyId: string; accountId: number; scopes: readonly LimitScope[] }>();

  /** The limited scopes of a request; null when neither its account nor its key has limits. */
  private scopes(key: ApiKeyInfo): readonly LimitScope[] | null {
    const effective = this.store.limits.effective(key.accountId, key.id);
    if (!effective.account && !effective.key) return null;
    const known = this.made.get(effective);
    // Checked against the key too: nothing promises that one answer object serves one key only.
    if (known && known.keyId === key.id && known.accountId === key.accountId) return known.scopes;
    const { account, key: own } = effective;
    const list: LimitScope[] = [];
    if (account) list.push({ id: `account:${key.accountId}`, limits: account });
    if (own) list.push({ id: `key:${key.id}`, limits: own });
    const scopes = Object.freeze(list);
    this.made.set(effective, { keyId: key.id, accountId: key.accountId, scopes });
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
    // Straight into the request's headers (the response copies them from there).
    const headers = rateHeaders(r.state, scope?.headers);
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
