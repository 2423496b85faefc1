// The admin API's routes: one table that the handler dispatches from, validates bodies with and
// publishes as OpenAPI. Every change goes through the audited store, so it is in the audit log
// under the token's label.
import { Type as T, type Static, type TSchema } from "@sinclair/typebox";
import { keyLimitsFrom, parseExpiry } from "../../key-limits.ts";
import { periodStart, recordAction, type Account as StoreAccount, type ApiKeyInfo, type AuditActor, type KeyLimits, type Plan, type RateLimits, type Store, type UsageGrouping } from "../../store/index.ts";
import { ApiError, badRequest } from "../errors.ts";
import * as S from "./schemas.ts";

export interface AdminResidency {
  load(id: string): Promise<{ model: string; state: string; bytes: number }>;
  unload(id: string): Promise<{ model: string; state: string; bytes: number }>;
}

export interface AdminCtx {
  store: Store;
  actor: AuditActor;
  params: Record<string, string>;
  query: URLSearchParams;
  body: any;
  residency?: AdminResidency;
}

export interface AdminRoute {
  method: "GET" | "POST" | "PUT" | "PATCH" | "DELETE";
  /** Under /admin/v1; {model} matches a model id with its slashes, other {names} one segment. */
  path: string;
  summary: string;
  query?: Record<string, { schema: TSchema; required?: boolean; description: string }>;
  body?: TSchema;
  status?: number;
  response: TSchema;
  handle(c: AdminCtx): Promise<unknown>;
}

const notFound = (what: string) => new ApiError(404, `${what} does not exist.`, "invalid_request_error", null, "not_found");
/** A store refusal (a value that makes no sense) as a 400 that says why. */
async function checked<R>(fn: () => Promise<R>, param: string | null = null): Promise<R> {
  try {
    return await fn();
  } catch (e) {
    if (e instanceof ApiError || (e as Error).name === "StoreUnavailableError") throw e;
    throw badRequest((e as Error).message, param, "invalid_value");
  }
}

async function account(store: Store, name: string): Promise<StoreAccount> {
  const a = await store.accounts.get(name);
  if (!a) throw notFound(`The account '${name}'`);
  return a;
}

async function accountJson(store: Store, a: StoreAccount) {
  const plan = await store.billing.plan(a.id);
  return {
    name: a.name,
    plan,
    balance_usd: plan === "unlimited" ? null : await store.billing.balanceUsd(a.id),
    priority: a.priority,
    model_access: a.modelAccess,
    models: a.modelAccess === "listed" ? await store.catalog.grants(a.id) : null,
    user_budget_usd: a.userBudgetUsd,
    user_budget_period: a.userBudgetPeriod,
    created_at: a.createdAt,
  };
}

async function keyJson(store: Store, k: ApiKeyInfo) {
  return {
    id: k.id,
    account: k.accountName,
    label: k.label,
    prefix: k.prefix,
    budget_usd: k.budgetUsd,
    budget_period: k.budgetPeriod,
    spent_usd: k.budgetPeriod ? await store.keys.spendUsd(k.id, periodStart(k.budgetPeriod)) : null,
    expires_at: k.expiresAt,
    models: k.models,
    created_at: k.createdAt,
    last_used_at: k.lastUsedAt,
    revoked_at: k.revokedAt,
  };
}

async function modelJson(store: Store, id: string) {
  const m = await store.catalog.get(id);
  if (!m) throw notFound(`The model '${id}'`);
  const served = (await store.catalog.listServed()).some((x) => x.id === id);
  return {
    id: m.id,
    status: m.status,
    served,
    context_length: m.contextLength,
    input_per_mtok: m.inputPricePerMTok,
    cached_input_per_mtok: m.cachedInputPricePerMTok,
    output_per_mtok: m.outputPricePerMTok,
    keep_alive_seconds: m.keepAliveSeconds,
    load_error: m.loadError,
  };
}

