import type { Database } from "bun:sqlite";
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
  account_priority: number;
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
  accountPriority: r.account_priority,
  prefix: r.prefix,
  label: r.label,
  createdAt: r.created_at,
  lastUsedAt: r.last_used_at,
  revokedAt: r.revoked_at,
});

const SELECT = `SELECT k.id, k.account_id, a.name AS account_name, a.priority AS account_priority, k.prefix, k.label, k.created_at,
  k.last_used_at, k.revoked_at FROM api_keys k JOIN accounts a ON a.id = k.account_id`;

// last_used_at is advisory; writing it on every request would turn each read into a write.
const TOUCH_INTERVAL_MS = 30_000;

export function keyStore(db: Database): KeyStore {
  const insert = db.query(
    "INSERT INTO api_keys (id, account_id, hash, prefix, label, created_at) VALUES (?, ?, ?, ?, ?, ?)",
  );
  const byId = db.query<KeyRow, [string]>(`${SELECT} WHERE k.id = ?`);
  const byHash = db.query<KeyRow, [string]>(`${SELECT} WHERE k.hash = ? AND k.revoked_at IS NULL`);
  const touch = db.query(
    "UPDATE api_keys SET last_used_at = ?1 WHERE id = ?2 AND (last_used_at IS NULL OR last_used_at < ?1 - ?3)",
  );
  const all = db.query<KeyRow, []>(`${SELECT} ORDER BY k.created_at, k.id`);
  const forAccount = db.query<KeyRow, [number]>(`${SELECT} WHERE k.account_id = ? ORDER BY k.created_at, k.id`);
  const revoke = db.query("UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL");
  const revokeOwn = db.query(
    "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND account_id = ? AND revoked_at IS NULL",
  );
  const count = db.query<{ n: number }, [number]>(
    "SELECT count(*) AS n FROM api_keys WHERE account_id = ? AND revoked_at IS NULL",
  );
  return {
    create(accountId, label) {
      const key = generateKey();
      const id = "key_" + randomBase62(16);
      const prefix = key.slice(0, KEY_PREFIX.length + 4);
      insert.run(id, accountId, hashKey(key), prefix, label, Date.now());
      return { key, info: toInfo(byId.get(id)!) };
    },
    authenticate(plainKey) {
      if (!plainKey.startsWith(KEY_PREFIX)) return null;
      // Looked up by hash: the plain key is never compared or stored.
      const r = byHash.get(hashKey(plainKey));
      return r ? toInfo(r) : null;
    },
    touch(keyId, at = Date.now()) {
      touch.run(at, keyId, TOUCH_INTERVAL_MS);
    },
    list(accountId) {
      return (accountId === undefined ? all.all() : forAccount.all(accountId)).map(toInfo);
    },
    revoke(keyId, accountId) {
      const res =
        accountId === undefined ? revoke.run(Date.now(), keyId) : revokeOwn.run(Date.now(), keyId, accountId);
      return res.changes > 0;
    },
    count: (accountId) => count.get(accountId)!.n,
  };
}
