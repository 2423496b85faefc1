import type { Db } from "./db.ts";
import type { DailyUsage, ModelUsage, UsageReportStore } from "./types.ts";

interface Sums {
  requests: number;
  p: number;
  c: number;
  cached: number;
  reasoning: number;
}

const SUMS = "sum(prompt_tokens) AS p, sum(completion_tokens) AS c, sum(cached_tokens) AS cached, sum(reasoning_tokens) AS reasoning";

const totals = (r: Sums) => ({ requests: r.requests, promptTokens: r.p, completionTokens: r.c, cachedTokens: r.cached, reasoningTokens: r.reasoning });

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
  };
}
