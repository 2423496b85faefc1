// The one thing the store's table modules talk to: a database that runs SQL and answers with
// plain rows, asynchronously, in the same way over SQLite (one file, this process) and PostgreSQL
// (several nodes). Each table module writes its SQL once, in the subset both understand; what
// differs (the clock, row locks, day buckets) comes from `Dialect`.

export type DialectName = "sqlite" | "postgres";

export interface Dialect {
  readonly name: DialectName;
  /** An SQL expression for the database's clock in milliseconds since the epoch. */
  readonly nowMs: string;
  /** Appended to a SELECT that must lock the rows it reads until the transaction ends. */
  readonly forUpdate: string;
  /** Appended to a text column in ORDER BY: byte order in both (PostgreSQL's default follows the locale). */
  readonly binary: string;
  /** The UTC day (YYYY-MM-DD) of a column that holds milliseconds since the epoch. */
  utcDay(column: string): string;
}

export type SqlValue = string | number | null;

export interface Db {
  readonly dialect: Dialect;
  /** Rows of a query. Placeholders are $1, $2 … in both dialects; integers come back as numbers. */
  all<T>(sql: string, params?: readonly SqlValue[]): Promise<T[]>;
  /** The first row of a query, or null. */
  get<T>(sql: string, params?: readonly SqlValue[]): Promise<T | null>;
  /** Runs a statement; resolves with the number of rows it changed. */
  run(sql: string, params?: readonly SqlValue[]): Promise<number>;
  /**
   * Runs fn in one transaction: every statement it makes through `tx` lands, or none. Other work
   * on this Db waits (SQLite) or runs on other connections (PostgreSQL) meanwhile, so fn must use
   * `tx`, never the outer Db. Nested calls join the outer transaction.
   */
  transaction<T>(fn: (tx: Db) => Promise<T>): Promise<T>;
}

/**
 * The database cannot be reached (connection refused or lost, server shutting down). The API
 * answers 503 with Retry-After: the request may succeed once the database is back.
 */
export class StoreUnavailableError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "StoreUnavailableError";
  }
}
