// Requests in flight: one row from admission to the usage row, holding the credit reserved for
// the request. Admission of a prepaid account is serialised on its account row, so two nodes never
// both spend the same credit; the row is ended exactly once (finished, or interrupted when its
// node died), which is what keeps a request from being recorded or billed twice.
import { balanceNano, chargeNano, insertCharge, NANO, planOf, reservedNano } from "./billing.ts";
import type { Db } from "./db.ts";
import { periodStart, randomBase62 } from "./keys.ts";
import { BudgetExceededError, type BudgetPeriod, type InflightRequest, type InflightStore } from "./types.ts";
import { insertUsage } from "./usage.ts";

interface Row {
  id: string;
  request_id: string;
  account_id: number;
  key_id: string | null;
  model_id: string;
  node_id: string;
  reserved_nano: number;
  started_at: number;
  end_user: string | null;
}

/** What admission must check beside the account's credit. */
interface Budgets {
  plan: string;
  key_budget: number | null;
  key_period: BudgetPeriod | null;
  user_budget: number | null;
  user_period: BudgetPeriod | null;
}

const BUDGETS = `SELECT a.plan, k.budget_nano AS key_budget, k.budget_period AS key_period,
  a.user_budget_nano AS user_budget, a.user_budget_period AS user_period
  FROM accounts a LEFT JOIN api_keys k ON k.id = $2 AND k.account_id = a.id WHERE a.id = $1`;

/** Refuses (throws) when spend in the period, reservations in flight and this worst case together exceed a budget. */
async function checkBudget(tx: Db, scope: "key" | "user", budget: number, period: BudgetPeriod, where: string, params: (string | number)[], worst: number): Promise<void> {
  const since = periodStart(period);
  const spent = (await tx.get<{ n: number }>(`SELECT coalesce(sum(cost_nano), 0) AS n FROM usage WHERE ${where} AND created_at >= $${params.length + 1}`, [...params, since]))!.n;
  const held = (await tx.get<{ n: number }>(`SELECT coalesce(sum(reserved_nano), 0) AS n FROM inflight WHERE ${where.replace('"user"', "end_user")}`, params))!.n;
  if (spent + held + worst > budget) throw new BudgetExceededError(scope, budget / NANO, period, (spent + held) / NANO, worst / NANO);
}

const toRequest = (r: Row): InflightRequest => ({
  id: r.id,
  requestId: r.request_id,
  accountId: r.account_id,
  keyId: r.key_id,
  modelId: r.model_id,
  nodeId: r.node_id,
  reservedUsd: r.reserved_nano / NANO,
  startedAt: r.started_at,
});

