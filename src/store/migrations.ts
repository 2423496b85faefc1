// Schema history for both databases, from one description (schema.ts renders each step for SQLite
// and for PostgreSQL). Each entry moves the schema from version i to i+1; entries are never edited
// once released, only appended, so every earlier database can be brought forward.
import type { Database } from "bun:sqlite";
import type { SQL } from "bun";
import { renderStep, type Column, type Step } from "./schema.ts";

const id: Column = { name: "id", type: "id" };
const createdAt: Column = { name: "created_at", type: "int", notNull: true };
const accountRef: Column = { name: "account_id", type: "int", notNull: true, references: "accounts(id)" };

export const MIGRATIONS: readonly (readonly Step[])[] = [
  // 1: accounts, keys, catalog, access, usage.
  [
    {
      table: "accounts",
      columns: [
        id,
        { name: "name", type: "text", notNull: true, unique: true },
        { name: "model_access", type: "text", notNull: true, default: "'all'", check: "model_access IN ('all', 'listed')" },
        createdAt,
      ],
    },
    {
      table: "api_keys",
      columns: [
        { name: "id", type: "text", primaryKey: true },
        accountRef,
        { name: "hash", type: "text", notNull: true, unique: true },
        { name: "prefix", type: "text", notNull: true },
        { name: "label", type: "text" },
        createdAt,
        { name: "last_used_at", type: "int" },
        { name: "revoked_at", type: "int" },
      ],
    },
    { index: "api_keys_account", on: "api_keys", columns: ["account_id"] },
    {
      table: "models",
      columns: [
        { name: "id", type: "text", primaryKey: true },
        { name: "display_name", type: "text", notNull: true },
        { name: "status", type: "text", notNull: true, default: "'active'", check: "status IN ('active', 'inactive')" },
        { name: "present", type: "int", notNull: true, default: "1" },
        { name: "load_error", type: "text" },
        { name: "context_length", type: "int", notNull: true },
        { name: "source_dir", type: "text", notNull: true },
        { name: "input_price_per_mtok", type: "real", notNull: true, default: "0" },
        { name: "output_price_per_mtok", type: "real", notNull: true, default: "0" },
        { name: "supports_images", type: "int", notNull: true, default: "0" },
        { name: "supports_tools", type: "int", notNull: true, default: "0" },
        { name: "supports_structured", type: "int", notNull: true, default: "0" },
        { name: "owned_by", type: "text", notNull: true },
        createdAt,
      ],
    },
    {
      table: "model_grants",
      columns: [
        { name: "account_id", type: "int", notNull: true, references: "accounts(id)" },
        { name: "model_id", type: "text", notNull: true, references: "models(id)", onDeleteCascade: true },
      ],
      primaryKey: ["account_id", "model_id"],
    },
    {
      table: "usage",
      columns: [
        id,
        { name: "request_id", type: "text", notNull: true },
        accountRef,
        { name: "key_id", type: "text", references: "api_keys(id)" },
        { name: "model_id", type: "text", notNull: true },
        { name: "prompt_tokens", type: "int", notNull: true },
        { name: "completion_tokens", type: "int", notNull: true },
        { name: "latency_ms", type: "int", notNull: true },
        { name: "status", type: "text", notNull: true },
        { name: "finish_reason", type: "text" },
        { name: "user", type: "text" },
        { name: "metadata", type: "text" },
        createdAt,
      ],
    },
    { index: "usage_account_time", on: "usage", columns: ["account_id", "created_at"] },
  ],
  // 2: the account workspace: plans and a credit ledger, users, sessions, sign-in failures.
  // Amounts are integer nano-USD so that a balance is an exact sum, never a drifting float.
  [
    { addColumn: "accounts", column: { name: "plan", type: "text", notNull: true, default: "'prepaid'", check: "plan IN ('prepaid', 'unlimited')" } },
    { sql: "UPDATE accounts SET plan = 'unlimited' WHERE name = 'local'" },
    {
      table: "ledger",
      columns: [
        id,
        accountRef,
        { name: "kind", type: "text", notNull: true, check: "kind IN ('charge', 'topup')" },
        { name: "amount_nano", type: "int", notNull: true },
        { name: "request_id", type: "text" },
        { name: "model_id", type: "text" },
        { name: "prompt_tokens", type: "int" },
        { name: "completion_tokens", type: "int" },
        { name: "note", type: "text" },
        createdAt,
      ],
    },
    { index: "ledger_account_time", on: "ledger", columns: ["account_id", "created_at"] },
    {
      table: "users",
      columns: [
        id,
        accountRef,
        { name: "email", type: "text", notNull: true, unique: true, nocase: true },
        { name: "password_hash", type: "text", notNull: true },
        { name: "role", type: "text", notNull: true, default: "'member'", check: "role IN ('member', 'operator')" },
        createdAt,
      ],
    },
    {
      table: "sessions",
      columns: [
        { name: "token_hash", type: "text", primaryKey: true },
        { name: "user_id", type: "int", notNull: true, references: "users(id)", onDeleteCascade: true },
        { name: "csrf_token", type: "text", notNull: true },
        createdAt,
        { name: "expires_at", type: "int", notNull: true },
      ],
    },
    { index: "sessions_user", on: "sessions", columns: ["user_id"] },
    {
      table: "sign_in_failures",
      columns: [
        id,
        { name: "email", type: "text", notNull: true, nocase: true },
        { name: "client", type: "text", notNull: true },
        { name: "at", type: "int", notNull: true },
      ],
    },
    { index: "sign_in_failures_email", on: "sign_in_failures", columns: ["email", "at"] },
    { index: "sign_in_failures_client", on: "sign_in_failures", columns: ["client", "at"] },
  ],
  // 3: rate limits per account (key_id NULL) or per key, and the change counter that moves whenever
  // a key is revoked or a limit changes, in this process or another (the CLI, another node): a
  // server may cache keys and limits and still see such a change on the next request.
  [
    {
      table: "rate_limits",
      columns: [
        accountRef,
        { name: "key_id", type: "text", references: "api_keys(id)" },
        { name: "requests_per_minute", type: "int", check: "requests_per_minute IS NULL OR requests_per_minute > 0" },
        { name: "tokens_per_minute", type: "int", check: "tokens_per_minute IS NULL OR tokens_per_minute > 0" },
        { name: "max_concurrent", type: "int", check: "max_concurrent IS NULL OR max_concurrent > 0" },
        { name: "updated_at", type: "int", notNull: true },
      ],
    },
    { index: "rate_limits_scope", on: "rate_limits", columns: ["account_id", "coalesce(key_id, '')"], unique: true },
    { changeCounter: true },
    { signal: "api_keys_changed", on: "api_keys", event: "update", columns: ["revoked_at", "account_id", "hash"] },
    { signal: "api_keys_deleted", on: "api_keys", event: "delete" },
    { signal: "rate_limits_inserted", on: "rate_limits", event: "insert" },
    { signal: "rate_limits_updated", on: "rate_limits", event: "update" },
    { signal: "rate_limits_deleted", on: "rate_limits", event: "delete" },
  ],
  // 4: the same counter moves when the catalog, model access or an account changes, so the answer
  // of GET /v1/models can be cached per account too.
  [
    { signal: "models_inserted", on: "models", event: "insert" },
    { signal: "models_updated", on: "models", event: "update" },
    { signal: "models_deleted", on: "models", event: "delete" },
    { signal: "model_grants_inserted", on: "model_grants", event: "insert" },
    { signal: "model_grants_deleted", on: "model_grants", event: "delete" },
    { signal: "accounts_updated", on: "accounts", event: "update" },
  ],
  // 5: prompt tokens served from the prefix cache and thinking tokens, per request and per charge,
  // and a price for cached prompt tokens (NULL: they cost the input price).
  [
    {
      addColumn: "models",
      column: { name: "cached_input_price_per_mtok", type: "real", check: "cached_input_price_per_mtok IS NULL OR cached_input_price_per_mtok >= 0" },
    },
    { addColumn: "usage", column: { name: "cached_tokens", type: "int", notNull: true, default: "0" } },
    { addColumn: "usage", column: { name: "reasoning_tokens", type: "int", notNull: true, default: "0" } },
    { addColumn: "ledger", column: { name: "cached_tokens", type: "int" } },
  ],
  // 6: several nodes on one database. Nodes and the models each serves (with its queue, for
  // routing), refreshed by a heartbeat; a model appearing on or leaving a node moves the counter.
  // Requests in flight, each with the credit reserved for it, so prepaid credit holds across nodes
  // and the requests of a node that died are recorded as interrupted. Rate-limit buckets and the
  // requests each node runs per scope, for limits that hold across nodes.
  [
    {
      table: "nodes",
      columns: [
        { name: "id", type: "text", primaryKey: true },
        { name: "url", type: "text", notNull: true },
        { name: "version", type: "text", notNull: true },
        { name: "started_at", type: "int", notNull: true },
        { name: "heartbeat_at", type: "int", notNull: true },
        { name: "expires_at", type: "int", notNull: true },
      ],
    },
    {
      table: "node_models",
      columns: [
        { name: "node_id", type: "text", notNull: true, references: "nodes(id)", onDeleteCascade: true },
        { name: "model_id", type: "text", notNull: true },
        { name: "queue_depth", type: "int", notNull: true, default: "0" },
      ],
      primaryKey: ["node_id", "model_id"],
    },
    { index: "node_models_model", on: "node_models", columns: ["model_id"] },
    { signal: "node_models_inserted", on: "node_models", event: "insert" },
    { signal: "node_models_deleted", on: "node_models", event: "delete" },
    {
      table: "inflight",
      columns: [
        { name: "id", type: "text", primaryKey: true },
        { name: "request_id", type: "text", notNull: true },
        accountRef,
        { name: "key_id", type: "text" },
        { name: "model_id", type: "text", notNull: true },
        { name: "node_id", type: "text", notNull: true },
        { name: "reserved_nano", type: "int", notNull: true },
        { name: "started_at", type: "int", notNull: true },
      ],
    },
    { index: "inflight_account", on: "inflight", columns: ["account_id"] },
    { index: "inflight_node", on: "inflight", columns: ["node_id"] },
    {
      table: "rate_buckets",
      columns: [
        { name: "scope", type: "text", primaryKey: true },
        { name: "requests_limit", type: "int" },
        { name: "requests_level", type: "real" },
        { name: "tokens_limit", type: "int" },
        { name: "tokens_level", type: "real" },
        { name: "at", type: "int", notNull: true },
      ],
    },
    {
      table: "rate_running",
      columns: [
        { name: "scope", type: "text", notNull: true },
        { name: "node_id", type: "text", notNull: true },
        { name: "n", type: "int", notNull: true },
      ],
      primaryKey: ["scope", "node_id"],
    },
  ],
  // 7: an account's priority on a busy model (higher is admitted first), and how long a model stays
  // loaded once idle (seconds; -1: always; NULL: its sluice.json's keep_alive, else serve --keep-alive).
  [
    { addColumn: "accounts", column: { name: "priority", type: "int", notNull: true, default: "0" } },
    { addColumn: "models", column: { name: "keep_alive_seconds", type: "int", check: "keep_alive_seconds IS NULL OR keep_alive_seconds >= -1" } },
  ],
  // 8: keys with limits of their own: a budget in nano-USD per UTC day, UTC month or in total, an
  // expiry, and a list of the models the key may use (JSON; NULL: all its account may use). Each
  // usage row carries what it cost, so a key's spend in its period is a sum over its rows; a change
  // to any of these moves the change counter (keys are cached on every node).
  [
    { addColumn: "api_keys", column: { name: "budget_nano", type: "int", check: "budget_nano IS NULL OR budget_nano > 0" } },
    { addColumn: "api_keys", column: { name: "budget_period", type: "text", check: "budget_period IS NULL OR budget_period IN ('day', 'month', 'total')" } },
    { addColumn: "api_keys", column: { name: "expires_at", type: "int" } },
    { addColumn: "api_keys", column: { name: "models", type: "text" } },
    { addColumn: "usage", column: { name: "cost_nano", type: "int", notNull: true, default: "0" } },
    { index: "usage_key_time", on: "usage", columns: ["key_id", "created_at"] },
    { signal: "api_keys_limits_changed", on: "api_keys", event: "update", columns: ["budget_nano", "budget_period", "expires_at", "models", "label"] },
    // An account's budget per end user (the `user` or `safety_identifier` a request names), held
    // like a key's: the requests in flight note their end user.
    { addColumn: "accounts", column: { name: "user_budget_nano", type: "int", check: "user_budget_nano IS NULL OR user_budget_nano > 0" } },
    { addColumn: "accounts", column: { name: "user_budget_period", type: "text", check: "user_budget_period IS NULL OR user_budget_period IN ('day', 'month', 'total')" } },
    { addColumn: "inflight", column: { name: "end_user", type: "text" } },
    { index: "usage_account_user_time", on: "usage", columns: ["account_id", '"user"', "created_at"] },
  ],
  // 9: rate limits per model, for an account or one of its keys (model_id NULL: every model).
  [
    { addColumn: "rate_limits", column: { name: "model_id", type: "text" } },
    { sql: "DROP INDEX rate_limits_scope" },
    { index: "rate_limits_scope_model", on: "rate_limits", columns: ["account_id", "coalesce(key_id, '')", "coalesce(model_id, '')"], unique: true },
  ],
  // 10: the audit log: every change made through the CLI, the workspace or the admin API, appended
  // only (triggers refuse updates and deletes), each row's hash covering the previous row's, so that
  // a row changed or removed behind the store's back breaks the chain (sluice audit verify). And
  // the operator tokens of the admin API, stored as hashes.
  [
    {
      table: "audit_log",
      columns: [
        id,
        { name: "seq", type: "int", notNull: true, unique: true },
        { name: "at", type: "int", notNull: true },
        { name: "actor_kind", type: "text", notNull: true },
        { name: "actor", type: "text", notNull: true },
        { name: "source", type: "text" },
        { name: "action", type: "text", notNull: true },
        { name: "target", type: "text" },
        { name: "before", type: "text" },
        { name: "after", type: "text" },
        { name: "prev_hash", type: "text", notNull: true },
        { name: "hash", type: "text", notNull: true },
      ],
    },
    { index: "audit_log_at", on: "audit_log", columns: ["at"] },
    { appendOnly: "audit_log" },
    {
      table: "admin_tokens",
      columns: [
        { name: "id", type: "text", primaryKey: true },
        { name: "label", type: "text", notNull: true },
        { name: "hash", type: "text", notNull: true, unique: true },
        { name: "prefix", type: "text", notNull: true },
        createdAt,
        { name: "last_used_at", type: "int" },
        { name: "revoked_at", type: "int" },
      ],
    },
    { signal: "admin_tokens_changed", on: "admin_tokens", event: "update", columns: ["revoked_at"] },
  ],
  // 11: workspace sign-in through an OpenID provider. A sign-in sent to the provider and not yet back:
  // its state (hashed, like session tokens), nonce and PKCE verifier, kept in the database so any
  // node can finish it and each is used once. A user created by SSO has an empty password_hash: no
  // password signs in as them until one is set.
  [
    {
      table: "oidc_logins",
      columns: [
        { name: "state_hash", type: "text", primaryKey: true },
        { name: "nonce", type: "text", notNull: true },
        { name: "code_verifier", type: "text", notNull: true },
        createdAt,
        { name: "expires_at", type: "int", notNull: true },
      ],
    },
    { index: "oidc_logins_expiry", on: "oidc_logins", columns: ["expires_at"] },
  ],
  // 12: the model's sampling defaults (generation_config.json under sluice.json's "defaults"), JSON
  // with temperature, topP, topK and minP where the model sets them; NULL: not known yet.
  [{ addColumn: "models", column: { name: "sampling_defaults", type: "text" } }],
  // 13: the tool-call format a model's calls are parsed and constrained in (NULL: it takes no tools),
  // shown by /v1/models.
  [{ addColumn: "models", column: { name: "tool_format", type: "text" } }],
];

