// The admin API end to end through the real server: an operator token made by the CLI creates an
// account, a key with limits of its own, a per-model limit and a top-up; the key works; every
// action is in the audit log under the token's label; a revoked token gets 401. Errors take /v1's
// shape, the token is rate limited, the routes are described at /admin/v1/openapi.json, and serve
// can turn the API off or put it on a port of its own.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { syntheticModel, tinyModelsRoot } from "../helpers/models.ts";
import { BUN, REPO } from "../helpers/paths.ts";
import { startTestServer, type TestServer } from "../helpers/server.ts";

const MODEL = "admin/tiny";
let server: TestServer;
let modelsDir: string;

beforeAll(async () => {
  modelsDir = tinyModelsRoot() + "/admin-api";
  await syntheticModel(modelsDir, "admin/tiny", { preset: "tiny-bytes", seed: 61, id: MODEL });
  server = await startTestServer({ modelsDir, admin: { enabled: true, requestsPerMinute: 60 } });
}, 60_000);
afterAll(async () => {
  await server?.cleanup();
});

const sluice = (...args: string[]) => {
  const p = Bun.spawnSync([BUN, join(REPO, "src/cli/main.ts"), ...args, "--data", server.dataDir], { stdout: "pipe", stderr: "pipe" });
  return { code: p.exitCode, stdout: p.stdout.toString(), stderr: p.stderr.toString() };
};

