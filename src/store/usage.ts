import { NANO } from "./billing.ts";
import type { Db } from "./db.ts";
import type { UsageRecord, UsageRow, UsageStore } from "./types.ts";

interface Row {
  id: number;
  request_id: string;
  account_id: number;
  key_id: string | null;
  model_id: string;
  prompt_tokens: number;
  completion_tokens: number;
  cached_tokens: number;
  reasoning_tokens: number;
  latency_ms: number;
  status: string;
  finish_reason: string | null;
  user: string | null;
  metadata: string | null;
  created_at: number;
  cost_nano: number;
}

const toRow = (r: Row): UsageRow => ({
  id: r.id,
  requestId: r.request_id,
  accountId: r.account_id,
  keyId: r.key_id,
  modelId: r.model_id,
  promptTokens: r.prompt_tokens,
  completionTokens: r.completion_tokens,
  cachedTokens: r.cached_tokens,
  reasoningTokens: r.reasoning_tokens,
  latencyMs: r.latency_ms,
  status: r.status,
  finishReason: r.finish_reason,
  user: r.user,
  metadata: r.metadata === null ? null : (JSON.parse(r.metadata) as Record<string, string>),
  createdAt: r.created_at,
  costUsd: r.cost_nano / NANO,
});

/** Writes one usage row (also inside a transaction of inflight.ts), with what it was charged. */
export async function insertUsage(db: Db, u: UsageRecord, costNano = 0): Promise<void> {
  await db.run(
    `INSERT INTO usage (request_id, account_id, key_id, model_id, prompt_tokens, completion_tokens, cached_tokens,
       reasoning_tokens, latency_ms, status, finish_reason, "user", metadata, created_at, cost_nano)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)`,
    [
      u.requestId,
      u.accountId,
      u.keyId,
      u.modelId,
      u.promptTokens,
      u.completionTokens,
      u.cachedTokens ?? 0,
      u.reasoningTokens ?? 0,
      Math.round(u.latencyMs),
      u.status,
      u.finishReason,
      u.user,
      u.metadata ? JSON.stringify(u.metadata) : null,
      u.createdAt ?? Date.now(),
      costNano,
    ],
  );
}

export function usageStore(db: Db): UsageStore {
  return {
    record: (u) => insertUsage(db, u),
    list: async (accountId, opts = {}) =>
      (
        await db.all<Row>(
          `SELECT * FROM usage WHERE account_id = $1 AND created_at >= $2 AND created_at < $3
           ORDER BY created_at DESC, id DESC LIMIT $4`,
          [accountId, opts.since ?? 0, opts.until ?? Number.MAX_SAFE_INTEGER, opts.limit ?? 1000],
        )
      ).map(toRow),
    countAll: async () => (await db.get<{ n: number }>("SELECT count(*) AS n FROM usage"))!.n,
  };
}
