import type { Db } from "./db.ts";
import type { Account, AccountStore } from "./types.ts";

interface AccountRow {
  id: number;
  name: string;
  model_access: "all" | "listed";
  created_at: number;
}

const toAccount = (r: AccountRow): Account => ({
  id: r.id,
  name: r.name,
  modelAccess: r.model_access,
  createdAt: r.created_at,
});

export const ACCOUNT_NAME = /^[a-z0-9][a-z0-9._-]{0,63}$/;

export function accountStore(db: Db): AccountStore {
  const byName = (name: string) => db.get<AccountRow>("SELECT * FROM accounts WHERE name = $1", [name]);
  return {
    async create(name) {
      if (!ACCOUNT_NAME.test(name)) {
        throw new Error(
          `invalid account name ${JSON.stringify(name)}: use 1-64 lowercase letters, digits, '.', '_' or '-'`,
        );
      }
      if (await byName(name)) throw new Error(`account ${name} already exists`);
      const row = await db.get<AccountRow>("INSERT INTO accounts (name, created_at) VALUES ($1, $2) RETURNING *", [name, Date.now()]);
      return toAccount(row!);
    },
    async get(name) {
      const r = await byName(name);
      return r ? toAccount(r) : null;
    },
    async getById(id) {
      const r = await db.get<AccountRow>("SELECT * FROM accounts WHERE id = $1", [id]);
      return r ? toAccount(r) : null;
    },
    list: async () => (await db.all<AccountRow>("SELECT * FROM accounts ORDER BY id")).map(toAccount),
  };
}