export const SCHEMA_VERSION = MIGRATIONS.length;

function tooNew(current: number): Error {
  return new Error(
    `database schema version ${current} is newer than this build understands (${SCHEMA_VERSION}); use a newer sluice`,
  );
}

/** SQLite: applies the migrations after the file's `user_version`, each in its own transaction. */
export function migrate(db: Database, target: number = SCHEMA_VERSION): void {
  const current = schemaVersion(db);
  if (current > SCHEMA_VERSION) throw tooNew(current);
  for (let v = current; v < target; v++) {
    db.transaction(() => {
      for (const step of MIGRATIONS[v]!) for (const statement of renderStep(step, "sqlite")) db.exec(statement);
      db.exec(`PRAGMA user_version = ${v + 1}`);
    })();
  }
}

export function schemaVersion(db: Database): number {
  return (db.query("PRAGMA user_version").get() as { user_version: number }).user_version;
}

// Any fixed number: nodes starting together take this lock, so one of them migrates and the
// others find the work done.
const MIGRATION_LOCK = 0x51_1c_e0_01;

/** PostgreSQL: the same history, the version in a table of its own, each migration in a transaction. */
export async function migratePostgres(sql: SQL, target: number = SCHEMA_VERSION): Promise<void> {
  for (;;) {
    const done = await sql.begin(async (tx) => {
      await tx.unsafe(`SELECT pg_advisory_xact_lock(${MIGRATION_LOCK})`);
      await tx.unsafe("CREATE TABLE IF NOT EXISTS sluice_schema (version INTEGER NOT NULL)");
      const current = await postgresSchemaVersion(tx);
      if (current > SCHEMA_VERSION) throw tooNew(current);
      if (current >= target) return true;
      for (const step of MIGRATIONS[current]!) for (const statement of renderStep(step, "postgres")) await tx.unsafe(statement);
      await tx.unsafe("DELETE FROM sluice_schema");
      await tx.unsafe(`INSERT INTO sluice_schema (version) VALUES (${current + 1})`);
      return false;
    });
    if (done) return;
  }
}

export async function postgresSchemaVersion(sql: SQL): Promise<number> {
  const rows = (await sql.unsafe("SELECT max(version) AS v FROM sluice_schema")) as { v: number | null }[];
  return rows[0]?.v ?? 0;
}