export function inflightStore(db: Db): InflightStore {
  const insert = async (d: Db, row: Row) => {
    await d.run(
      `INSERT INTO inflight (id, request_id, account_id, key_id, model_id, node_id, reserved_nano, started_at, end_user)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
      [row.id, row.request_id, row.account_id, row.key_id, row.model_id, row.node_id, row.reserved_nano, row.started_at, row.end_user],
    );
    return toRequest(row);
  };

  const interrupt = (id: string, status = "interrupted") =>
    db.transaction(async (tx) => {
      const r = await tx.get<Row>("DELETE FROM inflight WHERE id = $1 RETURNING *", [id]);
      if (!r) return false;
      await insertUsage(tx, {
        requestId: r.request_id,
        accountId: r.account_id,
        keyId: r.key_id,
        modelId: r.model_id,
        promptTokens: 0,
        completionTokens: 0,
        latencyMs: Math.max(0, Date.now() - r.started_at),
        status,
        finishReason: null,
        user: null,
        metadata: null,
      });
      return true;
    });

  return {
    async admit(r) {
      const row: Row = {
        id: `inf_${randomBase62(20)}`,
        request_id: r.requestId,
        account_id: r.accountId,
        key_id: r.keyId,
        model_id: r.modelId,
        node_id: r.nodeId,
        reserved_nano: 0,
        started_at: Date.now(),
        end_user: r.user ?? null,
      };
      const first = await db.get<Budgets>(BUDGETS, [r.accountId, r.keyId ?? ""]);
      if (!first) throw new Error(`no account with id ${r.accountId}`);
      // Unlimited plans without a budget reserve nothing and need no lock: one insert.
      if (first.plan === "unlimited" && first.key_budget === null && (first.user_budget === null || !row.end_user)) return insert(db, row);
      return db.transaction(async (tx) => {
        // The account row's lock orders admissions of one account (and so of its keys and end
        // users) across nodes (SQLite: the transaction's write lock does).
        const locked = await tx.get<{ plan: string }>(`SELECT plan FROM accounts WHERE id = $1${tx.dialect.forUpdate}`, [r.accountId]);
        if (!locked) throw new Error(`no account with id ${r.accountId}`);
        // Read again under the lock: a budget set meanwhile counts.
        const b = (await tx.get<Budgets>(BUDGETS, [r.accountId, r.keyId ?? ""]))!;
        const p = await tx.get<{ i: number; c: number | null; o: number }>(
          "SELECT input_price_per_mtok AS i, cached_input_price_per_mtok AS c, output_price_per_mtok AS o FROM models WHERE id = $1",
          [r.modelId],
        );
        // The most the request can be charged: every prompt token at the dearer of its two prices.
        const worst = p ? chargeNano(r.promptTokens, r.completionTokens, Math.max(p.i, p.c ?? p.i), p.o) : 0;
        if (locked.plan === "prepaid" && (await balanceNano(tx, r.accountId)) - (await reservedNano(tx, r.accountId)) <= 0) return null;
        if (b.key_budget !== null && r.keyId) await checkBudget(tx, "key", b.key_budget, b.key_period ?? "total", "key_id = $1", [r.keyId], worst);
        if (b.user_budget !== null && row.end_user) {
          await checkBudget(tx, "user", b.user_budget, b.user_period ?? "month", 'account_id = $1 AND "user" = $2', [r.accountId, row.end_user], worst);
        }
        if (locked.plan === "prepaid" || b.key_budget !== null || (b.user_budget !== null && row.end_user)) row.reserved_nano = worst;
        return insert(tx, row);
      });
    },
    finish: (id, usage, charge) =>
      db.transaction(async (tx) => {
        // Whoever deletes the row records the request: a finish racing a sweep writes once.
        if ((await tx.run("DELETE FROM inflight WHERE id = $1", [id])) === 0) return false;
        const entry = charge
          ? await insertCharge(tx, {
            accountId: usage.accountId,
            requestId: usage.requestId,
            modelId: usage.modelId,
            promptTokens: usage.promptTokens,
            cachedTokens: usage.cachedTokens,
            completionTokens: usage.completionTokens,
            at: usage.createdAt,
          })
          : null;
        // The row carries its cost: a key's or an end user's spend is a sum over their rows.
        await insertUsage(tx, usage, entry ? -Math.round(entry.amountUsd * NANO) : 0);
        return true;
      }),
    async discard(id) {
      await db.run("DELETE FROM inflight WHERE id = $1", [id]);
    },
    interrupt,
    async sweep(liveNodes) {
      const marks = liveNodes.map((_, i) => `$${i + 1}`).join(", ");
      const rows = await db.all<{ id: string }>(
        liveNodes.length ? `SELECT id FROM inflight WHERE node_id NOT IN (${marks})` : "SELECT id FROM inflight",
        liveNodes,
      );
      let n = 0;
      for (const r of rows) if (await interrupt(r.id)) n++;
      return n;
    },
    list: async (accountId) =>
      (accountId === undefined
        ? await db.all<Row>("SELECT * FROM inflight ORDER BY started_at, id")
        : await db.all<Row>("SELECT * FROM inflight WHERE account_id = $1 ORDER BY started_at, id", [accountId])
      ).map(toRequest),
  };
}
