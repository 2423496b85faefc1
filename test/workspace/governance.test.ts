// The workspace's governance pages against the real server: a key's own limits set and changed in
// the keys page (and refused, saying why, when they make no sense), and what they do to the API.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { symlinkSync } from "node:fs";
import { join } from "node:path";
import { syntheticModel, tinyModelsRoot } from "../helpers/models.ts";
import { tempDir } from "../helpers/paths.ts";
import { startTestServer, type TestServer } from "../helpers/server.ts";
import { makeAccount, PASSWORD, WorkspaceClient } from "./helpers.ts";

const A = "wsgov/a";
const B = "wsgov/b";
let server: TestServer;
let models: ReturnType<typeof tempDir>;

beforeAll(async () => {
  models = tempDir("sluice-wsgov-models-");
  symlinkSync(await syntheticModel(tinyModelsRoot(), "wsgov-a", { preset: "tiny-bytes", seed: 51, id: A }), join(models.path, "a"));
  symlinkSync(await syntheticModel(tinyModelsRoot(), "wsgov-b", { preset: "tiny-bytes", seed: 52, id: B }), join(models.path, "b"));
  server = await startTestServer({ modelsDir: models.path });
}, 60_000);
afterAll(async () => {
  await server?.cleanup();
  models?.remove();
});

