import type { Db } from "./db.ts";
import type { User, UserRole, UserStore } from "./types.ts";

interface UserRow {
  id: number;
  account_id: number;
  account_name: string;
  email: string;
  password_hash: string;
  role: UserRole;
  created_at: number;
}

const toUser = (r: UserRow): User => ({
  id: r.id,
  accountId: r.account_id,
  accountName: r.account_name,
  email: r.email,
  role: r.role,
  createdAt: r.created_at,
});

export const EMAIL = /^[^\s@]{1,64}@[^\s@]{1,255}$/;
export const MIN_PASSWORD_LENGTH = 10;

const SELECT = `SELECT u.*, a.name AS account_name FROM users u JOIN accounts a ON a.id = u.account_id`;

function checkPassword(password: string) {
  if (password.length < MIN_PASSWORD_LENGTH) throw new Error(`a password needs at least ${MIN_PASSWORD_LENGTH} characters`);
  if (password.length > 1024) throw new Error("a password may have at most 1024 characters");
}

/** password_hash of a user without a password (created by SSO): no hash verifies against it. */
const NO_PASSWORD = "";

const hashPassword = (password: string) => Bun.password.hash(password, { algorithm: "argon2id" });

export function userStore(db: Db): UserStore {
  const byId = (id: number) => db.get<UserRow>(`${SELECT} WHERE u.id = $1`, [id]);
  // Compared lower-cased: the column is NOCASE in SQLite and has a unique index on lower(email) in PostgreSQL.
  const byEmail = (email: string) => db.get<UserRow>(`${SELECT} WHERE lower(u.email) = $1`, [email.trim().toLowerCase()]);
  // Verifying against this when the email is unknown costs the same as a real check.
  let dummyHash: Promise<string> | null = null;

  return {
    async create({ accountId, email, password, role = "member" }) {
      const e = email.trim();
      if (!EMAIL.test(e)) throw new Error(`invalid email address ${JSON.stringify(email)}`);
      if (role !== "member" && role !== "operator") throw new Error(`unknown role ${JSON.stringify(role)}`);
      if (password !== null) checkPassword(password);
      if (!(await db.get("SELECT id FROM accounts WHERE id = $1", [accountId]))) throw new Error(`no account with id ${accountId}`);
      if (await byEmail(e)) throw new Error(`a user with email ${e} already exists`);
      const hash = password === null ? NO_PASSWORD : await hashPassword(password);
      const { id } = (await db.get<{ id: number }>(
        "INSERT INTO users (account_id, email, password_hash, role, created_at) VALUES ($1, $2, $3, $4, $5) RETURNING id",
        [accountId, e, hash, role, Date.now()],
      ))!;
      return toUser((await byId(id))!);
    },
    async verify(email, password) {
      const r = await byEmail(email);
      if (!r) {
        dummyHash ??= hashPassword("not-a-real-password-" + crypto.randomUUID());
        await Bun.password.verify(password, await dummyHash);
        return null;
      }
      if (r.password_hash === NO_PASSWORD) {
        // A user of the OpenID provider only: the same work as a wrong password, then no.
        dummyHash ??= hashPassword("not-a-real-password-" + crypto.randomUUID());
        await Bun.password.verify(password, await dummyHash);
        return null;
      }
      return (await Bun.password.verify(password, r.password_hash)) ? toUser(r) : null;
    },
    async setRole(userId, role) {
      if (role !== "member" && role !== "operator") throw new Error(`unknown role ${JSON.stringify(role)}`);
      return (await db.run("UPDATE users SET role = $1 WHERE id = $2", [role, userId])) > 0;
    },
    async setPassword(userId, password) {
      checkPassword(password);
      if (!(await byId(userId))) throw new Error(`no user with id ${userId}`);
      const hash = await hashPassword(password);
      await db.transaction(async (tx) => {
        await tx.run("UPDATE users SET password_hash = $1 WHERE id = $2", [hash, userId]);
        // A new password ends every session opened with the old one.
        await tx.run("DELETE FROM sessions WHERE user_id = $1", [userId]);
      });
    },
    async get(id) {
      const r = await byId(id);
      return r ? toUser(r) : null;
    },
    async getByEmail(email) {
      const r = await byEmail(email);
      return r ? toUser(r) : null;
    },
    list: async (accountId) =>
      (accountId === undefined
        ? await db.all<UserRow>(`${SELECT} ORDER BY u.id`)
        : await db.all<UserRow>(`${SELECT} WHERE u.account_id = $1 ORDER BY u.id`, [accountId])
      ).map(toUser),
    remove: (userId) =>
      db.transaction(async (tx) => {
        await tx.run("DELETE FROM sessions WHERE user_id = $1", [userId]);
        return (await tx.run("DELETE FROM users WHERE id = $1", [userId])) > 0;
      }),
  };
}
