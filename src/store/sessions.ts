import type { Database } from "bun:sqlite";
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

export function sessionStore(db: Database): SessionStore {
  const insert = db.query(
    "INSERT INTO sessions (token_hash, user_id, csrf_token, created_at, expires_at) VALUES (?, ?, ?, ?, ?)",
  );
  const get = db.query<SessionRow, [string, number]>(
    "SELECT user_id, csrf_token, created_at, expires_at FROM sessions WHERE token_hash = ? AND expires_at > ?",
  );
  const destroy = db.query("DELETE FROM sessions WHERE token_hash = ?");
  const destroyForUser = db.query("DELETE FROM sessions WHERE user_id = ?");
  const purge = db.query("DELETE FROM sessions WHERE expires_at <= ?");
  return {
    create(userId, ttlMs) {
      // Only the hash is stored, like API keys: a copy of the database opens no session.
      const token = randomBase62(43);
      const now = Date.now();
      const session = { userId, csrfToken: randomBase62(32), createdAt: now, expiresAt: now + ttlMs };
      insert.run(hashKey(token), userId, session.csrfToken, now, session.expiresAt);
      return { token, session };
    },
    get(token) {
      if (!/^[0-9A-Za-z]{20,100}$/.test(token)) return null;
      const r = get.get(hashKey(token), Date.now());
      return r ? toSession(r) : null;
    },
    destroy(token) {
      destroy.run(hashKey(token));
    },
    destroyForUser(userId) {
      destroyForUser.run(userId);
    },
    purgeExpired: (now = Date.now()) => purge.run(now).changes,
  };
}

export function signInThrottleStore(db: Database): SignInThrottleStore {
  const insert = db.query("INSERT INTO sign_in_failures (email, client, at) VALUES (?, ?, ?)");
  const byEmail = db.query<{ n: number }, [string, number]>(
    "SELECT count(*) AS n FROM sign_in_failures WHERE email = ? AND at >= ?",
  );
  const byClient = db.query<{ n: number }, [string, number]>(
    "SELECT count(*) AS n FROM sign_in_failures WHERE client = ? AND at >= ?",
  );
  const clear = db.query("DELETE FROM sign_in_failures WHERE email = ?");
  // Rows older than a day no longer matter to any window the workspace uses.
  const prune = db.query("DELETE FROM sign_in_failures WHERE at < ?");
  return {
    recordFailure(email, client, at = Date.now()) {
      insert.run(email.trim(), client, at);
      prune.run(at - 24 * 3600_000);
    },
    failures: (email, client, since) => ({
      email: byEmail.get(email.trim(), since)!.n,
      client: byClient.get(client, since)!.n,
    }),
    clear(email) {
      clear.run(email.trim());
    },
  };
}