/** A key's limits from JSON, with its models checked against the catalog. */
async function keyLimits(store: Store, b: { budget_usd?: number | null; budget_period?: string; expires?: string | null; models?: string[] | null }): Promise<Partial<KeyLimits>> {
  const out: Partial<KeyLimits> = {};
  if (b.budget_usd !== undefined) out.budgetUsd = b.budget_usd;
  if (b.budget_period !== undefined) out.budgetPeriod = keyLimitsFrom({ budgetPeriod: b.budget_period }).budgetPeriod!;
  if (b.expires !== undefined) {
    try {
      out.expiresAt = b.expires === null ? null : parseExpiry(b.expires);
    } catch (e) {
      throw badRequest((e as Error).message, "expires", "invalid_value");
    }
  }
  if (b.models !== undefined) {
    for (const m of b.models ?? []) if (!(await store.catalog.get(m))) throw badRequest(`There is no model '${m}' in the catalog.`, "models", "model_not_found");
    out.models = b.models;
  }
  return out;
}

async function key(store: Store, id: string): Promise<ApiKeyInfo> {
  const k = await store.keys.get(id);
  if (!k) throw notFound(`The key '${id}'`);
  return k;
}

const since = (q: URLSearchParams, name: string, fallback: number): number => {
  const v = q.get(name);
  if (v === null || v === "") return fallback;
  const at = /^\d+$/.test(v) ? Number(v) : Date.parse(/^\d{4}-\d{2}-\d{2}$/.test(v) ? `${v}T00:00:00Z` : v);
  if (!Number.isFinite(at)) throw badRequest(`'${name}' must be a date (2026-11-01), a date-time with a zone, or ms since the epoch.`, name, "invalid_value");
  return at;
};

const limitsJson = (e: { accountName: string; keyId: string | null; modelId: string | null } & RateLimits) => ({
  account: e.accountName,
  key: e.keyId,
  model: e.modelId,
  rpm: e.requestsPerMinute,
  tpm: e.tokensPerMinute,
  concurrent: e.maxConcurrent,
});

const ACCOUNT_PARAM = "name";

