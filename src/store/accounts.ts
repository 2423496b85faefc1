import type { Database } from "bun:sqlite";
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

export function accountStore(db: Database): AccountStore {
  const insert = db.query<AccountRow, [string, number]>(
    "INSERT INTO accounts (name, created_at) VALUES (?, ?) RETURNING *",
  );
  const byName = db.query<AccountRow, [string]>("SELECT * FROM accounts WHERE name = ?");
  const byId = db.query<AccountRow, [number]>("SELECT * FROM accounts WHERE id = ?");
  const all = db.query<AccountRow, []>("SELECT * FROM accounts ORDER BY id");
  return {
    create(name) {
      if (!ACCOUNT_NAME.test(name)) {
        throw new Error(
          `invalid account name ${JSON.stringify(name)}: use 1-64 lowercase letters, digits, '.', '_' or '-'`,
        );
      }
      if (byName.get(name)) throw new Error(`account ${name} already exists`);
      return toAccount(insert.get(name, Date.now())!);
    },
    get: (name) => {
      const r = byName.get(name);
      return r ? toAccount(r) : null;
    },
    getById: (id) => {
      const r = byId.get(id);
      return r ? toAccount(r) : null;
    },
    list: () => all.all().map(toAccount),
  };
}
