// The audit log: one row per change, appended only, chained by hashes. Each row's hash covers its
// fields and the previous row's hash, so that changing or removing a row (behind the store's back:
// triggers refuse it through SQL unless they are dropped first) breaks every hash after it.
import type { Db } from "./db.ts";
import type { AuditEntry, AuditStore } from "./types.ts";

interface Row {
  id: number;
  seq: number;
  at: number;
  actor_kind: AuditEntry["actorKind"];
  actor: string;
  source: string | null;
  action: string;
  target: string | null;
  before: string | null;
  after: string | null;
  prev_hash: string;
  hash: string;
}

/** The hash of the first row's predecessor. */
export const GENESIS = "0".repeat(64);

// Any fixed number: appends of every node take turns on it (SQLite: the write lock does).
const AUDIT_LOCK = 0x51_1c_e0_02;

const parse = (s: string | null): unknown => (s === null ? null : JSON.parse(s));

const toEntry = (r: Row): AuditEntry => ({
  id: r.id,
  seq: r.seq,
  at: r.at,
  actorKind: r.actor_kind,
  actor: r.actor,
  source: r.source,
  action: r.action,
  target: r.target,
  before: parse(r.before),
  after: parse(r.after),
  prevHash: r.prev_hash,
  hash: r.hash,
});

/** What a row's hash covers: every field as stored, in a fixed order, and the previous hash. */
export function rowHash(r: Omit<Row, "id" | "hash">): string {
  const fields = [r.seq, r.at, r.actor_kind, r.actor, r.source, r.action, r.target, r.before, r.after, r.prev_hash];
  return Bun.SHA256.hash(JSON.stringify(fields), "hex");
}

const text = (v: unknown) => (v === undefined || v === null ? null : JSON.stringify(v));

export function auditStore(db: Db): AuditStore {
  return {
    append: (e) =>
      db.transaction(async (tx) => {
        if (tx.dialect.name === "postgres") await tx.get(`SELECT pg_advisory_xact_lock(${AUDIT_LOCK})`);
        const last = await tx.get<{ seq: number; hash: string }>("SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1");
        const row: Omit<Row, "id" | "hash"> = {
          seq: (last?.seq ?? 0) + 1,
          at: Date.now(),
          actor_kind: e.actor.kind,
          actor: e.actor.name,
          source: e.actor.source,
          action: e.action,
          target: e.target,
          before: text(e.before),
          after: text(e.after),
          prev_hash: last?.hash ?? GENESIS,
        };
        const hash = rowHash(row);
        const stored = await tx.get<Row>(
          `INSERT INTO audit_log (seq, at, actor_kind, actor, source, action, target, "before", "after", prev_hash, hash)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING *`,
          [row.seq, row.at, row.actor_kind, row.actor, row.source, row.action, row.target, row.before, row.after, row.prev_hash, hash],
        );
        return toEntry(stored!);
      }),
    list: async (opts = {}) =>
      (
        await db.all<Row>(
          `SELECT * FROM audit_log WHERE at >= $1 AND at < $2 AND ($3 = '' OR target = $3) ORDER BY seq DESC LIMIT $4`,
          [opts.since ?? 0, opts.until ?? Number.MAX_SAFE_INTEGER, opts.target ?? "", opts.limit ?? 1000],
        )
      ).map(toEntry),
    async verify() {
      let prev = GENESIS;
      let rows = 0;
      // In pages, so a long log is never held whole in memory.
      for (let after = 0; ; ) {
        const page = await db.all<Row>("SELECT * FROM audit_log WHERE seq > $1 ORDER BY seq LIMIT 1000", [after]);
        if (page.length === 0) return { ok: true, rows };
        for (const r of page) {
          if (r.seq !== rows + 1) return { ok: false, rows, seq: rows + 1, problem: `row ${rows + 1} is missing (the next row is ${r.seq})` };
          if (r.prev_hash !== prev) return { ok: false, rows, seq: r.seq, problem: `row ${r.seq} does not follow row ${r.seq - 1} (its previous hash differs)` };
          if (rowHash(r) !== r.hash) return { ok: false, rows, seq: r.seq, problem: `row ${r.seq} was altered (its content does not match its hash)` };
          prev = r.hash;
          rows++;
        }
        after = page[page.length - 1]!.seq;
      }
    },
  };
}
