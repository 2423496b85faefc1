// The Db of a PostgreSQL database through Bun's built-in client (Bun.sql): a pool of connections,
// transactions on one connection of it, integers handed back as numbers, and connection failures
// turned into StoreUnavailableError (the API's 503).
import { SQL } from "bun";
import { StoreUnavailableError, type Db, type Dialect, type SqlValue } from "./db.ts";

export const POSTGRES: Dialect = {
  name: "postgres",
  // clock_timestamp(), not now(): now() is the start of the transaction.
  nowMs: "(extract(epoch from clock_timestamp()) * 1000)::bigint",
  forUpdate: " FOR UPDATE",
  binary: ' COLLATE "C"',
  utcDay: (column) => `to_char(to_timestamp(${column} / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD')`,
};

// Type OIDs PostgreSQL sends as text that are integers or decimals here: int8 (counts, ids,
// milliseconds, nano-USD) and numeric (sums of int8). All stay below 2^53 in this schema.
const INT8 = 20;
const NUMERIC = 1700;

type Row = Record<string, unknown>;
interface Result extends Array<Row> {
  count: number;
  columns?: { name: string; type: number }[];
}

function numbers(result: Result): Row[] {
  const convert = result.columns?.filter((c) => c.type === INT8 || c.type === NUMERIC).map((c) => c.name);
  if (convert?.length) {
    for (const row of result) for (const name of convert) if (typeof row[name] === "string") row[name] = Number(row[name]);
  }
  return result;
}

/** Whether an error means the database is out of reach rather than that the statement is wrong. */
export function isUnavailable(e: unknown): boolean {
  const err = e as { code?: string; errno?: string } | null;
  const code = err?.code ?? "";
  if (/^ERR_POSTGRES_(CONNECTION_|CONNECTION$|IDLE_TIMEOUT|LIFETIME_TIMEOUT|NOT_CONNECTED)/.test(code) || code === "ECONNREFUSED" || code === "ECONNRESET") return true;
  // SQLSTATE class 08 (connection exception) and 57P (operator intervention: shutdown, restart).
  const state = typeof err?.errno === "string" ? err.errno : "";
  return state.startsWith("08") || state.startsWith("57P");
}

async function query(sql: SQL, text: string, params: readonly SqlValue[]): Promise<Result> {
  try {
    return (await sql.unsafe(text, params as SqlValue[])) as unknown as Result;
  } catch (e) {
    if (isUnavailable(e)) throw new StoreUnavailableError(`the database is unavailable: ${(e as Error).message}`, { cause: e });
    throw e;
  }
}

export class PostgresDb implements Db {
  readonly dialect = POSTGRES;
  constructor(readonly sql: SQL) {}

  async all<T>(text: string, params: readonly SqlValue[] = []): Promise<T[]> {
    return numbers(await query(this.sql, text, params)) as T[];
  }

  async get<T>(text: string, params: readonly SqlValue[] = []): Promise<T | null> {
    return ((numbers(await query(this.sql, text, params))[0] as T | undefined) ?? null);
  }

  async run(text: string, params: readonly SqlValue[] = []): Promise<number> {
    return (await query(this.sql, text, params)).count;
  }

  async transaction<T>(fn: (tx: Db) => Promise<T>): Promise<T> {
    try {
      return (await this.sql.begin((tx) => fn(new PostgresTx(tx)))) as T;
    } catch (e) {
      if (isUnavailable(e)) throw new StoreUnavailableError(`the database is unavailable: ${(e as Error).message}`, { cause: e });
      throw e;
    }
  }
}

/** The statements of one transaction, on its connection; nested transactions join it. */
class PostgresTx extends PostgresDb {
  override transaction<T>(fn: (tx: Db) => Promise<T>): Promise<T> {
    return fn(this);
  }
}

/** A pool for the store: short connect timeout, so a request fails fast while the database is down. */
export function connectPostgres(url: string, opts: { max?: number } = {}): SQL {
  return new SQL(url, { max: opts.max ?? 10, connectionTimeout: 5, idleTimeout: 60 });
}

/** The URL without its password, for logs and reports. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = "***";
    return u.toString();
  } catch {
    return "(unparseable database URL)";
  }
}
