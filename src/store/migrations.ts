import type { Database } from "bun:sqlite";

/**
 * Schema history. Each entry moves the schema from version i to i+1; entries are never edited
 * once released, only appended, so every earlier file can be brought forward.
 */
export const MIGRATIONS: readonly string[] = [
  // 1: accounts, keys, catalog, access, usage.
  `
  CREATE TABLE accounts (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    model_access TEXT NOT NULL DEFAULT 'all' CHECK (model_access IN ('all', 'listed')),
    created_at INTEGER NOT NULL
  );
  CREATE TABLE api_keys (
    id TEXT PRIMARY KEY,
    account_id INTEGER NOT NULL REFERENCES accounts(id),
    hash TEXT NOT NULL UNIQUE,
    prefix TEXT NOT NULL,
    label TEXT,
    created_at INTEGER NOT NULL,
    last_used_at INTEGER,
    revoked_at INTEGER
  );
  CREATE INDEX api_keys_account ON api_keys(account_id);
  CREATE TABLE models (
    id TEXT PRIMARY KEY,
    display_name TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'inactive')),
    present INTEGER NOT NULL DEFAULT 1,
    load_error TEXT,
    context_length INTEGER NOT NULL,
    source_dir TEXT NOT NULL,
    input_price_per_mtok REAL NOT NULL DEFAULT 0,
    output_price_per_mtok REAL NOT NULL DEFAULT 0,
    supports_images INTEGER NOT NULL DEFAULT 0,
    supports_tools INTEGER NOT NULL DEFAULT 0,
    supports_structured INTEGER NOT NULL DEFAULT 0,
    owned_by TEXT NOT NULL,
    created_at INTEGER NOT NULL
  );
  CREATE TABLE model_grants (
    account_id INTEGER NOT NULL REFERENCES accounts(id),
    model_id TEXT NOT NULL REFERENCES models(id) ON DELETE CASCADE,
    PRIMARY KEY (account_id, model_id)
  );
  CREATE TABLE usage (
    id INTEGER PRIMARY KEY,
    request_id TEXT NOT NULL,
    account_id INTEGER NOT NULL REFERENCES accounts(id),
    key_id TEXT REFERENCES api_keys(id),
    model_id TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    latency_ms INTEGER NOT NULL,
    status TEXT NOT NULL,
    finish_reason TEXT,
    user TEXT,
    metadata TEXT,
    created_at INTEGER NOT NULL
  );
  CREATE INDEX usage_account_time ON usage(account_id, created_at);
  `,
];

export const SCHEMA_VERSION = MIGRATIONS.length;

/** Applies the migrations after the file's `user_version`, each in its own transaction. */
export function migrate(db: Database, target: number = SCHEMA_VERSION): void {
  const current = (db.query("PRAGMA user_version").get() as { user_version: number }).user_version;
  if (current > SCHEMA_VERSION) {
    throw new Error(
      `database schema version ${current} is newer than this build understands (${SCHEMA_VERSION}); use a newer sluice`,
    );
  }
  for (let v = current; v < target; v++) {
    db.transaction(() => {
      db.exec(MIGRATIONS[v]!);
      db.exec(`PRAGMA user_version = ${v + 1}`);
    })();
  }
}

export function schemaVersion(db: Database): number {
  return (db.query("PRAGMA user_version").get() as { user_version: number }).user_version;
}
