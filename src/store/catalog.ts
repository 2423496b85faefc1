import type { Database } from "bun:sqlite";
import type { CatalogModel, CatalogStore, DiscoveredModel } from "./types.ts";

interface ModelRow {
  id: string;
  display_name: string;
  status: "active" | "inactive";
  present: number;
  load_error: string | null;
  context_length: number;
  source_dir: string;
  input_price_per_mtok: number;
  cached_input_price_per_mtok: number | null;
  output_price_per_mtok: number;
  supports_images: number;
  supports_tools: number;
  supports_structured: number;
  owned_by: string;
  keep_alive_seconds: number | null;
  created_at: number;
}

const toModel = (r: ModelRow): CatalogModel => ({
  id: r.id,
  displayName: r.display_name,
  status: r.status,
  present: r.present === 1,
  loadError: r.load_error,
  contextLength: r.context_length,
  sourceDir: r.source_dir,
  inputPricePerMTok: r.input_price_per_mtok,
  cachedInputPricePerMTok: r.cached_input_price_per_mtok,
  outputPricePerMTok: r.output_price_per_mtok,
  supportsImages: r.supports_images === 1,
  supportsTools: r.supports_tools === 1,
  supportsStructured: r.supports_structured === 1,
  ownedBy: r.owned_by,
  keepAliveSeconds: r.keep_alive_seconds,
  createdAt: r.created_at,
});

const SERVED = "m.status = 'active' AND m.present = 1 AND m.load_error IS NULL";