let token = "";
const admin = (method: string, path: string, body?: unknown, auth = token) =>
  fetch(`${server.adminUrl}${path}`, {
    method,
    headers: { ...(auth ? { authorization: `Bearer ${auth}` } : {}), ...(body !== undefined ? { "content-type": "application/json" } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
const json = async (r: Response) => (await r.json()) as Record<string, any>;

describe("the admin API", () => {
  let tokenId = "";
  let keyId = "";
  let key = "";

  test("an operator token made by the CLI is printed once and stored as a hash", () => {
    const made = sluice("admin", "tokens", "create", "--label", "provisioning-bot");
    expect(made.code).toBe(0);
    token = made.stdout.trim();
    expect(token).toMatch(/^sk-sluice-admin-[0-9A-Za-z]{40}$/);
    tokenId = /created admin token (adm_\w+)/.exec(made.stderr)![1]!;
    const listed = sluice("admin", "tokens", "list", "--json");
    expect(listed.stdout).toContain(tokenId);
    expect(listed.stdout).not.toContain(token);
    expect(server.adminUrl).toBe(`${server.url}/admin/v1`);
  });

  test("creates an account, a key, a limit and a top-up; the key works; each action is audited under the token's label", async () => {
    const account = await admin("POST", "/accounts", { name: "acme", plan: "prepaid" });
    expect(account.status).toBe(201);
    expect(await json(account)).toMatchObject({ name: "acme", plan: "prepaid", balance_usd: 0 });

    const created = await admin("POST", "/keys", { account: "acme", label: "bot", budget_usd: 5, budget_period: "month", expires: "30d", models: [MODEL] });
    expect(created.status).toBe(201);
    const k = await json(created);
    key = k.key;
    keyId = k.id;
    expect(key).toMatch(/^sk-sluice-[0-9A-Za-z]+$/);
    expect(k).toMatchObject({ account: "acme", label: "bot", budget_usd: 5, budget_period: "month", spent_usd: 0, models: [MODEL] });
    // The key is shown only there.
    const again = await json(await admin("GET", `/keys/${keyId}`));
    expect(again.key).toBeUndefined();
    expect(JSON.stringify(await json(await admin("GET", "/keys?account=acme")))).not.toContain(key);

    const limit = await admin("PUT", "/limits", { account: "acme", model: MODEL, rpm: 20 });
    expect(limit.status).toBe(200);
    expect(await json(limit)).toEqual({ account: "acme", key: null, model: MODEL, rpm: 20, tpm: null, concurrent: null });

    const topUp = await admin("POST", "/accounts/acme/credit", { usd: 2, note: "pilot" });
    expect(topUp.status).toBe(201);
    expect((await json(topUp)).balance_usd).toBe(2);

    const chat = await fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 4, user: "u1" }),
    });
    expect(chat.status).toBe(200);
    expect(chat.headers.get("x-ratelimit-limit-requests")).toBe("20");

    const audit = (await json(await admin("GET", "/audit?limit=20"))).data as { actor: string; actor_kind: string; action: string; target: string; source: string }[];
    const mine = audit.filter((e) => e.actor === "provisioning-bot").reverse();
    expect(mine.map((e) => e.action)).toEqual(["accounts.create", "billing.setPlan", "keys.create", "limits.set", "billing.topUp"]);
    for (const e of mine) {
      expect(e.actor_kind).toBe("admin_api");
      expect(e.source).toMatch(/127\.0\.0\.1|::1/);
    }
    expect(mine[2]!.target).toBe(`key:${keyId}`);
    expect(JSON.stringify(audit)).not.toContain(key);
    expect(JSON.stringify(audit)).not.toContain(token);
    // The CLI reads the same log.
    expect(sluice("audit", "list").stdout).toContain("admin_api:provisioning-bot");
    expect((await json(await admin("GET", "/audit/verify"))).ok).toBe(true);

    // Usage reports and the key's spend.
    const report = await json(await admin("GET", "/usage?account=acme&by=user&since=2000-01-01"));
    expect(report.rows).toHaveLength(1);
    expect(report.rows[0]).toMatchObject({ group: "u1", requests: 1 });
  });

  test("keys, accounts, models and access change through it, and bad input gets /v1's error shape", async () => {
    const patched = await admin("PATCH", `/keys/${keyId}`, { budget_usd: null, models: null, label: "bot-2" });
    expect(await json(patched)).toMatchObject({ label: "bot-2", budget_usd: null, budget_period: null, models: null });
    expect((await json(await admin("PATCH", "/accounts/acme", { priority: 5, user_budget_usd: 1, user_budget_period: "day" })))).toMatchObject({ priority: 5, user_budget_usd: 1, user_budget_period: "day" });
    expect((await json(await admin("PUT", `/models/${MODEL}/prices`, { input: 0.5, output: 1.5 })))).toMatchObject({ id: MODEL, input_per_mtok: 0.5, output_per_mtok: 1.5 });
    expect((await json(await admin("PUT", "/accounts/acme/models", { models: [MODEL] })))).toEqual({ all: false, models: [MODEL] });
    expect((await json(await admin("PUT", "/accounts/acme/models", { all: true })))).toEqual({ all: true, models: [MODEL] });
    const models = await json(await admin("GET", "/models"));
    expect(models.data.map((m: { id: string }) => m.id)).toEqual([MODEL]);

    const cases: [string, string, unknown, number, string, string | null][] = [
      ["POST", "/keys", { account: "acme", budget_usd: -1 }, 400, "invalid_value", "budget_usd"],
      ["POST", "/keys", { account: "acme", expires: "yesterday" }, 400, "invalid_value", "expires"],
      ["POST", "/keys", { account: "acme", models: ["no/such"] }, 400, "model_not_found", "models"],
      ["POST", "/keys", { account: "nobody" }, 404, "not_found", null],
      ["POST", "/keys", { account: "acme", surprise: 1 }, 400, "invalid_value", "surprise"],
      ["POST", "/accounts", { name: "acme" }, 409, "already_exists", "name"],
      ["POST", "/accounts", { name: "Bad Name" }, 400, "invalid_value", "name"],
      ["POST", "/accounts", { name: "fresh", user_budget_period: "day" }, 400, "invalid_value", "user_budget_period"],
      ["PUT", "/limits", { account: "acme", rpm: 0 }, 400, "invalid_value", "rpm"],
      ["POST", "/accounts/acme/credit", { usd: "ten" }, 400, "invalid_value", "usd"],
      ["GET", "/usage?account=acme&by=week", undefined, 400, "invalid_value", "by"],
      ["GET", "/nowhere", undefined, 404, "unknown_url", null],
      ["DELETE", "/accounts", undefined, 405, "method_not_allowed", null],
    ];
    for (const [method, path, body, status, code, param] of cases) {
      const r = await admin(method, path, body);
      const e = (await json(r)).error;
      expect({ path, status: r.status, code: e?.code, param: e?.param }).toEqual({ path, status, code, param });
      expect(typeof e.message).toBe("string");
      expect(e.type).toBeTruthy();
    }
    const notJson = await fetch(`${server.adminUrl}/accounts`, { method: "POST", headers: { authorization: `Bearer ${token}` }, body: "name=x" });
    expect(notJson.status).toBe(400);
    // Nothing of the refused requests landed.
    expect((await server.store.accounts.list()).map((a) => a.name).sort()).toEqual(["acme", "local"]);
  });

  test("a revoked key gets 401 on /v1; the OpenAPI document describes every route", async () => {
    const revoked = await admin("DELETE", `/keys/${keyId}`);
    expect(revoked.status).toBe(200);
    expect((await json(revoked)).revoked_at).toBeNumber();
    expect((await fetch(`${server.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } })).status).toBe(401);
    expect((await admin("DELETE", `/keys/${keyId}`)).status).toBe(409);

    const doc = await json(await fetch(`${server.adminUrl}/openapi.json`));
    expect(doc.openapi).toBe("3.1.0");
    expect(Object.keys(doc.paths)).toEqual(expect.arrayContaining(["/accounts", "/keys", "/keys/{id}", "/limits", "/models/{model}/prices", "/accounts/{name}/credit", "/accounts/{name}/models", "/models/{model}/load", "/usage", "/audit"]));
    const post = doc.paths["/keys"].post;
    expect(Object.keys(post.requestBody.content["application/json"].schema.properties)).toEqual(["account", "label", "budget_usd", "budget_period", "expires", "models"]);
    expect(post.responses["201"].content["application/json"].schema.properties.key).toBeDefined();
    expect(post.responses["401"].content["application/json"].schema.properties.error).toBeDefined();
    // Never under /v1.
    expect((await fetch(`${server.url}/v1/admin/v1/accounts`, { headers: { authorization: `Bearer ${token}` } })).status).toBe(404);
  });

  test("tokens are required, rate limited per token, and a revoked token gets 401", async () => {
    const none = await admin("GET", "/accounts", undefined, "");
    expect(none.status).toBe(401);
    expect((await json(none)).error.code).toBe("invalid_api_key");
    expect((await admin("GET", "/accounts", undefined, "sk-sluice-admin-wrong")).status).toBe(401);
    // An API key is not an admin token.
    expect((await admin("GET", "/accounts", undefined, server.key)).status).toBe(401);

    // 60 per minute: within 61 more requests one is refused, saying when to retry.
    let limited: Response | null = null;
    for (let i = 0; i < 61 && !limited; i++) {
      const r = await admin("GET", "/accounts");
      if (r.status === 429) limited = r;
      else await r.body?.cancel();
    }
    expect(limited).not.toBeNull();
    expect((await json(limited!)).error.code).toBe("rate_limit_exceeded");
    expect(Number(limited!.headers.get("retry-after"))).toBeGreaterThan(0);
    // Another token has its own budget.
    const other = sluice("admin", "tokens", "create", "--label", "second").stdout.trim();
    expect((await admin("GET", "/accounts", undefined, other)).status).toBe(200);

    const r = sluice("admin", "tokens", "revoke", tokenId);
    expect(r.code).toBe(0);
    const refused = await admin("GET", "/accounts");
    expect(refused.status).toBe(401);
    expect((await json(refused)).error.code).toBe("invalid_api_key");
    expect(sluice("audit", "list").stdout).toContain("adminTokens.revoke");
    expect(sluice("admin", "tokens", "revoke", tokenId).stderr).toContain(`no active admin token ${tokenId}`);
    expect(sluice("admin", "tokens", "create", "--label", "").stderr).toContain("--label is required");
  });
});

describe("serve's admin API settings", () => {
  test("--no-admin-api turns it off; --admin-port puts it on a port of its own", async () => {
    const off = await startTestServer({ modelsDir, admin: { enabled: false } });
    try {
      expect(off.adminUrl).toBeNull();
      const r = await fetch(`${off.url}/admin/v1/accounts`);
      expect(r.status).toBe(404);
      expect(((await r.json()) as { error: { code: string } }).error.code).toBe("admin_api_off");
    } finally {
      await off.cleanup();
    }
    const own = await startTestServer({ modelsDir, admin: { enabled: true, port: 0, host: "127.0.0.1" } });
    try {
      expect(own.adminUrl).not.toStartWith(own.url);
      expect((await fetch(`${own.url}/admin/v1/openapi.json`)).status).toBe(404);
      expect((await fetch(`${own.adminUrl}/openapi.json`)).status).toBe(200);
      expect((await fetch(`${own.adminUrl}/accounts`)).status).toBe(401);
    } finally {
      await own.cleanup();
    }
  }, 60_000);

  test("serve refuses admin options that contradict each other, saying why", () => {
    const p = Bun.spawnSync([BUN, join(REPO, "src/cli/main.ts"), "serve", "--no-admin-api", "--admin-port", "9999", "--port", "0"], { stdout: "pipe", stderr: "pipe" });
    expect(p.exitCode).toBe(2);
    expect(p.stderr.toString()).toContain("--no-admin-api turns the admin API off");
    const q = Bun.spawnSync([BUN, join(REPO, "src/cli/main.ts"), "serve", "--admin-rpm", "lots", "--port", "0"], { stdout: "pipe", stderr: "pipe" });
    expect(q.exitCode).toBe(2);
    expect(q.stderr.toString()).toContain("--admin-rpm must be a positive whole number");
  });
});
