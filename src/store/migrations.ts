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
  // 2: the account workspace: plans and a credit ledger, users, sessions, sign-in failures.
  // Amounts are integer nano-USD so that a balance is an exact sum, never a drifting float.
  `
  ALTER TABLE accounts ADD COLUMN plan TEXT NOT NULL DEFAULT 'prepaid' CHECK (plan IN ('prepaid', 'unlimited'));
  UPDATE accounts SET plan = 'unlimited' WHERE name = 'local';
  CREATE TABLE ledger (
    id INTEGER PRIMARY KEY,
    account_id INTEGER NOT NULL REFERENCES accounts(id),
    kind TEXT NOT NULL CHECK (kind IN ('charge', 'topup')),
    amount_nano INTEGER NOT NULL,
    request_id TEXT,
    model_id TEXT,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    note TEXT,
    created_at INTEGER NOT NULL
  );
  CREATE INDEX ledger_account_time ON ledger(account_id, created_at);
  CREATE TABLE users (
    id INTEGER PRIMARY KEY,
    account_id INTEGER NOT NULL REFERENCES accounts(id),
    email TEXT NOT NULL UNIQUE COLLATE NOCASE,
    password_hash TEXT NOT NULL,
    role TEXT NOT NULL DEFAULT 'member' CHECK (role IN ('member', 'operator')),
    created_at INTEGER NOT NULL
  );
  CREATE TABLE sessions (
    token_hash TEXT PRIMARY KEY,
    user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    csrf_token TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
  );
  CREATE INDEX sessions_user ON sessions(user_id);
  CREATE TABLE sign_in_failures (
    id INTEGER PRIMARY KEY,
    email TEXT NOT NULL COLLATE NOCASE,
    client TEXT NOT NULL,
    at INTEGER NOT NULL
  );
  CREATE INDEX sign_in_failures_email ON sign_in_failures(email, at);
  CREATE INDEX sign_in_failures_client ON sign_in_failures(client, at);
  `,
  // 3: rate limits per account (key_id NULL) or per key, and a generation number that triggers bump
  // whenever a key is revoked or a limit changes, in this process or another (the CLI): a server
  // may cache keys and limits and still see such a change on the next request.
  `
  CREATE TABLE rate_limits (
    account_id INTEGER NOT NULL REFERENCES accounts(id),
    key_id TEXT REFERENCES api_keys(id),
    requests_per_minute INTEGER CHECK (requests_per_minute IS NULL OR requests_per_minute > 0),
    tokens_per_minute INTEGER CHECK (tokens_per_minute IS NULL OR tokens_per_minute > 0),
    max_concurrent INTEGER CHECK (max_concurrent IS NULL OR max_concurrent > 0),
    updated_at INTEGER NOT NULL
  );
  CREATE UNIQUE INDEX rate_limits_scope ON rate_limits(account_id, ifnull(key_id, ''));
  CREATE TABLE auth_generation (id INTEGER PRIMARY KEY CHECK (id = 1), n INTEGER NOT NULL);
  INSERT INTO auth_generation (id, n) VALUES (1, 0);
  CREATE TRIGGER api_keys_changed AFTER UPDATE OF revoked_at, account_id, hash ON api_keys
    BEGIN UPDATE auth_generation SET n = n + 1 WHERE id = 1; END;
  CREATE TRIGGER api_keys_deleted AFTER DELETE ON api_keys
    BEGIN UPDATE auth_generation SET n = n + 1 WHERE id = 1; END;
  CREATE TRIGGER rate_limits_inserted AFTER INSERT ON rate_limits
    BEGIN UPDATE auth_generation SET n = n + 1 WHERE id = 1; END;
  CREATE TRIGGER rate_limits_updated AFTER UPDATE ON rate_limits
    BEGIN UPDATE auth_generation SET n = n + 1 WHERE id = 1; END;
  CREATE TRIGGER rate_limits_deleted AFTER DELETE ON rate_limits
    BEGIN UPDATE auth_generation SET n = n + 1 WHERE id = 1; END;
  `,
  // 4: the same generation number moves when the catalog, model access or an account changes, so
  // the answer of GET /v1/models can be cached per account too.
  `
  CREATE TRIGGER models_inserted AFTER INSERT ON models
    BEGIN UPDATE auth_generation SET n = n + 1 WHERE id = 1; END;
  CREATE TRIGGER models_updated AFTER UPDATE ON models
    BEGIN UPDATE auth_generation SET n = n + 1 WHERE id = 1; END;
  CREATE TRIGGER models_deleted AFTER DELETE ON models
    BEGIN UPDATE auth_generation SET n = n + 1 WHERE id = 1; END;
  CREATE TRIGGER model_grants_inserted AFTER INSERT ON model_grants
    BEGIN UPDATE auth_generation SET n = n + 1 WHERE id = 1; END;
  CREATE TRIGGER model_grants_deleted AFTER DELETE ON model_grants
    BEGIN UPDATE auth_generation SET n = n + 1 WHERE id = 1; END;
  CREATE TRIGGER accounts_updated AFTER UPDATE ON accounts
    BEGIN UPDATE auth_generation SET n = n + 1 WHERE id = 1; END;
  `,
  // 5: prompt tokens served from the prefix cache and thinking tokens, per request and per charge,
  // and a price for cached prompt tokens (NULL: they cost the input price).
  `
  ALTER TABLE models ADD COLUMN cached_input_price_per_mtok REAL CHECK (cached_input_price_per_mtok IS NULL OR cached_input_price_per_mtok >= 0);
  ALTER TABLE usage ADD COLUMN cached_tokens INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE usage ADD COLUMN reasoning_tokens INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE ledger ADD COLUMN cached_tokens INTEGER;
  `,
  // 6: an account's priority on a busy model (higher is admitted first), and how long a model stays
  // loaded once idle (seconds; -1: always; NULL: its sluice.json's keep_alive, else serve --keep-alive).
  `
  ALTER TABLE accounts ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE models ADD COLUMN keep_alive_seconds INTEGER CHECK (keep_alive_seconds IS NULL OR keep_alive_seconds >= -1);
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
