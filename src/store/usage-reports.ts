import type { Db } from "./db.ts";
import { NANO } from "./billing.ts";
import type { DailyUsage, ModelUsage, UsageGroup, UsageGrouping, UsageReportStore } from "./types.ts";

interface Sums {
  requests: number;
  p: number;
  c: number;
  cached: number;
  reasoning: number;
}

const SUMS = "sum(prompt_tokens) AS p, sum(completion_tokens) AS c, sum(cached_tokens) AS cached, sum(reasoning_tokens) AS reasoning";

const totals = (r: Sums) => ({ requests: r.requests, promptTokens: r.p, completionTokens: r.c, cachedTokens: r.cached, reasoningTokens: r.reasoning });

const GROUP_COLUMNS: Record<UsageGrouping, string> = { key: "key_id", model: "model_id", user: '"user"', day: "created_at" };

// Aggregates over the usage table for charts; days are UTC so every viewer sees the same buckets.
export function usageReportStore(db: Db): UsageReportStore {
  return {
    daily: async (accountId, since, until): Promise<DailyUsage[]> =>
      (
        await db.all<Sums & { day: string }>(
          `SELECT ${db.dialect.utcDay("created_at")} AS day, count(*) AS requests, ${SUMS}
           FROM usage WHERE account_id = $1 AND created_at >= $2 AND created_at < $3 GROUP BY day ORDER BY day`,
          [accountId, since, until],
        )
      ).map((r) => ({ day: r.day, ...totals(r) })),
    byModel: async (accountId, since, until): Promise<ModelUsage[]> =>
      (
        await db.all<Sums & { model_id: string }>(
          `SELECT model_id, count(*) AS requests, ${SUMS}
           FROM usage WHERE account_id = $1 AND created_at >= $2 AND created_at < $3
           GROUP BY model_id ORDER BY requests DESC, model_id${db.dialect.binary}`,
          [accountId, since, until],
        )
      ).map((r) => ({ modelId: r.model_id, ...totals(r) })),
    async grouped(accountId, by, since, until): Promise<UsageGroup[]> {
      const column = GROUP_COLUMNS[by];
      if (!column) throw new Error(`usage is grouped by key, model, user or day, not ${JSON.stringify(by)}`);
      const expr = by === "day" ? db.dialect.utcDay("created_at") : column;
      const rows = await db.all<Sums & { g: string | null; cost: number }>(
        `SELECT ${expr} AS g, count(*) AS requests, ${SUMS}, coalesce(sum(cost_nano), 0) AS cost
         FROM usage WHERE account_id = $1 AND created_at >= $2 AND created_at < $3
         GROUP BY ${expr} ORDER BY ${by === "day" ? expr : `cost DESC, requests DESC, ${expr}${db.dialect.binary}`}`,
        [accountId, since, until],
      );
      return rows.map((r) => ({ group: r.g, ...totals(r), costUsd: Number(r.cost) / NANO }));
    },
  };
}
