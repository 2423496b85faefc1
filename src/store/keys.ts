import type { Db } from "./db.ts";
import type { ApiKeyInfo, KeyStore } from "./types.ts";

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
  prefix: string;
  label: string | null;
  created_at: number;
  last_used_at: number | null;
  revoked_at: number | null;
}

const toInfo = (r: KeyRow): ApiKeyInfo => ({
  id: r.id,
  accountId: r.account_id,
  accountName: r.account_name,
  prefix: r.prefix,
  label: r.label,
  createdAt: r.created_at,
  lastUsedAt: r.last_used_at,
  revokedAt: r.revoked_at,
});

const SELECT = `SELECT k.id, k.account_id, a.name AS account_name, k.prefix, k.label, k.created_at,
  k.last_used_at, k.revoked_at FROM api_keys k JOIN accounts a ON a.id = k.account_id`;

// last_used_at is advisory; writing it on every request would turn each read into a write.
export const TOUCH_INTERVAL_MS = 30_000;

export function keyStore(db: Db): KeyStore {
  const byId = (id: string) => db.get<KeyRow>(`${SELECT} WHERE k.id = $1`, [id]);
  return {
    async create(accountId, label) {
      const key = generateKey();
      const id = "key_" + randomBase62(16);
      const prefix = key.slice(0, KEY_PREFIX.length + 4);
      await db.run("INSERT INTO api_keys (id, account_id, hash, prefix, label, created_at) VALUES ($1, $2, $3, $4, $5, $6)", [
        id,
        accountId,
        hashKey(key),
        prefix,
        label,
        Date.now(),
      ]);
      return { key, info: toInfo((await byId(id))!) };
    },
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
