import type { Db } from "./db.ts";
import { NANO } from "./billing.ts";
import type { ApiKeyInfo, BudgetPeriod, KeyLimits, KeyStore } from "./types.ts";

export const KEY_PREFIX = "sk-sluice-";
const KEY_BODY_LENGTH = 40;
const BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/** Uniform base62 from the CSPRNG (rejection sampling avoids the modulo bias). */
export function randomBase62(length: number): string {
  let out = "";
  const buf = new Uint8Array(length * 2);
  while (out.length < length) {
    crypto.getRandomValues(buf);
    for (const b of buf) {
      if (b < 248) out += BASE62[b % 62];
      if (out.length === length) break;
    }
  }
  return out;
}

export function hashKey(plainKey: string): string {
  // The one-shot form: a third of the cost of a CryptoHasher object, the same digest.
  return Bun.SHA256.hash(plainKey, "hex");
}

export function generateKey(): string {
  return KEY_PREFIX + randomBase62(KEY_BODY_LENGTH);
}

interface KeyRow {
  id: string;
  account_id: number;
  account_name: string;
  account_priority: number;
  prefix: string;
  label: string | null;
  created_at: number;
  last_used_at: number | null;
  revoked_at: number | null;
  budget_nano: number | null;
  budget_period: BudgetPeriod | null;
  expires_at: number | null;
  models: string | null;
}

export const BUDGET_PERIODS: readonly BudgetPeriod[] = ["day", "month", "total"];

/** Where a budget's period began at `now`: the UTC day's or month's start, or the epoch. */
export function periodStart(period: BudgetPeriod, now = Date.now()): number {
  if (period === "total") return 0;
  const d = new Date(now);
  return period === "day" ? Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate()) : Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
}

/** The columns of a key's limits, checked: a change that makes no sense throws, saying why. */
function limitColumns(l: Partial<KeyLimits>, current: KeyLimits): { budget_nano: number | null; budget_period: BudgetPeriod | null; expires_at: number | null; models: string | null } {
  const budget = l.budgetUsd === undefined ? current.budgetUsd : l.budgetUsd;
  if (budget !== null && (!Number.isFinite(budget) || budget <= 0 || budget > 1e9)) throw new Error(`a key's budget must be a positive amount of USD, not ${budget}`);
  let period = l.budgetPeriod === undefined ? current.budgetPeriod : l.budgetPeriod;
  if (period !== null && !BUDGET_PERIODS.includes(period)) throw new Error(`a budget period is day, month or total, not ${JSON.stringify(period)}`);
  if (budget === null && l.budgetPeriod != null) throw new Error("a budget period needs a budget (a budget in USD)");
  if (budget === null) period = null;
  else period ??= "total";
  const expires = l.expiresAt === undefined ? current.expiresAt : l.expiresAt;
  if (expires !== null && !Number.isSafeInteger(expires)) throw new Error(`an expiry must be a time in milliseconds, not ${expires}`);
  const models = l.models === undefined ? current.models : l.models;
  if (models !== null) {
    if (models.length === 0) throw new Error("a key's model list must name at least one model (or none at all: every model of its account)");
    for (const m of models) if (typeof m !== "string" || m === "" || m.length > 256) throw new Error(`not a model id: ${JSON.stringify(m)}`);
  }
  return {
    budget_nano: budget === null ? null : Math.round(budget * NANO),
    budget_period: period,
    expires_at: expires,
    models: models === null ? null : JSON.stringify([...new Set(models)]),
  };
}

const NO_LIMITS: KeyLimits = { budgetUsd: null, budgetPeriod: null, expiresAt: null, models: null };

const toInfo = (r: KeyRow): ApiKeyInfo => ({
  id: r.id,
  accountId: r.account_id,
  accountName: r.account_name,
  accountPriority: Number(r.account_priority),
  prefix: r.prefix,
  label: r.label,
  createdAt: r.created_at,
  lastUsedAt: r.last_used_at,
  revokedAt: r.revoked_at,
  budgetUsd: r.budget_nano === null ? null : r.budget_nano / NANO,
  budgetPeriod: r.budget_period,
  expiresAt: r.expires_at,
  models: r.models === null ? null : Object.freeze(JSON.parse(r.models) as string[]),
});

