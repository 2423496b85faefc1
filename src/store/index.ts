import { join } from "node:path";
import { accountStore } from "./accounts.ts";
import { adminTokenStore } from "./admin-tokens.ts";
import { auditStore } from "./audit.ts";
import { billingStore } from "./billing.ts";
import { catalogStore } from "./catalog.ts";
import type { Db } from "./db.ts";
import { forgettingAfter, sqliteChangeSignal, type ChangeSignal } from "./generation.ts";
import { inflightStore } from "./inflight.ts";
import { cachedKeyStore } from "./key-cache.ts";
import { keyStore } from "./keys.ts";
import { cachedLimitStore, limitStore } from "./limits.ts";
import { migratePostgres, postgresSchemaVersion, SCHEMA_VERSION } from "./migrations.ts";
import { nodeStore } from "./nodes.ts";
import { connectPostgres, PostgresDb, redactUrl } from "./postgres-db.ts";
import { postgresChangeSignal, uncachedSignal } from "./postgres-signal.ts";
import { rateStore } from "./rates.ts";
import { sessionStore, signInThrottleStore } from "./sessions.ts";
import { oidcLoginStore } from "./oidc-logins.ts";
import { openDatabase, SqliteDb } from "./sqlite-db.ts";
import type { Store, StoreTables } from "./types.ts";
import { usageReportStore } from "./usage-reports.ts";
import { usageStore } from "./usage.ts";
import { userStore } from "./users.ts";

export type * from "./types.ts";
export { PRIORITY_RANGE } from "./accounts.ts";
export { KEY_PREFIX } from "./keys.ts";
export { StoreUnavailableError } from "./db.ts";
export { BudgetExceededError } from "./types.ts";
export { auditedStore, recordAction } from "./audited.ts";
export { ADMIN_TOKEN_PREFIX } from "./admin-tokens.ts";
export { BUDGET_PERIODS, periodStart } from "./keys.ts";
export { EMAIL, MIN_PASSWORD_LENGTH } from "./users.ts";

/** The table families over one Db (the store's, or a transaction's). */
function tables(db: Db, shared: boolean): StoreTables {
  return {
    accounts: accountStore(db),
    keys: keyStore(db),
    limits: limitStore(db),
    catalog: catalogStore(db, { shared }),
    usage: usageStore(db),
    billing: billingStore(db),
    inflight: inflightStore(db),
    users: userStore(db),
    sessions: sessionStore(db),
    signIns: signInThrottleStore(db),
    oidcLogins: oidcLoginStore(db),
    usageReports: usageReportStore(db),
    rates: rateStore(db),
    nodes: nodeStore(db),
    audit: auditStore(db),
    adminTokens: adminTokenStore(db),
  };
}

/** The tables with the caches of the hot path, kept exact by the change signal. */
function assemble(
  db: Db,
  signal: ChangeSignal,
  opts: { kind: Store["kind"]; location: string; shared: boolean; close: () => Promise<void> | void },
): Store {
  const t = tables(db, opts.shared);
  let closed = false;
  return {
    ...t,
    kind: opts.kind,
    location: opts.location,
    keys: forgettingAfter(signal, cachedKeyStore(t.keys, signal), ["revoke", "update"]),
    // A key's cached record carries its account's priority.
    accounts: forgettingAfter(signal, t.accounts, ["setPriority", "setUserBudget"]),
    limits: forgettingAfter(signal, cachedLimitStore(t.limits, signal), ["set"]),
    catalog: forgettingAfter(signal, t.catalog, ["sync", "setStatus", "setPrices", "setKeepAlive", "grant", "revoke", "allowAll"]),
    billing: forgettingAfter(signal, t.billing, ["setPlan"]),
    nodes: forgettingAfter(signal, t.nodes, ["heartbeat", "remove", "sweep"]),
    cacheGeneration: () => signal.generation(),
    async atomically(fn) {
      try {
        return await db.transaction((tx) => fn(tables(tx, opts.shared)));
      } finally {
        signal.forget();
      }
    },
    async healthy() {
      if (closed) return false;
      try {
        await db.get("SELECT 1 AS ok");
        return true;
      } catch {
        return false;
      }
    },
    async close() {
      if (closed) return;
      closed = true;
      signal.close();
      await opts.close();
    },
  };
}

/** The SQLite-backed store: one file, WAL mode, migrated on open. */
export function openSqliteStore(path: string): Store {
  const database = openDatabase(path);
  const db = new SqliteDb(database);
  return assemble(db, sqliteChangeSignal(database), { kind: "sqlite", location: path, shared: false, close: () => db.close() });
}

export interface PostgresStoreOptions {
  /** Keep caches exact through LISTEN/NOTIFY and a periodic check (a server); off for one-shot commands. */
  watch?: boolean;
  /** The periodic check of the change counter, in ms (default 500: a change reaches a node within that even without its notification). */
  pollMs?: number;
  /** Connections in the pool. */
  maxConnections?: number;
  onSignalError?: (e: unknown) => void;
}

/** The PostgreSQL-backed store, shared by several nodes; migrated on open (one node at a time). */
export async function openPostgresStore(url: string, opts: PostgresStoreOptions = {}): Promise<Store> {
  const sql = connectPostgres(url, { max: opts.maxConnections });
  try {
    await migratePostgres(sql);
    const signal = opts.watch ? await postgresChangeSignal(sql, { pollMs: opts.pollMs ?? 500, onError: opts.onSignalError }) : uncachedSignal();
    return assemble(new PostgresDb(sql), signal, {
      kind: "postgres",
      location: redactUrl(url),
      shared: true,
      close: () => sql.close({ timeout: 1 }),
    });
  } catch (e) {
    await sql.close({ timeout: 0 }).catch(() => {});
    throw e;
  }
}

export interface StoreTarget {
  /** postgres://… (several nodes); else the SQLite file under dataDir. */
  database?: string;
  dataDir: string;
}

export function isPostgresUrl(url: string): boolean {
  return /^postgres(ql)?:\/\//i.test(url);
}

/** The store a command or the server names: --database when given, else the data directory's SQLite file. */
export async function openStore(target: StoreTarget, opts: PostgresStoreOptions = {}): Promise<Store> {
  if (target.database) {
    if (!isPostgresUrl(target.database)) throw new Error(`--database must be a postgres:// URL, not ${JSON.stringify(redactUrl(target.database))}`);
    return openPostgresStore(target.database, opts);
  }
  return openSqliteStore(join(target.dataDir, "sluice.db"));
}

export type DatabaseReport =
  | { reachable: true; server: string; schemaVersion: number; current: number }
  | { reachable: false; error: string };

/** What `sluice doctor` says of a PostgreSQL database, without changing it (no migration). */
export async function inspectPostgres(url: string): Promise<DatabaseReport> {
  const sql = connectPostgres(url, { max: 1 });
  try {
    const [row] = (await sql.unsafe("SELECT version() AS v, to_regclass('sluice_schema') IS NOT NULL AS has")) as { v: string; has: boolean }[];
    const schemaVersion = row!.has ? await postgresSchemaVersion(sql) : 0;
    return { reachable: true, server: row!.v.split(" on ")[0]!, schemaVersion, current: SCHEMA_VERSION };
  } catch (e) {
    return { reachable: false, error: (e as Error).message };
  } finally {
    await sql.close({ timeout: 0 }).catch(() => {});
  }
}
