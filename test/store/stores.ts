// The store suite runs against both stores: `eachStore` declares its tests once per kind, SQLite
// (a file in a temp dir) and PostgreSQL (a database of its own on one server per test file,
// copied from a migrated template so that each store opens at once).
import { Database } from "bun:sqlite";
import { SQL } from "bun";
import { afterEach, describe } from "bun:test";
import { join } from "node:path";
import { openPostgresStore, openSqliteStore, type Store } from "../../src/store/index.ts";
import { migratePostgres } from "../../src/store/migrations.ts";
import { tempDir } from "../helpers/paths.ts";
import { postgresFixture, postgresMissing, type PostgresServer } from "../helpers/postgres.ts";

export interface StoreKind {
  name: "sqlite" | "postgres";
  /** A new, empty, migrated store; closed after the test. */
  open(): Promise<Store>;
  /** Opens the same database again (another process or node would). */
  reopen(store: Store): Promise<Store>;
  /**
   * A second handle for transactions racing the first: PostgreSQL, another connection pool (as
   * another node); SQLite, the same store (one server per file: a second connection in the same
   * thread would wait on the first's write lock while blocking the thread that must release it).
   */
  concurrent(store: Store): Promise<Store>;
  /** Rows of raw SQL against a store's database, around the store (what is really on disk). */
  raw(store: Store, sql: string): Promise<Record<string, unknown>[]>;
}

function sqliteKind(): StoreKind {
  const dirs: { remove(): void }[] = [];
  const stores: Store[] = [];
  afterEach(async () => {
    for (const s of stores.splice(0)) await s.close();
    dirs.splice(0).forEach((d) => d.remove());
  });
  const keep = (s: Store) => (stores.push(s), s);
  return {
    name: "sqlite",
    async open() {
      const d = tempDir("sluice-store-");
      dirs.push(d);
      return keep(openSqliteStore(join(d.path, "sluice.db")));
    },
    reopen: async (store) => keep(openSqliteStore(store.location)),
    concurrent: async (store) => store,
    async raw(store, sql) {
      const db = new Database(store.location);
      try {
        return db.query(sql).all() as Record<string, unknown>[];
      } finally {
        db.close();
      }
    },
  };
}

function postgresKind(fx: { server: PostgresServer | null }): StoreKind {
  const stores: Store[] = [];
  const urls = new Map<Store, string>();
  let template: Promise<void> | null = null;
  let n = 0;
  afterEach(async () => {
    for (const s of stores.splice(0)) await s.close();
  });
  const open = async (url: string) => {
    const s = await openPostgresStore(url, { watch: true, pollMs: 200 });
    stores.push(s);
    urls.set(s, url);
    return s;
  };
  const admin = async <T>(url: string, fn: (sql: SQL) => Promise<T>) => {
    const sql = new SQL(url, { max: 1 });
    try {
      return await fn(sql);
    } finally {
      await sql.close();
    }
  };
  return {
    name: "postgres",
    async open() {
      const server = fx.server!;
      template ??= (async () => {
        await admin(server.url(), (sql) => sql.unsafe("CREATE DATABASE sluice_template"));
        await admin(server.url("sluice_template"), (sql) => migratePostgres(sql));
      })();
      await template;
      const name = `store_${process.pid}_${++n}`;
      await admin(server.url(), (sql) => sql.unsafe(`CREATE DATABASE ${name} TEMPLATE sluice_template`));
      return open(server.url(name));
    },
    reopen: (store) => open(urls.get(store)!),
    concurrent: (store) => open(urls.get(store)!),
    raw: (store, sql) => admin(urls.get(store)!, async (c) => [...((await c.unsafe(sql)) as Record<string, unknown>[])]),
  };
}

/** Declares `body`'s tests for SQLite and for PostgreSQL (skipped, saying why, without it). */
export function eachStore(body: (kind: StoreKind) => void): void {
  describe("sqlite", () => body(sqliteKind()));
  const fx = postgresFixture();
  describe.skipIf(postgresMissing !== null)("postgres", () => body(postgresKind(fx)));
}
