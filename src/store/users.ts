import type { Database } from "bun:sqlite";
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

const hashPassword = (password: string) => Bun.password.hash(password, { algorithm: "argon2id" });

export function userStore(db: Database): UserStore {
  const insert = db.query<{ id: number }, [number, string, string, UserRole, number]>(
    "INSERT INTO users (account_id, email, password_hash, role, created_at) VALUES (?, ?, ?, ?, ?) RETURNING id",
  );
  const byId = db.query<UserRow, [number]>(`${SELECT} WHERE u.id = ?`);
  const byEmail = db.query<UserRow, [string]>(`${SELECT} WHERE u.email = ?`);
  const all = db.query<UserRow, []>(`${SELECT} ORDER BY u.id`);
  const forAccount = db.query<UserRow, [number]>(`${SELECT} WHERE u.account_id = ? ORDER BY u.id`);
  const setHash = db.query("UPDATE users SET password_hash = ? WHERE id = ?");
  const remove = db.query("DELETE FROM users WHERE id = ?");
  const removeSessions = db.query("DELETE FROM sessions WHERE user_id = ?");
  const accountExists = db.query<{ id: number }, [number]>("SELECT id FROM accounts WHERE id = ?");
  // Verifying against this when the email is unknown costs the same as a real check.
  let dummyHash: Promise<string> | null = null;

  return {
    async create({ accountId, email, password, role = "member" }) {
      const e = email.trim();
      if (!EMAIL.test(e)) throw new Error(`invalid email address ${JSON.stringify(email)}`);
      if (role !== "member" && role !== "operator") throw new Error(`unknown role ${JSON.stringify(role)}`);
      checkPassword(password);
      if (!accountExists.get(accountId)) throw new Error(`no account with id ${accountId}`);
      if (byEmail.get(e)) throw new Error(`a user with email ${e} already exists`);
      const hash = await hashPassword(password);
      const { id } = insert.get(accountId, e, hash, role, Date.now())!;
      return toUser(byId.get(id)!);
    },
    async verify(email, password) {
      const r = byEmail.get(email.trim());
      if (!r) {
        dummyHash ??= hashPassword("not-a-real-password-" + crypto.randomUUID());
        await Bun.password.verify(password, await dummyHash);
        return null;
      }
      return (await Bun.password.verify(password, r.password_hash)) ? toUser(r) : null;
    },
    async setPassword(userId, password) {
      checkPassword(password);
      if (!byId.get(userId)) throw new Error(`no user with id ${userId}`);
      setHash.run(await hashPassword(password), userId);
      // A new password ends every session opened with the old one.
      removeSessions.run(userId);
    },
    get: (id) => {
      const r = byId.get(id);
      return r ? toUser(r) : null;
    },
    getByEmail: (email) => {
      const r = byEmail.get(email.trim());
      return r ? toUser(r) : null;
    },
    list: (accountId) => (accountId === undefined ? all.all() : forAccount.all(accountId)).map(toUser),
    remove: db.transaction((userId: number) => {
      removeSessions.run(userId);
      return remove.run(userId).changes > 0;
    }),
  };
}
