// The hostile-input side of the review: model ids resolve only through the catalog, error bodies
// carry no internals, the rate-limit admin form is operator-only and CSRF-checked, and the CLI
// commands set what the server enforces.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { main } from "../../src/cli/main.ts";
import { openSqliteStore } from "../../src/store/index.ts";
import { makeAccount, WorkspaceClient } from "../workspace/helpers.ts";
import { startHarness, type Harness } from "./harness.ts";

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(() => h.cleanup());

const leaks = (text: string) => /\/work\/|\/tmp\/|node_modules|\bat [\w.<>]+ \(|\.ts:\d+|Error:/.test(text);

describe("model ids", () => {
  test("only exact catalog ids resolve; traversal and malformed escapes are 404, never 500", async () => {
    for (const path of ["..%2F..%2Fetc%2Fpasswd", "../../etc/passwd", "%E0%A4%A", "hardening%2Ftiny%00", "HARDENING/TINY"]) {
      const res = await fetch(`${h.url}/v1/models/${path}`, { headers: h.headers });
      expect(res.status).toBe(404);
      expect(leaks(await res.text())).toBe(false);
    }
    for (const model of ["../../etc/passwd", "/etc/passwd", `${h.dataDir}/x`, "hardening/tiny/../../x", " hardening/tiny", "hardening\\tiny"]) {
      const res = await h.chat({ model, max_tokens: 1 });
      expect(res.status).toBe(404);
      const body = (await res.json()) as { error: { code: string } };
      expect(body.error.code).toBe("model_not_found");
    }
    expect((await fetch(`${h.url}/v1/models/hardening/tiny`, { headers: h.headers })).status).toBe(200);
  });
});

test("error bodies carry no stack, paths or internals", async () => {
  const cases: [string, RequestInit][] = [
    ["/v1/chat/completions", { method: "POST", headers: h.headers, body: "{not json" }],
    ["/v1/chat/completions", { method: "POST", headers: h.headers, body: JSON.stringify({ model: h.model, messages: "x" }) }],
    ["/v1/chat/completions", { method: "POST", headers: { ...h.headers, "content-type": "text/plain" }, body: "x" }],
    ["/v1/chat/completions", { method: "POST", headers: h.headers, body: new Uint8Array([0x7b, 0xff, 0xfe, 0x7d]) }],
    ["/v1/chat/completions", { method: "POST", headers: h.headers, body: JSON.stringify({ model: h.model, messages: [{ role: "user", content: "x" }], max_tokens: -1 }) }],
    ["/v1/models", { headers: { authorization: "Bearer " + "x".repeat(10_000) } }],
    ["/v1/models", { headers: { authorization: "Basic abc" } }],
    ["/v1/embeddings", { method: "POST", headers: h.headers, body: "{}" }],
    ["/v1/chat/completions", { method: "DELETE", headers: h.headers }],
  ];
  for (const [path, init] of cases) {
    const res = await fetch(`${h.url}${path}`, init);
    expect(res.status).toBeGreaterThanOrEqual(400);
    expect(res.status).toBeLessThan(500);
    const text = await res.text();
    expect(leaks(text)).toBe(false);
    expect(JSON.parse(text).error.message).toBeString();
  }
});

describe("rate limits from the admin page and the CLI", () => {
  test("the admin form is for operators, needs the CSRF token, and sets what the API enforces", async () => {
    const op = await makeAccount(h.store, "ops", { role: "operator" });
    const member = await makeAccount(h.store, "member");
    const local = (await h.store.accounts.get("local"))!;

    const m = new WorkspaceClient(h.url);
    expect((await m.signIn(member.email, "correct horse battery")).status).toBe(303);
    expect((await m.form("/workspace/admin/limits", { account: "local", rpm: "1" })).status).toBe(403);

    const o = new WorkspaceClient(h.url);
    expect((await o.signIn(op.email, "correct horse battery")).status).toBe(303);
    const page = await (await o.get("/workspace/admin?account=local")).text();
    expect(page).toContain('action="/workspace/admin/limits"');
    expect((await o.form("/workspace/admin/limits", { account: "local", rpm: "1", _csrf: "wrong" })).status).toBe(403);
    expect((await h.store.limits.get(local.id))).toBeNull();
    const bad = await o.form("/workspace/admin/limits", { account: "local", rpm: "-3", tpm: "", concurrent: "" });
    // Back to the form (a redirect, as every form's answer), which says why.
    expect(await (await o.follow(bad)).text()).toContain("positive whole number");
    const ok = await o.form("/workspace/admin/limits", { account: "local", rpm: "2", tpm: "", concurrent: "5" });
    expect(ok.status).toBe(303);
    expect((await h.store.limits.get(local.id))).toEqual({ requestsPerMinute: 2, tokensPerMinute: null, maxConcurrent: 5 });
    const r1 = await fetch(`${h.url}/v1/models`, { headers: h.headers });
    expect(r1.headers.get("x-ratelimit-limit-requests")).toBe("2");
    // Clearing the fields removes the limits.
    expect((await o.form("/workspace/admin/limits", { account: "local", rpm: "", tpm: "", concurrent: "" })).status).toBe(303);
    expect((await h.store.limits.get(local.id))).toBeNull();
    expect((await fetch(`${h.url}/v1/models`, { headers: h.headers })).headers.get("x-ratelimit-limit-requests")).toBeNull();
  });

  test("sluice limits set / list / clear, against the server's database while it runs", async () => {
    const data = ["--data", h.dataDir];
    const out: string[] = [];
    const log = console.log;
    console.log = (...a: unknown[]) => out.push(a.join(" "));
    try {
      expect(await main(["limits", "set", "--account", "local", "--rpm", "1", "--tpm", "5000", ...data])).toBe(0);
      expect(await main(["limits", "set", "--account", "local", "--rpm", "zero", ...data])).toBe(2);
      expect(await main(["limits", "set", "--account", "nobody", "--rpm", "1", ...data])).toBe(2);
      expect(await main(["limits", "list", ...data])).toBe(0);
    } finally {
      console.log = log;
    }
    expect(out.join("\n")).toContain("rpm=1 tpm=5000 concurrent=unlimited");
    expect((await fetch(`${h.url}/v1/models`, { headers: h.headers })).status).toBe(200);
    expect((await fetch(`${h.url}/v1/models`, { headers: h.headers })).status).toBe(429);
    // Keeps what is not named; 'none' removes one dimension.
    expect(await main(["limits", "set", "--account", "local", "--rpm", "none", ...data])).toBe(0);
    const s = openSqliteStore(join(h.dataDir, "sluice.db"));
    try {
      expect((await s.limits.get((await s.accounts.get("local"))!.id))).toEqual({ requestsPerMinute: null, tokensPerMinute: 5000, maxConcurrent: null });
    } finally {
      s.close();
    }
    expect(await main(["limits", "clear", "--account", "local", ...data])).toBe(0);
    expect((await fetch(`${h.url}/v1/models`, { headers: h.headers })).status).toBe(200);
  });
});

test("serve --help documents every request limit with its environment variable", async () => {
  const out: string[] = [];
  const log = console.log;
  console.log = (...a: unknown[]) => out.push(a.join(" "));
  try {
    expect(await main(["serve", "--help"])).toBe(0);
  } finally {
    console.log = log;
  }
  const help = out.join("\n");
  for (const env of ["SLUICE_MAX_BODY_BYTES", "SLUICE_MAX_MESSAGES", "SLUICE_MAX_TOKENS_CAP", "SLUICE_MAX_GENERATION_SECONDS", "SLUICE_STREAM_IDLE_SECONDS"]) {
    expect(help).toContain(env);
  }
});
