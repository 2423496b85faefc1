// The nodes sharing one database and the models each serves, kept fresh by their heartbeats. A
// node's registration carries its own expiry (heartbeat time plus the node's timeout, on the
// database's clock), so every reader agrees on who is alive without sharing a setting.
import type { Db } from "./db.ts";
import type { NodeInfo, NodeStore } from "./types.ts";

interface Row {
  id: string;
  url: string;
  version: string;
  started_at: number;
  heartbeat_at: number;
  expires_at: number;
  model_id: string | null;
  queue_depth: number | null;
}

export function nodeStore(db: Db): NodeStore {
  const now = db.dialect.nowMs;
  const removeNodes = async (tx: Db, ids: string[]) => {
    for (const id of ids) {
      // Models first, by name: their trigger moves the change counter (the served lists change).
      await tx.run("DELETE FROM node_models WHERE node_id = $1", [id]);
      await tx.run("DELETE FROM nodes WHERE id = $1", [id]);
    }
  };
  return {
    heartbeat: (node, models, ttlMs) =>
      db.transaction(async (tx) => {
        // One reading of the database's clock for both times.
        const at = (await tx.get<{ now: number }>(`SELECT ${now} AS now`))!.now;
        await tx.run(
          `INSERT INTO nodes (id, url, version, started_at, heartbeat_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6)
           ON CONFLICT (id) DO UPDATE SET url = excluded.url, version = excluded.version, heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at`,
          [node.id, node.url, node.version, node.startedAt, at, at + Math.round(ttlMs)],
        );
        const had = new Map((await tx.all<{ model_id: string; queue_depth: number }>("SELECT model_id, queue_depth FROM node_models WHERE node_id = $1", [node.id])).map((r) => [r.model_id, r.queue_depth]));
        // Only statements that change the set run: an insert or delete moves every node's caches.
        for (const m of models) {
          const depth = had.get(m.id);
          if (depth === undefined) await tx.run("INSERT INTO node_models (node_id, model_id, queue_depth) VALUES ($1, $2, $3)", [node.id, m.id, m.queueDepth]);
          else if (depth !== m.queueDepth) await tx.run("UPDATE node_models SET queue_depth = $1 WHERE node_id = $2 AND model_id = $3", [m.queueDepth, node.id, m.id]);
          had.delete(m.id);
        }
        for (const gone of had.keys()) await tx.run("DELETE FROM node_models WHERE node_id = $1 AND model_id = $2", [node.id, gone]);
      }),
    async live() {
      const rows = await db.all<Row>(
        `SELECT n.id, n.url, n.version, n.started_at, n.heartbeat_at, n.expires_at, m.model_id, m.queue_depth
         FROM nodes n LEFT JOIN node_models m ON m.node_id = n.id
         WHERE n.expires_at > ${now} ORDER BY n.id${db.dialect.binary}, m.model_id${db.dialect.binary}`,
      );
      const out: NodeInfo[] = [];
      for (const r of rows) {
        let node = out[out.length - 1];
        if (!node || node.id !== r.id) {
          node = { id: r.id, url: r.url, version: r.version, startedAt: r.started_at, heartbeatAt: r.heartbeat_at, expiresAt: r.expires_at, models: [] };
          out.push(node);
        }
        if (r.model_id !== null) node.models.push({ id: r.model_id, queueDepth: r.queue_depth ?? 0 });
      }
      return out;
    },
    remove: (nodeId) => db.transaction((tx) => removeNodes(tx, [nodeId])),
    sweep: () =>
      db.transaction(async (tx) => {
        const dead = (await tx.all<{ id: string }>(`SELECT id FROM nodes WHERE expires_at <= ${now}`)).map((r) => r.id);
        await removeNodes(tx, dead);
        return dead;
      }),
  };
}
