import type { Db } from "./db.ts";
import { NANO } from "./billing.ts";
import { BUDGET_PERIODS } from "./keys.ts";
import type { Account, AccountStore } from "./types.ts";

interface AccountRow {
  id: number;
  name: string;
  model_access: "all" | "listed";
  priority: number;
  created_at: number;
  user_budget_nano: number | null;
  user_budget_period: Account["userBudgetPeriod"];
}

const toAccount = (r: AccountRow): Account => ({
  id: r.id,
  name: r.name,
  modelAccess: r.model_access,
  priority: Number(r.priority),
  createdAt: r.created_at,
  userBudgetUsd: r.user_budget_nano === null ? null : r.user_budget_nano / NANO,
  userBudgetPeriod: r.user_budget_period,
});

export const ACCOUNT_NAME = /^[a-z0-9][a-z0-9._-]{0,63}$/;

/** Account priorities: whole numbers in this range (0 is the default). */
export const PRIORITY_RANGE = { min: -100, max: 100 } as const;

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
    async setPriority(id, priority) {
      if (!Number.isInteger(priority) || priority < PRIORITY_RANGE.min || priority > PRIORITY_RANGE.max) {
        throw new Error(`priority must be a whole number from ${PRIORITY_RANGE.min} to ${PRIORITY_RANGE.max}`);
      }
      return (await db.run("UPDATE accounts SET priority = $1 WHERE id = $2", [priority, id])) > 0;
    },
    async setUserBudget(id, usd, period = "month") {
      if (usd !== null && (!Number.isFinite(usd) || usd <= 0 || usd > 1e9)) throw new Error(`a budget per end user must be a positive amount of USD, not ${usd}`);
      if (!BUDGET_PERIODS.includes(period)) throw new Error(`a budget period is day, month or total, not ${JSON.stringify(period)}`);
      return (
        (await db.run("UPDATE accounts SET user_budget_nano = $1, user_budget_period = $2 WHERE id = $3", [
          usd === null ? null : Math.round(usd * NANO),
          usd === null ? null : period,
          id,
        ])) > 0
      );
    },
  };
}
