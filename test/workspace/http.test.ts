// The workspace over HTTP against the real server: sign-in, sessions and CSRF, account isolation
// through the internal JSON routes, billing enforcement and charges, CSV export, its own port.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createEngine } from "../../src/engine/index.ts";
import { commandName } from "../../src/invocation.ts";
import { silentLogger } from "../../src/log.ts";
import { startServer } from "../../src/server.ts";
import { syntheticModel, tinyModelsRoot } from "../helpers/models.ts";
import { tempDir } from "../helpers/paths.ts";
import { startTestServer, type TestServer } from "../helpers/server.ts";
import { makeAccount, PASSWORD, WorkspaceClient } from "./helpers.ts";

const MODEL = "ws/tiny";
let server: TestServer;
let modelsDir: string;

beforeAll(async () => {
  modelsDir = tinyModelsRoot() + "/workspace";
  await syntheticModel(modelsDir, "ws/tiny", { preset: "tiny-bytes", seed: 5, id: MODEL });
  server = await startTestServer({ modelsDir });
});
afterAll(async () => {
  await server?.cleanup();
});

const chat = (key: string, maxTokens = 4) =>
  fetch(`${server.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: maxTokens }),
  });

describe("sign-in and sessions", () => {
  test("pages need a session; sign-in sets an HttpOnly SameSite cookie; sign-out ends it", async () => {
    await makeAccount(server.store, "alpha");
    const c = new WorkspaceClient(server.url);
    const anon = await c.get("/workspace/keys");
    expect(anon.status).toBe(303);
    expect(anon.headers.get("location")).toBe("/workspace/signin");
    expect((await c.get("/workspace/api/keys")).status).toBe(401);

    const wrong = await c.signIn("alpha@example.com", "not the password");
    // Answered with a redirect (a reload sends no password again); the form says why.
    expect(wrong.headers.get("location")).toBe("/workspace/signin");
    const again = await (await c.follow(wrong)).text();
    expect(again).toContain("Wrong email or password");
    expect(again).toContain('value="alpha@example.com"');
    // Shown once: the form loaded again says nothing more.
    expect(await (await c.get("/workspace/signin")).text()).not.toContain("Wrong email or password");

    const ok = await c.signIn("alpha@example.com", PASSWORD);
    expect(ok.status).toBe(303);
    const cookie = ok.headers.getSetCookie().find((s) => s.startsWith("sluice_session="))!;
    expect(cookie).toContain("HttpOnly");
    expect(cookie).toMatch(/SameSite=(Lax|Strict)/);
    const page = await c.get("/workspace/keys");
    expect(page.status).toBe(200);
    expect(page.headers.get("content-security-policy")).toContain("script-src 'self'");
    const html = await page.text();
    expect(html).toContain("alpha@example.com");
    // No external resource: everything is served from /workspace/assets.
    expect(html).not.toMatch(/(src|href)="https?:\/\//);

    expect((await c.form("/workspace/signout", {})).status).toBe(303);
    expect((await c.get("/workspace/api/keys")).status).toBe(401);
  });

  test("the sign-in form itself needs its token", async () => {
    const res = await fetch(`${server.url}/workspace/signin`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ email: "alpha@example.com", password: PASSWORD }),
      redirect: "manual",
    });
    expect(res.status).toBe(303);
    expect(res.headers.get("location")).toBe("/workspace/signin");
    expect(res.headers.getSetCookie().some((s) => s.startsWith("sluice_session="))).toBe(false);
  });

  test("repeated failures throttle the email, even with the right password", async () => {
    await makeAccount(server.store, "throttled");
    const c = new WorkspaceClient(server.url);
    for (let i = 0; i < 5; i++) expect(await (await c.follow(await c.signIn("throttled@example.com", `wrong-${i}-password`))).text()).toContain("Wrong email or password");
    const blocked = await c.signIn("throttled@example.com", PASSWORD);
    expect(blocked.headers.get("location")).toBe("/workspace/signin");
    expect(await (await c.follow(blocked)).text()).toContain("Too many failed sign-ins");
    expect(blocked.headers.getSetCookie().some((s) => s.startsWith("sluice_session="))).toBe(false);
  });

  test("CSRF-less posts are refused and change nothing", async () => {
    const { account } = await makeAccount(server.store, "csrf");
    const c = new WorkspaceClient(server.url);
    await c.signIn("csrf@example.com", PASSWORD);
    const before = (await server.store.keys.list(account.id)).length;
    const noToken = await c.form("/workspace/keys", { label: "sneaky" }, false);
    expect(noToken.status).toBe(403);
    const badToken = await c.form("/workspace/keys", { label: "sneaky", _csrf: "x".repeat(32) });
    expect(badToken.status).toBe(403);
    expect((await c.postJson("/workspace/api/keys", { label: "sneaky" }, false)).status).toBe(403);
    expect((await server.store.keys.list(account.id)).length).toBe(before);
    const good = await c.form("/workspace/keys", { label: "fine" });
    expect(good.status).toBe(303);
    expect((await server.store.keys.list(account.id)).length).toBe(before + 1);
  });
});

describe("forms post, redirect, then get", () => {
  test("a new key is shown once by the page its form leads to; a reload shows none and makes none; revoking names it by label and prefix", async () => {
    const { account } = await makeAccount(server.store, "prg");
    const c = new WorkspaceClient(server.url);
    await c.signIn("prg@example.com", PASSWORD);
    const posted = await c.form("/workspace/keys", { label: "laptop" });
    expect(posted.status).toBe(303);
    expect(posted.headers.get("location")).toBe("/workspace/keys");
    const keys = await server.store.keys.list(account.id);
    expect(keys).toHaveLength(1);
    // The key travels sealed: the cookie does not hold it in the clear.
    const flash = posted.headers.getSetCookie().find((x) => x.startsWith("sluice_flash="))!;
    expect(flash).toContain("HttpOnly");
    const shown = await (await c.follow(posted)).text();
    const key = /id="new-key" readonly value="(sk-sluice-\w+)"/.exec(shown)![1]!;
    expect(flash).not.toContain(key.slice(10, 30));
    expect(key.startsWith(keys[0]!.prefix)).toBe(true);
    // A reload: the list again, no key, no second key.
    const reloaded = await (await c.get("/workspace/keys")).text();
    expect(reloaded).not.toContain(key);
    expect(reloaded).not.toContain('id="new-key"');
    expect(await server.store.keys.list(account.id)).toHaveLength(1);
    // Times say their zone.
    expect(reloaded).toMatch(/<time datetime="[^"]+Z">\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC<\/time>/);
    // Another session cannot open the flash (sealed with the session's own secret).
    const other = new WorkspaceClient(server.url);
    await other.signIn("prg@example.com", PASSWORD);
    const stolen = await other.request("/workspace/keys", { headers: { cookie: `${flash.split(";")[0]}; sluice_session=${other.cookie("sluice_session")}` } });
    expect(await stolen.text()).not.toContain('id="new-key"');

    const revoked = await c.follow(await c.form(`/workspace/keys/${keys[0]!.id}/revoke`, {}));
    const text = await revoked.text();
    expect(text).toContain(`Key “laptop” (${keys[0]!.prefix}…) was revoked.`);
    expect(/<div class="notice ok"[^>]*>([^<]*)</.exec(text)![1]).not.toContain(keys[0]!.id);
    // An empty label: back to the form, which says why.
    expect(await (await c.follow(await c.form("/workspace/keys", { label: "" }))).text()).toContain("Give the key a label of 1 to 80 characters.");
    expect(await server.store.keys.list(account.id)).toHaveLength(1);
  });

  test("a form sent after the session ended leads to the sign-in, which says so", async () => {
    const c = new WorkspaceClient(server.url);
    const res = await c.form("/workspace/keys", { label: "late" }, false);
    expect(res.headers.get("location")).toBe("/workspace/signin");
    expect(await (await c.follow(res)).text()).toContain("Your session has ended. Sign in again.");
  });
});

describe("account isolation", () => {
  test("an account sees and revokes only its own keys and usage", async () => {
    const a = await makeAccount(server.store, "iso-a", { plan: "unlimited" });
    const b = await makeAccount(server.store, "iso-b", { plan: "unlimited" });
    const ca = new WorkspaceClient(server.url);
    const cb = new WorkspaceClient(server.url);
    await ca.signIn(a.email, PASSWORD);
    await cb.signIn(b.email, PASSWORD);

    const created = (await (await ca.postJson("/workspace/api/keys", { label: "a-key" })).json()) as { key: string; id: string };
    expect(created.key).toMatch(/^sk-sluice-/);
    expect((await chat(created.key)).status).toBe(200);

    const aKeys = (await (await ca.get("/workspace/api/keys")).json()) as { data: { id: string }[] };
    expect(aKeys.data.map((k) => k.id)).toEqual([created.id]);
    const bKeys = (await (await cb.get("/workspace/api/keys")).json()) as { data: { id: string }[] };
    expect(bKeys.data).toEqual([]);
    const bUsage = (await (await cb.get("/workspace/api/usage")).json()) as { recent: unknown[] };
    expect(bUsage.recent).toEqual([]);
    const aUsage = (await (await ca.get("/workspace/api/usage")).json()) as { recent: { model: string }[] };
    expect(aUsage.recent.map((r) => r.model)).toEqual([MODEL]);

    // B cannot revoke A's key, neither through JSON nor through the page.
    expect((await cb.postJson(`/workspace/api/keys/${created.id}/revoke`, {})).status).toBe(404);
    expect((await cb.form(`/workspace/keys/${created.id}/revoke`, {})).status).toBe(404);
    expect((await cb.get(`/workspace/keys/${created.id}/revoke`)).status).toBe(404);
    const keysPage = await (await cb.get("/workspace/keys")).text();
    expect(keysPage).not.toContain(created.id);
    expect((await chat(created.key)).status).toBe(200);

    expect((await ca.postJson(`/workspace/api/keys/${created.id}/revoke`, {})).status).toBe(200);
    expect((await chat(created.key)).status).toBe(401);
  });

  test("admin pages and routes are for operators only", async () => {
    const m = await makeAccount(server.store, "member-only");
    const c = new WorkspaceClient(server.url);
    await c.signIn(m.email, PASSWORD);
    expect((await c.get("/workspace/admin")).status).toBe(403);
    expect((await c.form("/workspace/admin/topup", { account: "member-only", usd: "100" })).status).toBe(403);
    expect((await server.store.billing.balanceUsd(m.account.id))).toBe(0);
  });
});

test("an operator restricts an account's models and lifts the restriction again", async () => {
  const op = await makeAccount(server.store, "ops-access", { role: "operator", plan: "unlimited" });
  const target = await makeAccount(server.store, "access-target");
  const c = new WorkspaceClient(server.url);
  await c.signIn(op.email, PASSWORD);
  expect((await c.form("/workspace/admin/access", { account: "access-target" })).status).toBe(303);
  expect((await server.store.accounts.get("access-target"))!.modelAccess).toBe("listed");
  expect((await server.store.catalog.listForAccount(target.account.id))).toEqual([]);
  expect((await c.form("/workspace/admin/access", { account: "access-target", all: "on" })).status).toBe(303);
  expect((await server.store.accounts.get("access-target"))!.modelAccess).toBe("all");
  expect((await server.store.catalog.listForAccount(target.account.id)).map((m) => m.id)).toContain(MODEL);
});

test("the admin page's CLI note names this server's data directory, and its plan form the account's plan", async () => {
  const op = await makeAccount(server.store, "ops-notes", { role: "operator", plan: "unlimited" });
  const { info } = await server.store.keys.create(op.account.id, "limited");
  await server.store.limits.set(op.account.id, info.id, { requestsPerMinute: 5, tokensPerMinute: null, maxConcurrent: null });
  const c = new WorkspaceClient(server.url);
  await c.signIn(op.email, PASSWORD);
  const page = await (await c.get("/workspace/admin?account=ops-notes")).text();
  expect(page).toContain(`<code>${commandName()} limits set --account ops-notes --key KEY_ID --rpm N --data ${server.dataDir}</code>`);
  // Without a script, the plan selector already shows the chosen account's plan.
  expect(page).toMatch(/<select id="plan-plan" name="plan"><option>prepaid<\/option><option selected>unlimited<\/option><\/select>/);
  expect(await (await c.follow(await c.form("/workspace/admin/plan", { account: "ops-notes", plan: "free" }))).text()).toContain("choose a plan");
  expect((await server.store.billing.plan(op.account.id))).toBe("unlimited");
});

test("an operator sets a cached-input price on the admin page; usage views show cached and reasoning tokens", async () => {
  const op = await makeAccount(server.store, "ops-prices", { role: "operator", plan: "unlimited" });
  const c = new WorkspaceClient(server.url);
  await c.signIn(op.email, PASSWORD);
  try {
    expect((await c.form("/workspace/admin/prices", { model: MODEL, input: "2", output: "6", cached_input: "0.5" })).status).toBe(303);
    expect((await server.store.catalog.get(MODEL))).toMatchObject({ inputPricePerMTok: 2, cachedInputPricePerMTok: 0.5, outputPricePerMTok: 6 });
    expect(await (await c.get("/workspace/admin")).text()).toContain(`name="cached_input" type="number" min="0" step="any" value="0.5"`);
    expect((await c.form("/workspace/admin/prices", { model: MODEL, input: "2", output: "6", cached_input: "" })).status).toBe(303);
    expect((await server.store.catalog.get(MODEL))!.cachedInputPricePerMTok).toBeNull();
  } finally {
    await server.store.catalog.setPrices(MODEL, 0, 0, null);
  }
  await server.store.usage.record({ requestId: "r-cached", accountId: op.account.id, keyId: null, modelId: MODEL, promptTokens: 1200, completionTokens: 40, cachedTokens: 1100, reasoningTokens: 30, latencyMs: 5, status: "ok", finishReason: "stop", user: null, metadata: null });
  const page = await (await c.get("/workspace/usage")).text();
  expect(page).toMatch(/data-testid="total-cached">1,100</);
  expect(page).toMatch(/data-testid="total-reasoning">30</);
  const usage = (await (await c.get("/workspace/api/usage")).json()) as { recent: Record<string, unknown>[] };
  expect(usage.recent[0]).toMatchObject({ prompt_tokens: 1200, cached_tokens: 1100, completion_tokens: 40, reasoning_tokens: 30 });
  const csv = (await (await c.get("/workspace/usage.csv")).text()).trim().split("\r\n");
  expect(csv[1]).toContain(`,${MODEL},1200,1100,40,30,1240,`);
});

test("an operator sets an account's priority, a model's keep-alive, and loads and unloads it on the admin page", async () => {
  const op = await makeAccount(server.store, "ops-residency", { role: "operator", plan: "unlimited" });
  const { key } = await server.store.keys.create(op.account.id, null);
  expect((await server.store.keys.authenticate(key))!.accountPriority).toBe(0);
  const c = new WorkspaceClient(server.url);
  await c.signIn(op.email, PASSWORD);
  expect((await c.form("/workspace/admin/priority", { account: "ops-residency", priority: "7" })).status).toBe(303);
  expect((await server.store.accounts.get("ops-residency"))!.priority).toBe(7);
  // The key's cached record follows: the next request carries the new priority.
  expect((await server.store.keys.authenticate(key))!.accountPriority).toBe(7);
  expect(await (await c.follow(await c.form("/workspace/admin/priority", { account: "ops-residency", priority: "1000" }))).text()).toContain('class="notice error"');
  expect((await server.store.accounts.get("ops-residency"))!.priority).toBe(7);

  expect((await c.form("/workspace/admin/keep-alive", { model: MODEL, keep_alive: "-1" })).status).toBe(303);
  expect((await server.store.catalog.get(MODEL))!.keepAliveSeconds).toBe(-1);
  expect(await (await c.follow(await c.form("/workspace/admin/keep-alive", { model: MODEL, keep_alive: "soon" }))).text()).toContain('class="notice error"');
  expect((await server.store.catalog.get(MODEL))!.keepAliveSeconds).toBe(-1);
  try {
    expect((await c.form("/workspace/admin/residency", { model: MODEL, action: "load" })).status).toBe(303);
    let page = await (await c.get("/workspace/admin")).text();
    const row = (html: string) => /<tr data-model="ws\/tiny">([\s\S]*?)<\/tr>/.exec(html)![1]!;
    expect(row(page)).toContain('data-label="State">resident');
    expect(row(page)).toContain("Keep-alive (always)");
    expect(row(page)).toContain('aria-label="Unload ws/tiny"');
    const unloaded = await c.form("/workspace/admin/residency", { model: MODEL, action: "unload" });
    // Back to the section, and the outcome shown there (a query string after the #section was lost).
    expect(unloaded.headers.get("location")).toBe("/workspace/admin#residency");
    page = await (await c.follow(unloaded)).text();
    expect(page).toContain(`<div class="notice ok" role="status">unloaded ${MODEL}</div>`);
    expect(row(page)).toContain('data-label="State">unloaded');
    expect(await (await c.follow(await c.form("/workspace/admin/residency", { model: "no/such", action: "load" }))).text()).toContain("no model no/such on this server");
  } finally {
    await server.store.catalog.setKeepAlive(MODEL, null);
  }
});

describe("billing", () => {
  test("charges match the token counts and prices; no credit left → 429 insufficient_quota", async () => {
    await server.store.catalog.setPrices(MODEL, 1000, 3000);
    try {
      const { account } = await makeAccount(server.store, "payg", { usd: 0.000001 });
      const { key } = await server.store.keys.create(account.id, "billing");
      const res = await chat(key, 3);
      expect(res.status).toBe(200);
      const body = (await res.json()) as { id: string; usage: { prompt_tokens: number; completion_tokens: number } };
      const expected = (body.usage.prompt_tokens * 1000 + body.usage.completion_tokens * 3000) / 1e6;
      const history = await server.store.billing.history(account.id);
      const charge = history.find((e) => e.kind === "charge")!;
      expect(charge.modelId).toBe(MODEL);
      expect(charge.promptTokens).toBe(body.usage.prompt_tokens);
      expect(charge.completionTokens).toBe(body.usage.completion_tokens);
      expect(charge.amountUsd).toBeCloseTo(-expected, 12);
      expect((await server.store.billing.balanceUsd(account.id))).toBeCloseTo(0.000001 - expected, 12);

      const usageBefore = (await server.store.usage.list(account.id)).length;
      const refused = await chat(key, 3);
      expect(refused.status).toBe(429);
      const quota = ((await refused.json()) as { error: { message: string } }).error;
      expect(quota).toMatchObject({
        type: "insufficient_quota",
        code: "insufficient_quota",
      });
      // The account's members cannot add credit: the message sends them to an operator.
      expect(quota.message).toContain("ask an operator of this server to add credit");
      expect(quota.message).not.toMatch(/top it up in the (account )?workspace/i);
      // Refused before any generation: nothing recorded, nothing charged.
      expect((await server.store.usage.list(account.id)).length).toBe(usageBefore);
      expect((await server.store.billing.history(account.id)).filter((e) => e.kind === "charge").length).toBe(1);

      await server.store.billing.topUp(account.id, 1, "more");
      expect((await chat(key, 3)).status).toBe(200);

      const c = new WorkspaceClient(server.url);
      await c.signIn("payg@example.com", PASSWORD);
      const billing = (await (await c.get("/workspace/api/billing")).json()) as { plan: string; balance_usd: number; period_spend_usd: number; history: { kind: string }[] };
      expect(billing.plan).toBe("prepaid");
      expect(billing.history.filter((h) => h.kind === "charge").length).toBe(2);
      expect(billing.balance_usd).toBeCloseTo(1.000001 - billing.period_spend_usd, 9);
    } finally {
      await server.store.catalog.setPrices(MODEL, 0, 0);
    }
  });

  test("a new prepaid account with no credit is refused; the local account is unlimited", async () => {
    const { account } = await makeAccount(server.store, "broke");
    const { key } = await server.store.keys.create(account.id, null);
    expect((await chat(key)).status).toBe(429);
    const local = (await server.store.accounts.get("local"))!;
    expect((await server.store.billing.plan(local.id))).toBe("unlimited");
    expect((await server.store.billing.balanceUsd(local.id))).toBe(0);
    expect((await chat(server.key)).status).toBe(200);
  });
});

test("/favicon.ico: an ICO at the API's root and under /workspace, which every page links", async () => {
  for (const path of ["/favicon.ico", "/workspace/favicon.ico"]) {
    const res = await fetch(`${server.url}${path}`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("image/x-icon");
    const bytes = new Uint8Array(await res.arrayBuffer());
    const v = new DataView(bytes.buffer);
    // ICONDIR: reserved 0, type 1 (icon), two images (16 and 32 px, 32 bits each), each within the file.
    expect([v.getUint16(0, true), v.getUint16(2, true), v.getUint16(4, true)]).toEqual([0, 1, 2]);
    for (let i = 0; i < 2; i++) {
      const e = 6 + 16 * i;
      expect([bytes[e], v.getUint16(e + 6, true)]).toEqual([[16, 32][i], 32]);
      expect(v.getUint32(e + 12, true) + v.getUint32(e + 8, true)).toBeLessThanOrEqual(bytes.length);
    }
  }
  expect((await fetch(`${server.url}/favicon.ico`, { method: "POST" })).status).toBe(404);
  const signin = await (await fetch(`${server.url}/workspace/signin`)).text();
  expect(signin).toContain('<link rel="icon" href="/workspace/favicon.ico">');
});

describe("usage export", () => {
  test("CSV has one row per request of the account", async () => {
    const { account, email } = await makeAccount(server.store, "csv", { plan: "unlimited" });
    const { key } = await server.store.keys.create(account.id, null);
    for (let i = 0; i < 2; i++) expect((await chat(key)).status).toBe(200);
    const c = new WorkspaceClient(server.url);
    await c.signIn(email, PASSWORD);
    const res = await c.get("/workspace/usage.csv");
    expect(res.headers.get("content-type")).toContain("text/csv");
    const lines = (await res.text()).trim().split("\r\n");
    expect(lines[0]).toStartWith("time,request_id,model,prompt_tokens");
    expect(lines.length).toBe(3);
    expect(lines[1]).toContain(MODEL);
  });
});

test("--workspace-port: the workspace on its own port and not under the API's", async () => {
  const data = tempDir("sluice-ws-port-");
  const engine = await createEngine({ log: silentLogger(), device: "cpu", threads: 1 });
  const s = await startServer({ host: "127.0.0.1", port: 0, workspacePort: 0, dataDir: data.path, modelsDir, demoModel: false, log: silentLogger(), engine });
  try {
    expect(s.workspaceUrl).not.toStartWith(s.url);
    expect((await fetch(`${s.url}/workspace/signin`)).status).toBe(404);
    const page = await fetch(`${s.workspaceUrl}signin`);
    expect(page.status).toBe(200);
    expect(await page.text()).toContain("Sign in");
    await makeAccount(s.store, "porty", { plan: "unlimited" });
    const c = new WorkspaceClient(s.workspaceUrl);
    expect((await c.signIn("porty@example.com", PASSWORD)).status).toBe(303);
    const integ = await (await c.get("/workspace/integrations")).text();
    // The base URL is the API's, not the workspace's.
    expect(integ).toContain(`${s.url}/v1`);
    // Both origins answer a browser's icon request.
    const wsOrigin = new URL(s.workspaceUrl).origin;
    for (const url of [`${s.url}/favicon.ico`, `${wsOrigin}/favicon.ico`]) expect((await fetch(url)).status).toBe(200);
  } finally {
    await s.stop();
    data.remove();
  }
});
