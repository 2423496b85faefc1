// Rate limits per account and per key (SQL only here). `effective` is read on every API request,
// so it is cached and read again only when the change signal moves.
import type { Db } from "./db.ts";
import { SignalledLru, type ChangeSignal } from "./generation.ts";
import type { EffectiveLimits, LimitStore, ModelLimit, RateLimitEntry, RateLimits } from "./types.ts";

interface Row {
  account_id: number;
  account_name: string;
  key_id: string | null;
  model_id: string | null;
  requests_per_minute: number | null;
  tokens_per_minute: number | null;
  max_concurrent: number | null;
  updated_at: number;
}

const toLimits = (r: Row): RateLimits => ({
  requestsPerMinute: r.requests_per_minute,
  tokensPerMinute: r.tokens_per_minute,
  maxConcurrent: r.max_concurrent,
});

const SELECT = `SELECT l.account_id, a.name AS account_name, l.key_id, l.model_id, l.requests_per_minute, l.tokens_per_minute,
  l.max_concurrent, l.updated_at FROM rate_limits l JOIN accounts a ON a.id = l.account_id`;

function check(limits: RateLimits): void {
  for (const [name, v] of Object.entries(limits)) {
    if (v !== null && (!Number.isInteger(v) || v <= 0 || v > 1e12)) {
      throw new Error(`${name} must be a positive integer or null (no limit), not ${v}`);
    }
  }
}

const freeze = (l: RateLimits | null) => (l ? Object.freeze(l) : null);

/** The table alone; `cachedLimitStore` adds the cache of `effective`. */
export function limitStore(db: Db): LimitStore {
  const get = async (d: Db, accountId: number, keyId?: string | null, modelId?: string | null): Promise<RateLimits | null> => {
    const r = await d.get<Row>(`${SELECT} WHERE l.account_id = $1 AND coalesce(l.key_id, '') = $2 AND coalesce(l.model_id, '') = $3`, [
      accountId,
      keyId ?? "",
      modelId ?? "",
    ]);
    return r ? toLimits(r) : null;
  };
  return {
    get: (accountId, keyId, modelId) => get(db, accountId, keyId, modelId),
    async set(accountId, keyId, limits, modelId = null) {
      check(limits);
      await db.transaction(async (tx) => {
        await tx.run("DELETE FROM rate_limits WHERE account_id = $1 AND coalesce(key_id, '') = $2 AND coalesce(model_id, '') = $3", [accountId, keyId ?? "", modelId ?? ""]);
        if (limits.requestsPerMinute !== null || limits.tokensPerMinute !== null || limits.maxConcurrent !== null) {
          await tx.run(
            "INSERT INTO rate_limits (account_id, key_id, model_id, requests_per_minute, tokens_per_minute, max_concurrent, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
            [accountId, keyId, modelId, limits.requestsPerMinute, limits.tokensPerMinute, limits.maxConcurrent, Date.now()],
          );
        }
      });
    },
    async list(accountId) {
      const rows =
        accountId === undefined
          ? await db.all<Row>(`${SELECT} ORDER BY a.name${db.dialect.binary}, l.key_id${db.dialect.binary}, l.model_id${db.dialect.binary}`)
          : await db.all<Row>(`${SELECT} WHERE l.account_id = $1 ORDER BY l.key_id${db.dialect.binary}, l.model_id${db.dialect.binary}`, [accountId]);
      return rows.map((r): RateLimitEntry => ({ ...toLimits(r), accountId: r.account_id, accountName: r.account_name, keyId: r.key_id, modelId: r.model_id, updatedAt: r.updated_at }));
    },
    async effective(accountId, keyId) {
      // One read for all of the request's scopes: the account's and the key's, for all models and per model.
      const rows = await db.all<Row>(`${SELECT} WHERE l.account_id = $1 AND (l.key_id IS NULL OR l.key_id = $2)`, [accountId, keyId]);
      const of = (key: boolean) => rows.find((r) => r.model_id === null && (r.key_id !== null) === key);
      const account = of(false);
      const own = of(true);
      const models = rows
        .filter((r) => r.model_id !== null)
        .map((r): ModelLimit => Object.freeze({ modelId: r.model_id!, onKey: r.key_id !== null, limits: Object.freeze(toLimits(r)) }));
      return Object.freeze({ accountId, account: account ? freeze(toLimits(account)) : null, key: own ? freeze(toLimits(own)) : null, models: Object.freeze(models) });
    },
    peekEffective: () => undefined,
  };
}

/**
 * `effective` per key (a key id belongs to one account): both scopes' limits in one entry, so a
 * request makes one lookup by a string it already holds and gets the same frozen answer each time.
 */
export function cachedLimitStore(inner: LimitStore, signal: ChangeSignal): LimitStore {
  const cache = new SignalledLru<string, EffectiveLimits>(signal, 4096);
  const peekEffective = (accountId: number, keyId: string) => {
    const hit = cache.get(keyId);
    return hit !== undefined && hit.accountId === accountId ? hit : undefined;
  };
  return {
    ...inner,
    peekEffective,
    async effective(accountId, keyId) {
      const hit = peekEffective(accountId, keyId);
      if (hit) return hit;
      const at = cache.mark();
      const fresh = await inner.effective(accountId, keyId);
      cache.setFrom(at, keyId, fresh);
      return fresh;
    },
  };
}
