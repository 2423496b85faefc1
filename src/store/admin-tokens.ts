// Operator tokens of the admin API (sk-sluice-admin-…): stored as hashes, shown once, revocable.
import type { Db } from "./db.ts";
import { hashKey, randomBase62 } from "./keys.ts";
import type { AdminToken, AdminTokenStore } from "./types.ts";

export const ADMIN_TOKEN_PREFIX = "sk-sluice-admin-";

interface Row {
  id: string;
  label: string;
  prefix: string;
  created_at: number;
  last_used_at: number | null;
  revoked_at: number | null;
}

const toToken = (r: Row): AdminToken => ({ id: r.id, label: r.label, prefix: r.prefix, createdAt: r.created_at, lastUsedAt: r.last_used_at, revokedAt: r.revoked_at });

const COLUMNS = "id, label, prefix, created_at, last_used_at, revoked_at";
const TOUCH_MS = 30_000;

export function adminTokenStore(db: Db): AdminTokenStore {
  const get = async (id: string) => {
    const r = await db.get<Row>(`SELECT ${COLUMNS} FROM admin_tokens WHERE id = $1`, [id]);
    return r ? toToken(r) : null;
  };
  return {
    async create(label) {
      const l = label.trim();
      if (l === "" || l.length > 80) throw new Error("an admin token's label has 1 to 80 characters");
      const token = ADMIN_TOKEN_PREFIX + randomBase62(40);
      const id = "adm_" + randomBase62(16);
      await db.run("INSERT INTO admin_tokens (id, label, hash, prefix, created_at) VALUES ($1, $2, $3, $4, $5)", [
        id,
        l,
        hashKey(token),
        token.slice(0, ADMIN_TOKEN_PREFIX.length + 4),
        Date.now(),
      ]);
      return { token, info: (await get(id))! };
    },
    async authenticate(plain) {
      if (!plain.startsWith(ADMIN_TOKEN_PREFIX)) return null;
      const r = await db.get<Row>(`SELECT ${COLUMNS} FROM admin_tokens WHERE hash = $1 AND revoked_at IS NULL`, [hashKey(plain)]);
      return r ? toToken(r) : null;
    },
    list: async () => (await db.all<Row>(`SELECT ${COLUMNS} FROM admin_tokens ORDER BY created_at, id`)).map(toToken),
    get,
    revoke: async (id) => (await db.run("UPDATE admin_tokens SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL", [Date.now(), id])) > 0,
    async touch(id) {
      const at = Date.now();
      await db.run("UPDATE admin_tokens SET last_used_at = $1 WHERE id = $2 AND (last_used_at IS NULL OR last_used_at < $3)", [at, id, at - TOUCH_MS]);
    },
  };
}