export function catalogStore(db: Database): CatalogStore {
  const get = db.query<ModelRow, [string]>("SELECT * FROM models WHERE id = ?");
  const all = db.query<ModelRow, []>("SELECT * FROM models ORDER BY id");
  const served = db.query<ModelRow, []>(`SELECT m.* FROM models m WHERE ${SERVED} ORDER BY m.id`);
  const insert = db.query(
    `INSERT INTO models (id, display_name, present, load_error, context_length, source_dir, supports_images,
       supports_tools, supports_structured, owned_by, created_at) VALUES (?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?)`,
  );
  const update = db.query(
    `UPDATE models SET display_name = ?, present = 1, load_error = ?, context_length = ?, source_dir = ?,
       supports_images = ?, supports_tools = ?, supports_structured = ?, owned_by = ? WHERE id = ?`,
  );
  const markMissing = db.query("UPDATE models SET present = 0 WHERE id = ?");
  const setStatus = db.query("UPDATE models SET status = ? WHERE id = ?");
  const setPrices = db.query("UPDATE models SET input_price_per_mtok = ?, output_price_per_mtok = ? WHERE id = ?");
  const setCachedPrice = db.query("UPDATE models SET cached_input_price_per_mtok = ? WHERE id = ?");
  const setKeepAlive = db.query("UPDATE models SET keep_alive_seconds = ? WHERE id = ?");
  const access = db.query<{ model_access: string }, [number]>("SELECT model_access FROM accounts WHERE id = ?");
  // An account in 'listed' mode sees only its grants; otherwise every served model.
  const forAccount = db.query<ModelRow, [number]>(
    `SELECT m.* FROM models m JOIN accounts a ON a.id = ?1
     WHERE ${SERVED} AND (a.model_access = 'all'
       OR EXISTS (SELECT 1 FROM model_grants g WHERE g.account_id = a.id AND g.model_id = m.id))
     ORDER BY m.id`,
  );
  const oneForAccount = db.query<ModelRow, [number, string]>(
    `SELECT m.* FROM models m JOIN accounts a ON a.id = ?1
     WHERE m.id = ?2 AND ${SERVED} AND (a.model_access = 'all'
       OR EXISTS (SELECT 1 FROM model_grants g WHERE g.account_id = a.id AND g.model_id = m.id))`,
  );
  const addGrant = db.query("INSERT OR IGNORE INTO model_grants (account_id, model_id) VALUES (?, ?)");
  const delGrant = db.query("DELETE FROM model_grants WHERE account_id = ? AND model_id = ?");
  const grants = db.query<{ model_id: string }, [number]>(
    "SELECT model_id FROM model_grants WHERE account_id = ? ORDER BY model_id",
  );
  const setAccess = db.query("UPDATE accounts SET model_access = ? WHERE id = ?");
  const clearGrants = db.query("DELETE FROM model_grants WHERE account_id = ?");

  const requireModel = (id: string) => {
    if (!get.get(id)) throw new Error(`no model ${id} in the catalog`);
  };
  const accessOf = (accountId: number) => {
    const row = access.get(accountId);
    if (!row) throw new Error(`no account with id ${accountId}`);
    return row.model_access;
  };

  /**
   * The first grant or revoke switches an account to an explicit list, starting from everything
   * it could already use, so that a grant never takes anything away.
   */
  const restrict = (accountId: number, modelId: string) => {
    requireModel(modelId);
    if (accessOf(accountId) === "all") {
      for (const m of served.all()) addGrant.run(accountId, m.id);
      setAccess.run("listed", accountId);
    }
  };

  return {
    sync: db.transaction((models: DiscoveredModel[]) => {
      const added: string[] = [];
      const updated: string[] = [];
      const seen = new Set<string>();
      for (const m of models) {
        seen.add(m.id);
        const flags = [m.supportsImages ? 1 : 0, m.supportsTools ? 1 : 0, m.supportsStructured ? 1 : 0] as const;
        if (get.get(m.id)) {
          update.run(m.displayName, m.loadError, m.contextLength, m.sourceDir, ...flags, m.ownedBy, m.id);
          updated.push(m.id);
        } else {
          insert.run(m.id, m.displayName, m.loadError, m.contextLength, m.sourceDir, ...flags, m.ownedBy, Date.now());
          added.push(m.id);
        }
      }
      const missing: string[] = [];
      for (const r of all.all()) {
        if (!seen.has(r.id) && r.present === 1) {
          markMissing.run(r.id);
          missing.push(r.id);
        }
      }
      return { added, updated, missing };
    }),
    get: (id) => {
      const r = get.get(id);
      return r ? toModel(r) : null;
    },
    list: () => all.all().map(toModel),
    listServed: () => served.all().map(toModel),
    setStatus: (id, status) => setStatus.run(status, id).changes > 0,
    setKeepAlive(id, seconds) {
      if (seconds !== null && (!Number.isInteger(seconds) || seconds < -1)) throw new Error("keep-alive must be whole seconds ≥ 0, or -1 (always loaded)");
      return setKeepAlive.run(seconds, id).changes > 0;
    },
    setPrices: db.transaction((id: string, input: number, output: number, cachedInput?: number | null) => {
      const ok = (p: number) => p >= 0 && Number.isFinite(p);
      if (!ok(input) || !ok(output) || (cachedInput != null && !ok(cachedInput))) {
        throw new Error("prices must be finite and not negative");
      }
      if (setPrices.run(input, output, id).changes === 0) return false;
      if (cachedInput !== undefined) setCachedPrice.run(cachedInput, id);
      return true;
    }),
    listForAccount: (accountId) => forAccount.all(accountId).map(toModel),
    getForAccount: (accountId, id) => {
      const r = oneForAccount.get(accountId, id);
      return r ? toModel(r) : null;
    },
    grant: db.transaction((accountId: number, modelId: string) => {
      restrict(accountId, modelId);
      addGrant.run(accountId, modelId);
    }),
    revoke: db.transaction((accountId: number, modelId: string) => {
      restrict(accountId, modelId);
      delGrant.run(accountId, modelId);
    }),
    grants: (accountId) => grants.all(accountId).map((g) => g.model_id),
    allowAll: db.transaction((accountId: number) => {
      accessOf(accountId);
      clearGrants.run(accountId);
      setAccess.run("all", accountId);
    }),
  };
}
