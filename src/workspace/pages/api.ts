// The workspace's internal JSON routes (not under /v1): the same data as the pages, for scripts
// and for tests. Every route is scoped to the signed-in user's account.
import type { ApiKeyInfo } from "../../store/index.ts";
import { keyLimitsFrom } from "../../key-limits.ts";
import { json } from "../http.ts";
import type { Route } from "../router.ts";
import { billingData } from "./billing.ts";
import { usageData } from "./usage.ts";

const keyJson = (k: ApiKeyInfo) => ({
  id: k.id,
  label: k.label,
  prefix: k.prefix,
  created_at: k.createdAt,
  last_used_at: k.lastUsedAt,
  revoked_at: k.revokedAt,
  budget_usd: k.budgetUsd,
  budget_period: k.budgetPeriod,
  expires_at: k.expiresAt,
  models: k.models,
});

/** Token counts as the API's usage names them (cached within prompt, reasoning within completion). */
const tokens = (x: { promptTokens: number; completionTokens: number; cachedTokens: number; reasoningTokens: number }) => ({
  prompt_tokens: x.promptTokens,
  cached_tokens: x.cachedTokens,
  completion_tokens: x.completionTokens,
  reasoning_tokens: x.reasoningTokens,
});

export const apiRoutes: Route[] = [
  {
    method: "GET",
    path: "/api/me",
    access: "user",
    handle: (c) => json({ email: c.user.email, role: c.user.role, account: c.user.accountName, csrf_token: c.session.csrfToken }),
  },
  { method: "GET", path: "/api/keys", access: "user", handle: async (c) => json({ data: (await c.store.keys.list(c.user.accountId)).map(keyJson) }) },
  {
    method: "POST",
    path: "/api/keys",
    access: "user",
    async handle(c) {
      const label = c.field("label");
      if (!label || label.length > 80) return json({ error: "label must have 1 to 80 characters" }, 400);
      const given = (n: string) => (c.fields(n).length ? c.fields(n).join(",") : undefined);
      let limits;
      try {
        limits = keyLimitsFrom({ budgetUsd: given("budget_usd"), budgetPeriod: given("budget_period"), expires: given("expires"), models: given("models") });
        const allowed = new Set((await c.store.catalog.listForAccount(c.user.accountId)).map((m) => m.id));
        const other = limits.models?.find((m) => !allowed.has(m));
        if (other) return json({ error: `the account may not use ${other}` }, 400);
        const { key, info } = await c.store.keys.create(c.user.accountId, label, limits);
        return json({ key, ...keyJson(info) }, 201);
      } catch (e) {
        return json({ error: (e as Error).message }, 400);
      }
    },
  },
  {
    method: "POST",
    path: "/api/keys/:id/revoke",
    access: "user",
    handle: async (c) =>
      (await c.store.keys.revoke(c.params.id!, c.user.accountId)) ? json({ id: c.params.id, revoked: true }) : json({ error: "no such active key" }, 404),
  },
  {
    method: "GET",
    path: "/api/usage",
    access: "user",
    async handle(c) {
      const d = await usageData(c);
      return json({
        from: d.range.from,
        to: d.range.to,
        by: d.by,
        groups: d.groups.map((g) => ({ group: g.group, requests: g.requests, ...tokens(g), cost_usd: g.costUsd })),
        daily: d.daily.map((x) => ({ day: x.day, requests: x.requests, ...tokens(x) })),
        by_model: d.byModel.map((x) => ({ model: x.modelId, requests: x.requests, ...tokens(x) })),
        recent: d.recent.map((u) => ({
          time: u.createdAt,
          request_id: u.requestId,
          model: u.modelId,
          ...tokens(u),
          latency_ms: u.latencyMs,
          status: u.status,
          user: u.user,
          cost_usd: u.costUsd,
        })),
      });
    },
  },
  {
    method: "GET",
    path: "/api/models",
    access: "user",
    handle: async (c) =>
      json({
        data: (await c.store.catalog.listForAccount(c.user.accountId)).map((m) => ({
          id: m.id,
          context_length: m.contextLength,
          input_per_million_tokens: m.inputPricePerMTok,
          cached_input_per_million_tokens: m.cachedInputPricePerMTok ?? m.inputPricePerMTok,
          output_per_million_tokens: m.outputPricePerMTok,
          capabilities: { tools: m.supportsTools, structured_output: m.supportsStructured, images: m.supportsImages },
          // By the request's names; a parameter absent here takes the API's default.
          sampling_defaults: {
            ...(m.samplingDefaults.temperature !== undefined ? { temperature: m.samplingDefaults.temperature } : {}),
            ...(m.samplingDefaults.topP !== undefined ? { top_p: m.samplingDefaults.topP } : {}),
            ...(m.samplingDefaults.topK !== undefined ? { top_k: m.samplingDefaults.topK } : {}),
            ...(m.samplingDefaults.minP !== undefined ? { min_p: m.samplingDefaults.minP } : {}),
          },
        })),
      }),
  },
  {
    method: "GET",
    path: "/api/billing",
    access: "user",
    async handle(c) {
      const { summary, history } = await billingData(c);
      return json({
        plan: summary.plan,
        balance_usd: summary.balanceUsd,
        period_spend_usd: summary.spendUsd,
        period_top_ups_usd: summary.topUpsUsd,
        history: history.map((e) => ({
          time: e.createdAt,
          kind: e.kind,
          amount_usd: e.amountUsd,
          request_id: e.requestId,
          model: e.modelId,
          prompt_tokens: e.promptTokens,
          cached_tokens: e.cachedTokens,
          completion_tokens: e.completionTokens,
          note: e.note,
        })),
      });
    },
  },
];
