// The Db of one SQLite file through bun:sqlite. Its calls are synchronous underneath; they are
// handed out as settled promises so that the table modules are the same for both databases.
import { Database, type Statement } from "bun:sqlite";
import { mkdirSync } from "node:fs";
import { dirname } from "node:path";
import type { Db, Dialect, SqlValue } from "./db.ts";
import { migrate } from "./migrations.ts";

/** Opens (creating when absent) the SQLite file in WAL mode and brings its schema up to date. */
export function openDatabase(path: string): Database {
  if (path !== ":memory:") mkdirSync(dirname(path), { recursive: true });
  const db = new Database(path, { create: true, strict: true });
  // WAL lets readers (the workspace, /v1/models) proceed while a usage row is being written.
  db.exec("PRAGMA journal_mode = WAL");
  db.exec("PRAGMA synchronous = NORMAL");
  db.exec("PRAGMA foreign_keys = ON");
  db.exec("PRAGMA busy_timeout = 5000");
  migrate(db);
  return db;
}

export const SQLITE: Dialect = {
  name: "sqlite",
  nowMs: "CAST(unixepoch('subsec') * 1000 AS INTEGER)",
  // BEGIN IMMEDIATE takes the file's write lock: a transaction reads what it writes over.
  forUpdate: "",
  binary: "",
  utcDay: (column) => `strftime('%Y-%m-%d', ${column} / 1000, 'unixepoch')`,
};

/** $1, $2 … (PostgreSQL's placeholders, used by every module) as SQLite's ?1, ?2 …. */
const numbered = (sql: string) => sql.replace(/\$(\d+)/g, "?$1");

export class SqliteDb implements Db {
  readonly dialect = SQLITE;
  private readonly statements = new Map<string, Statement>();
  /** Settles when the open transaction ends; other callers wait for it. */
  private busy: Promise<void> | null = null;

  constructor(readonly database: Database) {}

  private statement(sql: string): Statement {
    let s = this.statements.get(sql);
    if (!s) {
      s = this.database.query(numbered(sql));
      this.statements.set(sql, s);
    }
    return s;
  }

  // Outside a transaction a call runs at once; while one is open (its awaits let other requests
  // run) they wait for it, so no statement of theirs lands inside it.
  async all<T>(sql: string, params: readonly SqlValue[] = []): Promise<T[]> {
    while (this.busy) await this.busy;
    return this.statement(sql).all(...params) as T[];
  }

  async get<T>(sql: string, params: readonly SqlValue[] = []): Promise<T | null> {
    while (this.busy) await this.busy;
    return (this.statement(sql).get(...params) as T | undefined) ?? null;
  }

  async run(sql: string, params: readonly SqlValue[] = []): Promise<number> {
    while (this.busy) await this.busy;
    return this.statement(sql).run(...params).changes;
  }

  async transaction<T>(fn: (tx: Db) => Promise<T>): Promise<T> {
    while (this.busy) await this.busy;
    let end!: () => void;
    this.busy = new Promise((resolve) => (end = resolve));
    try {
      this.database.exec("BEGIN IMMEDIATE");
      try {
        const result = await fn(new SqliteTx(this));
        this.database.exec("COMMIT");
        return result;
      } catch (e) {
        if (this.database.inTransaction) this.database.exec("ROLLBACK");
        throw e;
      }
    } finally {
      this.busy = null;
      end();
    }
  }

  /** For the transaction's own statements, which must not wait for it. */
  runNow<T>(kind: "all" | "get" | "run", sql: string, params: readonly SqlValue[]): T {
    const s = this.statement(sql);
    if (kind === "all") return s.all(...params) as T;
    if (kind === "get") return ((s.get(...params) as T | undefined) ?? null) as T;
    return s.run(...params).changes as T;
  }

  close(): void {
    for (const s of this.statements.values()) s.finalize();
    this.statements.clear();
    this.database.close();
  }
}

class SqliteTx implements Db {
  readonly dialect = SQLITE;
  constructor(private readonly db: SqliteDb) {}
  async all<T>(sql: string, params: readonly SqlValue[] = []): Promise<T[]> {
    return this.db.runNow<T[]>("all", sql, params);
  }
  async get<T>(sql: string, params: readonly SqlValue[] = []): Promise<T | null> {
    return this.db.runNow<T | null>("get", sql, params);
  }
  async run(sql: string, params: readonly SqlValue[] = []): Promise<number> {
    return this.db.runNow<number>("run", sql, params);
  }
  transaction<T>(fn: (tx: Db) => Promise<T>): Promise<T> {
    return fn(this);
  }
}
