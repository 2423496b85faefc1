import type { Database } from "bun:sqlite";
import type { UsageRow, UsageStore } from "./types.ts";

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
});

export function usageStore(db: Database): UsageStore {
  const insert = db.query(
    `INSERT INTO usage (request_id, account_id, key_id, model_id, prompt_tokens, completion_tokens, cached_tokens,
       reasoning_tokens, latency_ms, status, finish_reason, user, metadata, created_at)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  );
  const list = db.query<Row, [number, number, number, number]>(
    `SELECT * FROM usage WHERE account_id = ? AND created_at >= ? AND created_at < ?
     ORDER BY created_at DESC, id DESC LIMIT ?`,
  );
  const count = db.query<{ n: number }, []>("SELECT count(*) AS n FROM usage");
  return {
    record(u) {
      insert.run(
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
      );
    },
    list(accountId, opts = {}) {
      return list
        .all(accountId, opts.since ?? 0, opts.until ?? Number.MAX_SAFE_INTEGER, opts.limit ?? 1000)
        .map(toRow);
    },
    countAll: () => count.get()!.n,
  };
}
