// Rate limits per account and per key (SQL only here). `effective` is read on every API request,
// so it is cached and re-read only when the auth generation moves.
import type { Database } from "bun:sqlite";
import { authGeneration, Lru } from "./generation.ts";
import type { LimitStore, RateLimitEntry, RateLimits } from "./types.ts";

interface Row {
  account_id: number;
  account_name: string;
  key_id: string | null;
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

const SELECT = `SELECT l.account_id, a.name AS account_name, l.key_id, l.requests_per_minute, l.tokens_per_minute,
  l.max_concurrent, l.updated_at FROM rate_limits l JOIN accounts a ON a.id = l.account_id`;

function check(limits: RateLimits): void {
  for (const [name, v] of Object.entries(limits)) {
    if (v !== null && (!Number.isInteger(v) || v <= 0 || v > 1e12)) {
      throw new Error(`${name} must be a positive integer or null (no limit), not ${v}`);
    }
  }
}

export function limitStore(db: Database): LimitStore {
  const exact = db.query<Row, [number, string]>(`${SELECT} WHERE l.account_id = ? AND ifnull(l.key_id, '') = ?`);
  const remove = db.query("DELETE FROM rate_limits WHERE account_id = ? AND ifnull(key_id, '') = ?");
  const insert = db.query(
    "INSERT INTO rate_limits (account_id, key_id, requests_per_minute, tokens_per_minute, max_concurrent, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
  );
  const all = db.query<Row, []>(`${SELECT} ORDER BY a.name, l.key_id`);
  const forAccount = db.query<Row, [number]>(`${SELECT} WHERE l.account_id = ? ORDER BY l.key_id`);
  const generation = authGeneration(db);
  // Per key (a key id belongs to one account): both scopes' limits in one entry, so a request
  // makes one lookup by a string it already holds and gets the same frozen answer each time.
  const cache = new Lru<string, EffectiveLimits>(4096);
  let seen = -1;

  const get = (accountId: number, keyId?: string | null): RateLimits | null => {
    const r = exact.get(accountId, keyId ?? "");
    return r ? toLimits(r) : null;
  };
  return {
    get,
    set(accountId, keyId, limits) {
      check(limits);
      db.transaction(() => {
        remove.run(accountId, keyId ?? "");
        if (limits.requestsPerMinute !== null || limits.tokensPerMinute !== null || limits.maxConcurrent !== null) {
          insert.run(accountId, keyId, limits.requestsPerMinute, limits.tokensPerMinute, limits.maxConcurrent, Date.now());
        }
      })();
    },
    list(accountId) {
      return (accountId === undefined ? all.all() : forAccount.all(accountId)).map(
        (r): RateLimitEntry => ({ ...toLimits(r), accountId: r.account_id, accountName: r.account_name, keyId: r.key_id, updatedAt: r.updated_at }),
      );
    },
    effective(accountId, keyId) {
      const now = generation();
      if (now !== seen) {
        cache.clear();
        seen = now;
      }
      let hit = cache.get(keyId);
      if (hit === undefined || hit.accountId !== accountId) {
        hit = Object.freeze({ accountId, account: freeze(get(accountId, null)), key: freeze(get(accountId, keyId)) });
        cache.set(keyId, hit);
      }
      return hit;
    },
  };
}

type EffectiveLimits = Readonly<{ accountId: number; account: RateLimits | null; key: RateLimits | null }>;
const freeze = (l: RateLimits | null) => (l ? Object.freeze(l) : null);
