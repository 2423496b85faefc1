import type { Db } from "./db.ts";
import { hashKey, randomBase62 } from "./keys.ts";
import type { SessionInfo, SessionStore, SignInThrottleStore } from "./types.ts";

interface SessionRow {
  user_id: number;
  csrf_token: string;
  created_at: number;
  expires_at: number;
}

const toSession = (r: SessionRow): SessionInfo => ({
  userId: r.user_id,
  csrfToken: r.csrf_token,
  createdAt: r.created_at,
  expiresAt: r.expires_at,
});

export function sessionStore(db: Db): SessionStore {
  return {
    async create(userId, ttlMs) {
      // Only the hash is stored, like API keys: a copy of the database opens no session.
      const token = randomBase62(43);
      const now = Date.now();
      const session = { userId, csrfToken: randomBase62(32), createdAt: now, expiresAt: now + ttlMs };
      await db.run("INSERT INTO sessions (token_hash, user_id, csrf_token, created_at, expires_at) VALUES ($1, $2, $3, $4, $5)", [
        hashKey(token),
        userId,
        session.csrfToken,
        now,
        session.expiresAt,
      ]);
      return { token, session };
    },
    async get(token) {
      if (!/^[0-9A-Za-z]{20,100}$/.test(token)) return null;
      const r = await db.get<SessionRow>(
        "SELECT user_id, csrf_token, created_at, expires_at FROM sessions WHERE token_hash = $1 AND expires_at > $2",
        [hashKey(token), Date.now()],
      );
      return r ? toSession(r) : null;
    },
    async destroy(token) {
      await db.run("DELETE FROM sessions WHERE token_hash = $1", [hashKey(token)]);
    },
    async destroyForUser(userId) {
      await db.run("DELETE FROM sessions WHERE user_id = $1", [userId]);
    },
    purgeExpired: (now = Date.now()) => db.run("DELETE FROM sessions WHERE expires_at <= $1", [now]),
  };
}

// Emails are kept and compared lower-cased (the column is also NOCASE in SQLite files).
const emailKey = (email: string) => email.trim().toLowerCase();

export function signInThrottleStore(db: Db): SignInThrottleStore {
  const count = async (sql: string, params: (string | number)[]) => (await db.get<{ n: number }>(sql, params))!.n;
  return {
    async recordFailure(email, client, at = Date.now()) {
      await db.run("INSERT INTO sign_in_failures (email, client, at) VALUES ($1, $2, $3)", [emailKey(email), client, at]);
      // Rows older than a day no longer matter to any window the workspace uses.
      await db.run("DELETE FROM sign_in_failures WHERE at < $1", [at - 24 * 3600_000]);
    },
    failures: async (email, client, since) => ({
      email: await count("SELECT count(*) AS n FROM sign_in_failures WHERE email = $1 AND at >= $2", [emailKey(email), since]),
      client: await count("SELECT count(*) AS n FROM sign_in_failures WHERE client = $1 AND at >= $2", [client, since]),
    }),
    async clear(email) {
      await db.run("DELETE FROM sign_in_failures WHERE email = $1", [emailKey(email)]);
    },
  };
}