const SELECT = `SELECT k.id, k.account_id, a.name AS account_name, a.priority AS account_priority, k.prefix, k.label, k.created_at,
  k.last_used_at, k.revoked_at, k.budget_nano, k.budget_period, k.expires_at, k.models FROM api_keys k JOIN accounts a ON a.id = k.account_id`;

// last_used_at is advisory; writing it on every request would turn each read into a write.
export const TOUCH_INTERVAL_MS = 30_000;

export function keyStore(db: Db): KeyStore {
  const byId = (id: string) => db.get<KeyRow>(`${SELECT} WHERE k.id = $1`, [id]);
  return {
    async create(accountId, label, limits = {}) {
      const cols = limitColumns(limits, NO_LIMITS);
      const key = generateKey();
      const id = "key_" + randomBase62(16);
      const prefix = key.slice(0, KEY_PREFIX.length + 4);
      await db.run(
        `INSERT INTO api_keys (id, account_id, hash, prefix, label, created_at, budget_nano, budget_period, expires_at, models)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
        [id, accountId, hashKey(key), prefix, label, Date.now(), cols.budget_nano, cols.budget_period, cols.expires_at, cols.models],
      );
      return { key, info: toInfo((await byId(id))!) };
    },
    async update(keyId, changes, accountId) {
      const current = await byId(keyId);
      if (!current || (accountId !== undefined && current.account_id !== accountId)) return null;
      const cols = limitColumns(changes, toInfo(current));
      const label = changes.label === undefined ? current.label : changes.label;
      await db.run("UPDATE api_keys SET label = $1, budget_nano = $2, budget_period = $3, expires_at = $4, models = $5 WHERE id = $6", [
        label,
        cols.budget_nano,
        cols.budget_period,
        cols.expires_at,
        cols.models,
        keyId,
      ]);
      return toInfo((await byId(keyId))!);
    },
    get: async (keyId) => {
      const r = await byId(keyId);
      return r ? toInfo(r) : null;
    },
    spendUsd: async (keyId, since) =>
      (await db.get<{ n: number }>("SELECT coalesce(sum(cost_nano), 0) AS n FROM usage WHERE key_id = $1 AND created_at >= $2", [keyId, since]))!.n / NANO,
    async authenticate(plainKey) {
      if (!plainKey.startsWith(KEY_PREFIX)) return null;
      // Looked up by hash: the plain key is never compared or stored.
      const r = await db.get<KeyRow>(`${SELECT} WHERE k.hash = $1 AND k.revoked_at IS NULL`, [hashKey(plainKey)]);
      return r ? toInfo(r) : null;
    },
    peek: (plainKey) => (plainKey.startsWith(KEY_PREFIX) ? undefined : null),
    async touch(keyId, at = Date.now()) {
      await db.run("UPDATE api_keys SET last_used_at = $1 WHERE id = $2 AND (last_used_at IS NULL OR last_used_at < $3)", [at, keyId, at - TOUCH_INTERVAL_MS]);
    },
    async list(accountId) {
      const rows =
        accountId === undefined
          ? await db.all<KeyRow>(`${SELECT} ORDER BY k.created_at, k.id`)
          : await db.all<KeyRow>(`${SELECT} WHERE k.account_id = $1 ORDER BY k.created_at, k.id`, [accountId]);
      return rows.map(toInfo);
    },
    async revoke(keyId, accountId) {
      const changes =
        accountId === undefined
          ? await db.run("UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL", [Date.now(), keyId])
          : await db.run("UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND account_id = $3 AND revoked_at IS NULL", [Date.now(), keyId, accountId]);
      return changes > 0;
    },
    count: async (accountId) => (await db.get<{ n: number }>("SELECT count(*) AS n FROM api_keys WHERE account_id = $1 AND revoked_at IS NULL", [accountId]))!.n,
  };
}