export const ADMIN_ROUTES: AdminRoute[] = [
  {
    method: "GET",
    path: "/accounts",
    summary: "List accounts",
    response: S.List(S.Account),
    handle: async (c) => ({ object: "list", data: await Promise.all((await c.store.accounts.list()).map((a) => accountJson(c.store, a))) }),
  },
  {
    method: "POST",
    path: "/accounts",
    summary: "Create an account (prepaid unless a plan is given)",
    body: S.AccountCreate,
    status: 201,
    response: S.Account,
    async handle(c) {
      const b = c.body as Static<typeof S.AccountCreate>;
      if (b.user_budget_period && !b.user_budget_usd) throw badRequest("A budget period needs a budget (user_budget_usd).", "user_budget_period", "invalid_value");
      if (await c.store.accounts.get(b.name)) throw new ApiError(409, `The account '${b.name}' already exists.`, "invalid_request_error", "name", "already_exists");
      const a = await checked(() => c.store.accounts.create(b.name), "name");
      if (b.plan) await c.store.billing.setPlan(a.id, b.plan);
      if (b.priority !== undefined) await c.store.accounts.setPriority(a.id, b.priority);
      if (b.user_budget_usd) await checked(() => c.store.accounts.setUserBudget(a.id, b.user_budget_usd!, b.user_budget_period));
      return accountJson(c.store, (await c.store.accounts.get(a.name))!);
    },
  },
  {
    method: "GET",
    path: `/accounts/{${ACCOUNT_PARAM}}`,
    summary: "An account",
    response: S.Account,
    handle: async (c) => accountJson(c.store, await account(c.store, c.params.name!)),
  },
  {
    method: "PATCH",
    path: "/accounts/{name}",
    summary: "Change an account's plan, priority or budget per end user (user_budget_usd null removes it)",
    body: S.AccountUpdate,
    response: S.Account,
    async handle(c) {
      const a = await account(c.store, c.params.name!);
      const b = c.body as Static<typeof S.AccountUpdate>;
      if (b.plan) await c.store.billing.setPlan(a.id, b.plan as Plan);
      if (b.priority !== undefined) await c.store.accounts.setPriority(a.id, b.priority);
      if (b.user_budget_usd !== undefined || b.user_budget_period !== undefined) {
        const usd = b.user_budget_usd === undefined ? a.userBudgetUsd : b.user_budget_usd;
        if (usd === null && b.user_budget_period) throw badRequest("A budget period needs a budget (user_budget_usd).", "user_budget_period", "invalid_value");
        await checked(() => c.store.accounts.setUserBudget(a.id, usd, b.user_budget_period ?? a.userBudgetPeriod ?? "month"));
      }
      return accountJson(c.store, (await c.store.accounts.get(a.name))!);
    },
  },
  {
    method: "GET",
    path: "/accounts/{name}/credit",
    summary: "An account's plan, balance and recent ledger entries",
    response: S.Credit,
    async handle(c) {
      const a = await account(c.store, c.params.name!);
      return {
        account: a.name,
        plan: await c.store.billing.plan(a.id),
        balance_usd: await c.store.billing.balanceUsd(a.id),
        history: (await c.store.billing.history(a.id, { limit: 100 })).map((e) => ({ id: e.id, kind: e.kind, amount_usd: e.amountUsd, request_id: e.requestId, model: e.modelId, note: e.note, created_at: e.createdAt })),
      };
    },
  },
  {
    method: "POST",
    path: "/accounts/{name}/credit",
    summary: "Top up an account's credit",
    body: S.TopUp,
    status: 201,
    response: S.Credit,
    async handle(c) {
      const a = await account(c.store, c.params.name!);
      const b = c.body as Static<typeof S.TopUp>;
      await checked(() => c.store.billing.topUp(a.id, b.usd, b.note ?? `top-up by admin token ${c.actor.name}`), "usd");
      return (await ADMIN_ROUTES.find((r) => r.method === "GET" && r.path === "/accounts/{name}/credit")!.handle(c)) as object;
    },
  },
  {
    method: "GET",
    path: "/accounts/{name}/models",
    summary: "The models an account may use",
    response: S.ModelAccess,
    async handle(c) {
      const a = await account(c.store, c.params.name!);
      return { all: a.modelAccess === "all", models: (await c.store.catalog.listForAccount(a.id)).map((m) => m.id) };
    },
  },
  {
    method: "PUT",
    path: "/accounts/{name}/models",
    summary: "Set the models an account may use: {all: true}, or {models: [...]} (served models only)",
    body: S.ModelAccessSet,
    response: S.ModelAccess,
    async handle(c) {
      const a = await account(c.store, c.params.name!);
      const b = c.body as { all?: true; models?: string[] };
      if (b.all) await c.store.catalog.allowAll(a.id);
      else {
        const served = new Set((await c.store.catalog.listServed()).map((m) => m.id));
        const unknown = b.models!.find((m) => !served.has(m));
        if (unknown) throw badRequest(`The model '${unknown}' is not served.`, "models", "model_not_found");
        const want = new Set(b.models);
        const have = new Set((await c.store.catalog.listForAccount(a.id)).map((m) => m.id));
        for (const m of served) {
          if (want.has(m) && (!have.has(m) || a.modelAccess === "all")) await c.store.catalog.grant(a.id, m);
          if (!want.has(m) && have.has(m)) await c.store.catalog.revoke(a.id, m);
        }
      }
      return (await ADMIN_ROUTES.find((r) => r.method === "GET" && r.path === "/accounts/{name}/models")!.handle(c)) as object;
    },
  },
  {
    method: "GET",
    path: "/keys",
    summary: "List keys (never the keys themselves)",
    query: { account: { schema: T.String(), description: "only this account's keys" } },
    response: S.List(S.Key),
    async handle(c) {
      const name = c.query.get("account");
      const keys = await c.store.keys.list(name ? (await account(c.store, name)).id : undefined);
      return { object: "list", data: await Promise.all(keys.map((k) => keyJson(c.store, k))) };
    },
  },
  {
    method: "POST",
    path: "/keys",
    summary: "Create a key, optionally with its own budget, expiry and model list; the key is in this answer only",
    body: S.KeyCreate,
    status: 201,
    response: S.KeyCreated,
    async handle(c) {
      const b = c.body as Static<typeof S.KeyCreate>;
      const a = await account(c.store, b.account);
      const limits = await keyLimits(c.store, b);
      const { key: plain, info } = await checked(() => c.store.keys.create(a.id, b.label ?? null, limits));
      return { ...(await keyJson(c.store, info)), key: plain };
    },
  },
  {
    method: "GET",
    path: "/keys/{id}",
    summary: "A key",
    response: S.Key,
    handle: async (c) => keyJson(c.store, await key(c.store, c.params.id!)),
  },
  {
    method: "PATCH",
    path: "/keys/{id}",
    summary: "Change a key's label, budget, expiry or model list (null removes one)",
    body: S.KeyUpdate,
    response: S.Key,
    async handle(c) {
      await key(c.store, c.params.id!);
      const b = c.body as Static<typeof S.KeyUpdate>;
      const limits = await keyLimits(c.store, b);
      const info = await checked(() => c.store.keys.update(c.params.id!, { ...limits, ...(b.label !== undefined ? { label: b.label } : {}) }));
      return keyJson(c.store, info!);
    },
  },
  {
    method: "DELETE",
    path: "/keys/{id}",
    summary: "Revoke a key: refused from its next request on every node",
    response: S.Key,
    async handle(c) {
      const k = await key(c.store, c.params.id!);
      if (k.revokedAt !== null) throw new ApiError(409, `The key '${k.id}' is already revoked.`, "invalid_request_error", null, "already_revoked");
      await c.store.keys.revoke(k.id);
      return keyJson(c.store, (await c.store.keys.get(k.id))!);
    },
  },
  {
    method: "GET",
    path: "/limits",
    summary: "List the rate limits that are set",
    query: { account: { schema: T.String(), description: "only this account's" } },
    response: S.List(S.RateLimitEntry),
    async handle(c) {
      const name = c.query.get("account");
      return { object: "list", data: (await c.store.limits.list(name ? (await account(c.store, name)).id : undefined)).map(limitsJson) };
    },
  },
  {
    method: "PUT",
    path: "/limits",
    summary: "Set rate limits of an account, one of its keys, and/or one model",
    body: S.RateLimitSet,
    response: S.RateLimitEntry,
    async handle(c) {
      const b = c.body as Static<typeof S.RateLimitSet>;
      const a = await account(c.store, b.account);
      const keyId = b.key ?? null;
      if (keyId && !(await c.store.keys.list(a.id)).some((k) => k.id === keyId)) throw badRequest(`The account '${a.name}' has no key '${keyId}'.`, "key", "not_found");
      const modelId = b.model ?? null;
      if (modelId && !(await c.store.catalog.get(modelId))) throw badRequest(`There is no model '${modelId}' in the catalog.`, "model", "model_not_found");
      const current = (await c.store.limits.get(a.id, keyId, modelId)) ?? { requestsPerMinute: null, tokensPerMinute: null, maxConcurrent: null };
      const next: RateLimits = {
        requestsPerMinute: b.rpm === undefined ? current.requestsPerMinute : b.rpm,
        tokensPerMinute: b.tpm === undefined ? current.tokensPerMinute : b.tpm,
        maxConcurrent: b.concurrent === undefined ? current.maxConcurrent : b.concurrent,
      };
      await checked(() => c.store.limits.set(a.id, keyId, next, modelId));
      return limitsJson({ accountName: a.name, keyId, modelId, ...next });
    },
  },
  {
    method: "GET",
    path: "/models",
    summary: "The model catalog, with prices and status",
    response: S.List(S.Model),
    handle: async (c) => ({ object: "list", data: await Promise.all((await c.store.catalog.list()).map((m) => modelJson(c.store, m.id))) }),
  },
  {
    method: "PUT",
    path: "/models/{model}/prices",
    summary: "Set a model's prices (USD per million tokens)",
    body: S.Prices,
    response: S.Model,
    async handle(c) {
      const b = c.body as Static<typeof S.Prices>;
      if (!(await c.store.catalog.setPrices(c.params.model!, b.input, b.output, b.cached_input))) throw notFound(`The model '${c.params.model}'`);
      return modelJson(c.store, c.params.model!);
    },
  },
  {
    method: "PATCH",
    path: "/models/{model}",
    summary: "Enable or disable a model, or set its keep-alive (seconds; -1 always; null: its default)",
    body: S.ModelUpdate,
    response: S.Model,
    async handle(c) {
      const b = c.body as Static<typeof S.ModelUpdate>;
      const id = c.params.model!;
      await modelJson(c.store, id);
      if (b.status) await c.store.catalog.setStatus(id, b.status);
      if (b.keep_alive_seconds !== undefined) await c.store.catalog.setKeepAlive(id, b.keep_alive_seconds);
      return modelJson(c.store, id);
    },
  },
  ...(["load", "unload"] as const).map(
    (verb): AdminRoute => ({
      method: "POST",
      path: `/models/{model}/${verb}`,
      summary: verb === "load" ? "Load a model into memory on this node" : "Unload a model from this node's memory (refused while requests use it)",
      response: S.Residency,
      async handle(c) {
        const id = c.params.model!;
        await modelJson(c.store, id);
        if (!c.residency) throw new ApiError(409, "This server keeps every model loaded.", "invalid_request_error", null, "not_supported");
        let r;
        try {
          r = await c.residency[verb](id);
        } catch (e) {
          throw new ApiError(409, (e as Error).message, "invalid_request_error", null, `${verb}_refused`);
        }
        await recordAction(c.store, c.actor, `models.${verb}`, `model:${id}`, null, { state: r.state, bytes: r.bytes });
        return { model: r.model, state: r.state, bytes: r.bytes };
      },
    }),
  ),
  {
    method: "GET",
    path: "/usage",
    summary: "An account's requests, tokens and spend grouped by key, model, end user or UTC day",
    query: {
      account: { schema: T.String(), required: true, description: "the account" },
      by: { schema: T.Union([T.Literal("key"), T.Literal("model"), T.Literal("user"), T.Literal("day")]), required: true, description: "how to group" },
      since: { schema: T.String(), description: "a date, date-time or ms; default 30 days ago" },
      until: { schema: T.String(), description: "a date, date-time or ms (not included); default now" },
    },
    response: S.UsageReport,
    async handle(c) {
      const a = await account(c.store, c.query.get("account") ?? "");
      const by = c.query.get("by") as UsageGrouping;
      if (!["key", "model", "user", "day"].includes(by)) throw badRequest("'by' must be key, model, user or day.", "by", "invalid_value");
      const from = since(c.query, "since", Date.now() - 30 * 86_400_000);
      const until = since(c.query, "until", Date.now() + 1);
      const rows = await c.store.usageReports.grouped(a.id, by, from, until);
      return {
        account: a.name,
        by,
        since: from,
        until,
        rows: rows.map((g) => ({ group: g.group, requests: g.requests, prompt_tokens: g.promptTokens, cached_tokens: g.cachedTokens, completion_tokens: g.completionTokens, reasoning_tokens: g.reasoningTokens, cost_usd: g.costUsd })),
      };
    },
  },
  {
    method: "GET",
    path: "/audit",
    summary: "The audit log, newest first",
    query: {
      since: { schema: T.String(), description: "a date, date-time or ms" },
      limit: { schema: T.Integer({ minimum: 1, maximum: 10000 }), description: "most entries (default 100)" },
    },
    response: S.List(S.AuditEntry),
    async handle(c) {
      const limit = Number(c.query.get("limit") ?? "100");
      if (!Number.isInteger(limit) || limit < 1 || limit > 10_000) throw badRequest("'limit' must be a whole number from 1 to 10000.", "limit", "invalid_value");
      const entries = await c.store.audit.list({ since: since(c.query, "since", 0), limit });
      return { object: "list", data: entries.map((e) => ({ seq: e.seq, at: e.at, actor_kind: e.actorKind, actor: e.actor, source: e.source, action: e.action, target: e.target, before: e.before, after: e.after, hash: e.hash })) };
    },
  },
  {
    method: "GET",
    path: "/audit/verify",
    summary: "Check the audit log's hash chain",
    response: S.AuditVerdict,
    handle: async (c) => {
      const v = await c.store.audit.verify();
      return v.ok ? { ok: true, rows: v.rows } : { ok: false, rows: v.rows, problem: v.problem };
    },
  },
];
