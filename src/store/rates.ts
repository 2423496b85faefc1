// Rate-limit counters in the database, for limits that hold across nodes: a row of token buckets
// per scope (locked while a request is admitted against it) and the requests each node runs per
// scope. A node that dies stops counting as soon as its heartbeat expires.
import type { Db } from "./db.ts";
import { refresh, settle, take, view, type ScopeCounters } from "./rate-buckets.ts";
import type { RateStore } from "./types.ts";

interface BucketRow {
  scope: string;
  requests_limit: number | null;
  requests_level: number | null;
  tokens_limit: number | null;
  tokens_level: number | null;
  at: number;
}

const toCounters = (r: BucketRow): ScopeCounters => ({
  rpm: r.requests_limit,
  tpm: r.tokens_limit,
  requests: r.requests_limit === null ? null : { level: r.requests_level ?? r.requests_limit, at: r.at },
  tokens: r.tokens_limit === null ? null : { level: r.tokens_level ?? r.tokens_limit, at: r.at },
  running: 0,
});

export function rateStore(db: Db): RateStore {
  const now = async (d: Db) => (await d.get<{ now: number }>(`SELECT ${d.dialect.nowMs} AS now`))!.now;
  /** The scope's row, locked until the transaction ends (created full when absent). */
  const lock = async (tx: Db, scope: string, at: number): Promise<ScopeCounters> => {
    const select = `SELECT * FROM rate_buckets WHERE scope = $1${tx.dialect.forUpdate}`;
    let row = await tx.get<BucketRow>(select, [scope]);
    if (!row) {
      await tx.run("INSERT INTO rate_buckets (scope, at) VALUES ($1, $2) ON CONFLICT DO NOTHING", [scope, at]);
      row = (await tx.get<BucketRow>(select, [scope]))!;
    }
    return toCounters(row);
  };
  const write = (tx: Db, scope: string, s: ScopeCounters, at: number) =>
    tx.run("UPDATE rate_buckets SET requests_limit = $1, requests_level = $2, tokens_limit = $3, tokens_level = $4, at = $5 WHERE scope = $6", [
      s.rpm,
      s.requests?.level ?? null,
      s.tpm,
      s.tokens?.level ?? null,
      at,
      scope,
    ]);
  return {
    admit: (nodeId, scopes, estimatedTokens, hold) =>
      db.transaction(async (tx) => {
        const at = await now(tx);
        const pairs: [(typeof scopes)[number], ScopeCounters][] = [];
        for (const sc of scopes) {
          const s = await lock(tx, sc.id, at);
          refresh(s, sc.limits, at);
          if (hold && sc.limits.maxConcurrent !== null) {
            // Only live nodes' requests count (and this node's own, registered or not).
            const r = await tx.get<{ n: number }>(
              `SELECT coalesce(sum(r.n), 0) AS n FROM rate_running r LEFT JOIN nodes n ON n.id = r.node_id
               WHERE r.scope = $1 AND (r.node_id = $2 OR n.expires_at > $3)`,
              [sc.id, nodeId, at],
            );
            s.running = r!.n;
          }
          pairs.push([sc, s]);
        }
        const refused = take(pairs, estimatedTokens, hold);
        for (const [sc, s] of pairs) {
          await write(tx, sc.id, s, at);
          if (!refused && hold) {
            await tx.run(
              `INSERT INTO rate_running (scope, node_id, n) VALUES ($1, $2, 1)
               ON CONFLICT (scope, node_id) DO UPDATE SET n = rate_running.n + 1`,
              [sc.id, nodeId],
            );
          }
        }
        return refused ?? { ok: true as const, state: view(pairs.map((p) => p[1])) };
      }),
    async settle(scopeIds, estimatedTokens, actualTokens) {
      if (estimatedTokens === actualTokens) return;
      await db.transaction(async (tx) => {
        const at = await now(tx);
        for (const id of scopeIds) {
          const row = await tx.get<BucketRow>(`SELECT * FROM rate_buckets WHERE scope = $1${tx.dialect.forUpdate}`, [id]);
          if (!row || row.tokens_limit === null) continue;
          const s = toCounters(row);
          settle(s, at, estimatedTokens, actualTokens);
          await write(tx, id, s, at);
        }
      });
    },
    async release(nodeId, scopeIds) {
      for (const id of scopeIds) {
        await db.run("UPDATE rate_running SET n = CASE WHEN n > 0 THEN n - 1 ELSE 0 END WHERE scope = $1 AND node_id = $2", [id, nodeId]);
      }
    },
    async sweep(liveNodes) {
      const marks = liveNodes.map((_, i) => `$${i + 1}`).join(", ");
      return db.run(liveNodes.length ? `DELETE FROM rate_running WHERE node_id NOT IN (${marks})` : "DELETE FROM rate_running", liveNodes);
    },
  };
}