const listed = async (key: string) =>
  ((await (await fetch(`${server.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } })).json()) as { data: { id: string }[] }).data.map((m) => m.id).sort();

describe("a key's own limits in the workspace", () => {
  test("created with a budget, an expiry and a model list; changed; bad input refused and nothing changed", async () => {
    const { account, email } = await makeAccount(server.store, "wsgov", { plan: "unlimited" });
    const c = new WorkspaceClient(server.url);
    expect((await c.signIn(email, PASSWORD)).status).toBe(303);
    const form = await (await c.get("/workspace/keys")).text();
    for (const field of ['name="budget_usd"', 'name="budget_period"', 'name="expires"', `name="models" value="${A}"`, `name="models" value="${B}"`]) expect(form).toContain(field);

    const created = await c.form("/workspace/keys", { label: "ci", budget_usd: "2.5", budget_period: "day", expires: "30d", models: [A] });
    // Answered with a redirect: the page it leads to shows the key once.
    const page = await (await c.follow(created)).text();
    const key = /id="new-key" readonly value="(sk-sluice-[0-9A-Za-z]+)"/.exec(page)![1]!;
    const info = (await server.store.keys.list(account.id))[0]!;
    expect(info.budgetUsd).toBe(2.5);
    expect(info.budgetPeriod).toBe("day");
    expect(info.expiresAt! - Date.now()).toBeGreaterThan(29 * 86_400_000);
    expect(info.models).toEqual([A]);
    expect(page).toContain("$0.00 of $2.5/day");
    expect(await listed(key)).toEqual([A]);

    // The edit page shows the limits; saving it unchanged keeps the expiry to the second.
    const edit = await (await c.get(`/workspace/keys/${info.id}/edit`)).text();
    expect(edit).toContain('value="2.5"');
    const shown = /name="expires" value="([^"]+)"/.exec(edit)![1]!;
    const unchanged = await c.form(`/workspace/keys/${info.id}/edit`, { label: "ci", budget_usd: "2.5", budget_period: "day", expires: shown, models: [A] });
    expect(unchanged.status).toBe(303);
    expect((await server.store.keys.get(info.id))!.expiresAt).toBe(info.expiresAt);

    // Widened to both models, no budget, no expiry: the API sees it at once.
    const saved = await c.form(`/workspace/keys/${info.id}/edit`, { label: "ci-2", budget_usd: "", expires: "", models: [A, B] });
    expect(saved.headers.get("location")).toBe("/workspace/keys");
    expect(await (await c.follow(saved)).text()).toContain("were saved");
    const after = (await server.store.keys.get(info.id))!;
    expect([after.label, after.budgetUsd, after.budgetPeriod, after.expiresAt]).toEqual(["ci-2", null, null, null]);
    expect(after.models).toEqual([A, B]);
    expect(await listed(key)).toEqual([A, B]);

    // Refusals say why and change nothing.
    const cases: [Record<string, string | string[]>, string][] = [
      [{ label: "x", budget_usd: "-1" }, "a budget is a positive amount of USD"],
      [{ label: "x", expires: "yesterday" }, "give a duration"],
      [{ label: "x", expires: "2001-02-03" }, "is in the past"],
      [{ label: "x", models: ["other/model"] }, "The account may not use other/model"],
    ];
    for (const [fields, message] of cases) {
      const r = await c.form(`/workspace/keys/${info.id}/edit`, fields);
      expect(await (await c.follow(r)).text()).toContain(message);
      const r2 = await c.form("/workspace/keys", fields);
      expect(await (await c.follow(r2)).text()).toContain(message);
    }
    expect(await server.store.keys.get(info.id)).toEqual(after);
    expect((await server.store.keys.list(account.id)).length).toBe(1);

    // Another account's key cannot be edited.
    const other = await makeAccount(server.store, "wsgov-other");
    const c2 = new WorkspaceClient(server.url);
    await c2.signIn(other.email, PASSWORD);
    expect((await c2.get(`/workspace/keys/${info.id}/edit`)).status).toBe(404);
    expect((await c2.form(`/workspace/keys/${info.id}/edit`, { label: "stolen" })).status).toBe(404);
    expect((await server.store.keys.get(info.id))!.label).toBe("ci-2");
  });

  test("the JSON route creates a key with limits, and refuses bad ones", async () => {
    const { account, email } = await makeAccount(server.store, "wsgov-json", { plan: "unlimited" });
    const c = new WorkspaceClient(server.url);
    await c.signIn(email, PASSWORD);
    const r = await c.postJson("/workspace/api/keys", { label: "script", budget_usd: 1, budget_period: "month", models: [B] });
    expect(r.status).toBe(201);
    const body = (await r.json()) as { key: string; budget_usd: number; budget_period: string; models: string[] };
    expect([body.budget_usd, body.budget_period, body.models]).toEqual([1, "month", [B]]);
    expect(await listed(body.key)).toEqual([B]);
    const bad = await c.postJson("/workspace/api/keys", { label: "script", budget_period: "week", budget_usd: 1 });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: string }).error).toContain("a budget period is day, month or total");
    expect((await server.store.keys.list(account.id)).length).toBe(1);
  });
});

describe("the audit log in the workspace", () => {
  test("an operator's and a member's changes are recorded under their email and address; the audit page shows them to operators only", async () => {
    const op = await makeAccount(server.store, "wsaudit-ops", { plan: "unlimited", role: "operator" });
    const member = await makeAccount(server.store, "wsaudit-members", { plan: "prepaid" });
    const oc = new WorkspaceClient(server.url);
    await oc.signIn(op.email, PASSWORD);
    expect((await oc.form("/workspace/admin/topup", { account: "wsaudit-members", usd: "4", note: "for the pilot" })).status).toBe(303);
    expect((await oc.form("/workspace/admin/limits", { account: "wsaudit-members", rpm: "30", tpm: "", concurrent: "" })).status).toBe(303);
    const mc = new WorkspaceClient(server.url);
    await mc.signIn(member.email, PASSWORD);
    expect((await mc.form("/workspace/keys", { label: "member key", budget_usd: "1" })).status).toBe(303);

    const log = await server.store.audit.list({ limit: 10 });
    const [key, limit, topUp] = log;
    expect([key!.action, limit!.action, topUp!.action]).toEqual(["keys.create", "limits.set", "billing.topUp"]);
    expect([topUp!.actorKind, topUp!.actor, topUp!.target]).toEqual(["workspace", op.email, "account:wsaudit-members"]);
    expect(topUp!.source).toMatch(/127\.0\.0\.1|::1|localhost/);
    expect(topUp!.after).toMatchObject({ balance_usd: 4, top_up_usd: 4, note: "for the pilot" });
    expect(limit!.after).toMatchObject({ requestsPerMinute: 30 });
    expect([key!.actor, key!.target]).toEqual([member.email, `key:${(await server.store.keys.list(member.account.id))[0]!.id}`]);

    const page = await oc.get("/workspace/audit");
    expect(page.status).toBe(200);
    const text = await page.text();
    expect(text).toContain("Hash chain intact");
    expect(text).toContain(`data-seq="${topUp!.seq}"`);
    expect(text).toContain("billing.topUp");
    expect(text).toContain(op.email);
    expect((await mc.get("/workspace/audit")).status).toBe(403);
    expect(await mc.get("/workspace/keys").then((r) => r.text())).not.toContain("Audit log");
  });
});

describe("spend by key, model, end user and day on the usage page", () => {
  test("the page and its JSON group the account's requests each way, agreeing with the usage rows", async () => {
    const { account, email } = await makeAccount(server.store, "wsusage", { plan: "unlimited" });
    await server.store.catalog.setPrices(A, 100, 200);
    const one = await server.store.keys.create(account.id, "one");
    const two = await server.store.keys.create(account.id, "two");
    const send = async (key: string, extra: Record<string, unknown>) => {
      const r = await fetch(`${server.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: A, messages: [{ role: "user", content: "hi" }], max_tokens: 3, ...extra }),
      });
      expect(r.status).toBe(200);
      await r.body?.cancel();
    };
    await send(one.key, { user: "alice" });
    await send(one.key, { user: "alice", model: B });
    await send(two.key, { safety_identifier: "bob" });
    await send(two.key, {});
    const rows = await server.store.usage.list(account.id);
    const c = new WorkspaceClient(server.url);
    await c.signIn(email, PASSWORD);
    const api = (await (await c.get("/workspace/api/usage?by=user")).json()) as { by: string; groups: { group: string | null; requests: number; cost_usd: number }[] };
    expect(api.by).toBe("user");
    const byUser = new Map(api.groups.map((g) => [g.group, g]));
    expect(byUser.get("alice")!.requests).toBe(rows.filter((r) => r.user === "alice").length);
    expect(byUser.get("bob")!.requests).toBe(1);
    expect(byUser.get(null)!.requests).toBe(1);
    expect(byUser.get("alice")!.cost_usd).toBeCloseTo(rows.filter((r) => r.user === "alice").reduce((t, r) => t + r.costUsd, 0), 9);
    const page = await (await c.get("/workspace/usage?by=user")).text();
    expect(page).toContain("Spend by end user");
    expect(page).toContain('data-group="alice"');
    expect(page).toContain("(none named)");
    const keys = await (await c.get("/workspace/usage?by=key")).text();
    expect(keys).toContain(`data-group="${one.info.id}"`);
    expect(keys).toMatch(/<td class="">one<div class="muted mono">/);
    const total = rows.reduce((t, r) => t + r.costUsd, 0);
    expect(total).toBeGreaterThan(0);
    for (const by of ["model", "key", "user", "day"]) {
      const g = (await (await c.get(`/workspace/api/usage?by=${by}`)).json()) as { groups: { cost_usd: number; requests: number }[] };
      expect(g.groups.reduce((t, x) => t + x.cost_usd, 0)).toBeCloseTo(total, 9);
      expect(g.groups.reduce((t, x) => t + x.requests, 0)).toBe(4);
    }
    await server.store.catalog.setPrices(A, 0, 0);
  }, 30_000);
});

