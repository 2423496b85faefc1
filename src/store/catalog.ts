import type { SamplingDefaults } from "../protocol/sampling.ts";
import type { Db } from "./db.ts";
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
  sampling_defaults: string | null;
  tool_format: string | null;
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
  keepAliveSeconds: r.keep_alive_seconds === null ? null : Number(r.keep_alive_seconds),
  samplingDefaults: r.sampling_defaults === null ? {} : (JSON.parse(r.sampling_defaults) as SamplingDefaults),
  toolFormat: r.tool_format ?? null,
  createdAt: r.created_at,
});

/**
 * The catalog of one node (SQLite: `present` is what its last synchronisation found) or of several
 * (`shared`: a model is served while a live node has registered it; see nodes.ts).
 */
export function catalogStore(db: Db, opts: { shared: boolean }): CatalogStore {
  const SERVED = opts.shared
    ? `m.status = 'active' AND m.load_error IS NULL AND EXISTS (SELECT 1 FROM node_models nm JOIN nodes n ON n.id = nm.node_id
         WHERE nm.model_id = m.id AND n.expires_at > ${db.dialect.nowMs})`
    : "m.status = 'active' AND m.present = 1 AND m.load_error IS NULL";
  // An account in 'listed' mode sees only its grants; otherwise every served model.
  const ACCESS = `(a.model_access = 'all' OR EXISTS (SELECT 1 FROM model_grants g WHERE g.account_id = a.id AND g.model_id = m.id))`;
  const get = (d: Db, id: string) => d.get<ModelRow>("SELECT * FROM models WHERE id = $1", [id]);
  const served = (d: Db) => d.all<ModelRow>(`SELECT m.* FROM models m WHERE ${SERVED} ORDER BY m.id${db.dialect.binary}`);
  const addGrant = (d: Db, accountId: number, modelId: string) =>
    d.run("INSERT INTO model_grants (account_id, model_id) VALUES ($1, $2) ON CONFLICT DO NOTHING", [accountId, modelId]);

  const accessOf = async (d: Db, accountId: number) => {
    const row = await d.get<{ model_access: string }>("SELECT model_access FROM accounts WHERE id = $1", [accountId]);
    if (!row) throw new Error(`no account with id ${accountId}`);
    return row.model_access;
  };

  /**
   * The first grant or revoke switches an account to an explicit list, starting from everything
   * it could already use, so that a grant never takes anything away.
   */
  const restrict = async (d: Db, accountId: number, modelId: string) => {
    if (!(await get(d, modelId))) throw new Error(`no model ${modelId} in the catalog`);
    if ((await accessOf(d, accountId)) === "all") {
      for (const m of await served(d)) await addGrant(d, accountId, m.id);
      await d.run("UPDATE accounts SET model_access = 'listed' WHERE id = $1", [accountId]);
    }
  };

  return {
    sync: (models) =>
      db.transaction(async (tx) => {
        const added: string[] = [];
        const updated: string[] = [];
        const seen = new Set<string>();
        for (const m of models) {
          seen.add(m.id);
          const flags = [m.supportsImages ? 1 : 0, m.supportsTools ? 1 : 0, m.supportsStructured ? 1 : 0];
          const defaults = JSON.stringify(m.samplingDefaults ?? {});
          if (await get(tx, m.id)) {
            // Another node may load what this one could not: its error stays off the shared row.
            if (opts.shared && m.loadError) continue;
            await tx.run(
              `UPDATE models SET display_name = $1, present = 1, load_error = $2, context_length = $3, source_dir = $4,
                 supports_images = $5, supports_tools = $6, supports_structured = $7, owned_by = $8, sampling_defaults = $9, tool_format = $10 WHERE id = $11`,
              [m.displayName, m.loadError, m.contextLength, m.sourceDir, ...flags, m.ownedBy, defaults, m.toolFormat ?? null, m.id],
            );
            updated.push(m.id);
          } else {
            await tx.run(
              `INSERT INTO models (id, display_name, present, load_error, context_length, source_dir, supports_images,
                 supports_tools, supports_structured, owned_by, sampling_defaults, tool_format, created_at) VALUES ($1, $2, 1, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
              [m.id, m.displayName, m.loadError, m.contextLength, m.sourceDir, ...flags, m.ownedBy, defaults, m.toolFormat ?? null, Date.now()],
            );
            added.push(m.id);
          }
        }
        const missing: string[] = [];
        if (!opts.shared) {
          for (const r of await tx.all<ModelRow>("SELECT * FROM models WHERE present = 1")) {
            if (!seen.has(r.id)) {
              await tx.run("UPDATE models SET present = 0 WHERE id = $1", [r.id]);
              missing.push(r.id);
            }
          }
        }
        return { added, updated, missing };
      }),
    async get(id) {
      const r = await get(db, id);
      return r ? toModel(r) : null;
    },
    list: async () => (await db.all<ModelRow>(`SELECT * FROM models ORDER BY id${db.dialect.binary}`)).map(toModel),
    listServed: async () => (await served(db)).map(toModel),
    setStatus: async (id, status) => (await db.run("UPDATE models SET status = $1 WHERE id = $2", [status, id])) > 0,
    async setKeepAlive(id, seconds) {
      if (seconds !== null && (!Number.isInteger(seconds) || seconds < -1)) throw new Error("keep-alive must be whole seconds ≥ 0, or -1 (always loaded)");
      return (await db.run("UPDATE models SET keep_alive_seconds = $1 WHERE id = $2", [seconds, id])) > 0;
    },
    async setPrices(id, input, output, cachedInput) {
      const ok = (p: number) => p >= 0 && Number.isFinite(p);
      if (!ok(input) || !ok(output) || (cachedInput != null && !ok(cachedInput))) {
        throw new Error("prices must be finite and not negative");
      }
      // undefined leaves the cached-input price as it is (the column keeps its value).
      if (cachedInput === undefined) {
        return (await db.run("UPDATE models SET input_price_per_mtok = $1, output_price_per_mtok = $2 WHERE id = $3", [input, output, id])) > 0;
      }
      return (
        (await db.run("UPDATE models SET input_price_per_mtok = $1, output_price_per_mtok = $2, cached_input_price_per_mtok = $3 WHERE id = $4", [
          input,
          output,
          cachedInput,
          id,
        ])) > 0
      );
    },
    listForAccount: async (accountId) =>
      (await db.all<ModelRow>(`SELECT m.* FROM models m JOIN accounts a ON a.id = $1 WHERE ${SERVED} AND ${ACCESS} ORDER BY m.id${db.dialect.binary}`, [accountId])).map(toModel),
    async getForAccount(accountId, id) {
      const r = await db.get<ModelRow>(`SELECT m.* FROM models m JOIN accounts a ON a.id = $1 WHERE m.id = $2 AND ${SERVED} AND ${ACCESS}`, [accountId, id]);
      return r ? toModel(r) : null;
    },
    grant: (accountId, modelId) =>
      db.transaction(async (tx) => {
        await restrict(tx, accountId, modelId);
        await addGrant(tx, accountId, modelId);
      }),
    revoke: (accountId, modelId) =>
      db.transaction(async (tx) => {
        await restrict(tx, accountId, modelId);
        await tx.run("DELETE FROM model_grants WHERE account_id = $1 AND model_id = $2", [accountId, modelId]);
      }),
    grants: async (accountId) =>
      (await db.all<{ model_id: string }>(`SELECT model_id FROM model_grants WHERE account_id = $1 ORDER BY model_id${db.dialect.binary}`, [accountId])).map((g) => g.model_id),
    allowAll: (accountId) =>
      db.transaction(async (tx) => {
        await accessOf(tx, accountId);
        await tx.run("DELETE FROM model_grants WHERE account_id = $1", [accountId]);
        await tx.run("UPDATE accounts SET model_access = 'all' WHERE id = $1", [accountId]);
      }),
  };
}
