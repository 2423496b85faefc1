import type { Database } from "bun:sqlite";
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
export function usageReportStore(db: Database): UsageReportStore {
  const daily = db.query<Sums & { day: string }, [number, number, number]>(
    `SELECT strftime('%Y-%m-%d', created_at / 1000, 'unixepoch') AS day, count(*) AS requests,
            ${SUMS}
     FROM usage WHERE account_id = ? AND created_at >= ? AND created_at < ? GROUP BY day ORDER BY day`,
  );
  const byModel = db.query<Sums & { model_id: string }, [number, number, number]>(
    `SELECT model_id, count(*) AS requests, ${SUMS}
     FROM usage WHERE account_id = ? AND created_at >= ? AND created_at < ?
     GROUP BY model_id ORDER BY requests DESC, model_id`,
  );
  return {
    daily: (accountId, since, until): DailyUsage[] =>
      daily.all(accountId, since, until).map((r) => ({ day: r.day, ...totals(r) })),
    byModel: (accountId, since, until): ModelUsage[] =>
      byModel.all(accountId, since, until).map((r) => ({ modelId: r.model_id, ...totals(r) })),
  };
}