describe("per-model limits and budgets per end user on the admin page", () => {
  test("an operator sets and removes them; bad input is refused, saying why", async () => {
    const op = await makeAccount(server.store, "wslimits-ops", { plan: "unlimited", role: "operator" });
    const { account } = await makeAccount(server.store, "wslimits");
    const c = new WorkspaceClient(server.url);
    await c.signIn(op.email, PASSWORD);
    const page = await (await c.get("/workspace/admin?account=wslimits")).text();
    expect(page).toContain('action="/workspace/admin/user-budget"');
    expect(page).toContain('name="model"');
    expect((await c.form("/workspace/admin/limits", { account: "wslimits", model: A, rpm: "7", tpm: "" })).status).toBe(303);
    expect(await server.store.limits.get(account.id, null, A)).toEqual({ requestsPerMinute: 7, tokensPerMinute: null, maxConcurrent: null });
    expect(await server.store.limits.get(account.id)).toBeNull();
    expect(await (await c.get("/workspace/admin?account=wslimits")).text()).toContain(`data-model-limit="${A}"`);
    expect((await c.form("/workspace/admin/user-budget", { account: "wslimits", usd: "2.5", period: "day" })).status).toBe(303);
    expect(await server.store.accounts.get("wslimits")).toMatchObject({ userBudgetUsd: 2.5, userBudgetPeriod: "day" });
    const bad = await c.form("/workspace/admin/user-budget", { account: "wslimits", usd: "-2", period: "day" });
    expect(await (await c.follow(bad)).text()).toContain("a budget is a positive amount of USD");
    const badModel = await c.form("/workspace/admin/limits", { account: "wslimits", model: "no/such", rpm: "1" });
    expect(await (await c.follow(badModel)).text()).toContain("no model no/such");
    expect((await c.form("/workspace/admin/user-budget", { account: "wslimits", usd: "", period: "month" })).status).toBe(303);
    expect((await server.store.accounts.get("wslimits"))!.userBudgetUsd).toBeNull();
    expect((await c.form("/workspace/admin/limits", { account: "wslimits", model: A, rpm: "", tpm: "" })).status).toBe(303);
    expect(await server.store.limits.get(account.id, null, A)).toBeNull();
    const log = (await server.store.audit.list({ limit: 4 })).map((e) => [e.action, e.actor]);
    expect(log).toEqual([["limits.set", op.email], ["accounts.setUserBudget", op.email], ["accounts.setUserBudget", op.email], ["limits.set", op.email]]);
  });
});
