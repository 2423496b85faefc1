import type { Database } from "bun:sqlite";
import type { Account, AccountStore } from "./types.ts";

interface AccountRow {
  id: number;
  name: string;
  model_access: "all" | "listed";
  priority: number;
  created_at: number;
}

const toAccount = (r: AccountRow): Account => ({
  id: r.id,
  name: r.name,
  modelAccess: r.model_access,
  priority: r.priority,
  createdAt: r.created_at,
});

export const ACCOUNT_NAME = /^[a-z0-9][a-z0-9._-]{0,63}$/;

/** Account priorities: whole numbers in this range (0 is the default). */
export const PRIORITY_RANGE = { min: -100, max: 100 } as const;

export function accountStore(db: Database): AccountStore {
  const insert = db.query<AccountRow, [string, number]>(
    "INSERT INTO accounts (name, created_at) VALUES (?, ?) RETURNING *",
  );
  const byName = db.query<AccountRow, [string]>("SELECT * FROM accounts WHERE name = ?");
  const byId = db.query<AccountRow, [number]>("SELECT * FROM accounts WHERE id = ?");
  const all = db.query<AccountRow, []>("SELECT * FROM accounts ORDER BY id");
  const setPriority = db.query("UPDATE accounts SET priority = ? WHERE id = ?");
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
    setPriority(id, priority) {
      if (!Number.isInteger(priority) || priority < PRIORITY_RANGE.min || priority > PRIORITY_RANGE.max) {
        throw new Error(`priority must be a whole number from ${PRIORITY_RANGE.min} to ${PRIORITY_RANGE.max}`);
      }
      return setPriority.run(priority, id).changes > 0;
    },
  };
}
