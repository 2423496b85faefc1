// Requests in flight: one row from admission to the usage row, holding the credit reserved for
// the request. Admission of a prepaid account is serialised on its account row, so two nodes never
// both spend the same credit; the row is ended exactly once (finished, or interrupted when its
// node died), which is what keeps a request from being recorded or billed twice.
import { balanceNano, chargeNano, insertCharge, NANO, planOf, reservedNano } from "./billing.ts";
import type { Db } from "./db.ts";
import { randomBase62 } from "./keys.ts";
import type { InflightRequest, InflightStore } from "./types.ts";
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
      `INSERT INTO inflight (id, request_id, account_id, key_id, model_id, node_id, reserved_nano, started_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
      [row.id, row.request_id, row.account_id, row.key_id, row.model_id, row.node_id, row.reserved_nano, row.started_at],
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
      };
      // Unlimited plans reserve nothing and need no lock: one insert.
      if ((await planOf(db, r.accountId)) === "unlimited") return insert(db, row);
      return db.transaction(async (tx) => {
        // The account row's lock orders admissions of one account across nodes (SQLite: the
        // transaction's write lock does).
        const locked = await tx.get<{ plan: string }>(`SELECT plan FROM accounts WHERE id = $1${tx.dialect.forUpdate}`, [r.accountId]);
        if (!locked) throw new Error(`no account with id ${r.accountId}`);
        if (locked.plan === "prepaid") {
          if ((await balanceNano(tx, r.accountId)) - (await reservedNano(tx, r.accountId)) <= 0) return null;
          const p = await tx.get<{ i: number; o: number }>("SELECT input_price_per_mtok AS i, output_price_per_mtok AS o FROM models WHERE id = $1", [r.modelId]);
          row.reserved_nano = p ? chargeNano(r.promptTokens, r.completionTokens, p.i, p.o) : 0;
        }
        return insert(tx, row);
      });
    },
    finish: (id, usage, charge) =>
      db.transaction(async (tx) => {
        // Whoever deletes the row records the request: a finish racing a sweep writes once.
        if ((await tx.run("DELETE FROM inflight WHERE id = $1", [id])) === 0) return false;
        await insertUsage(tx, usage);
        if (charge) {
          await insertCharge(tx, {
            accountId: usage.accountId,
            requestId: usage.requestId,
            modelId: usage.modelId,
            promptTokens: usage.promptTokens,
            cachedTokens: usage.cachedTokens,
            completionTokens: usage.completionTokens,
            at: usage.createdAt,
          });
        }
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
