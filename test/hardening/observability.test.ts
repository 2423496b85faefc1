// /metrics in Prometheus' format and one access log line per request: request id, method, route,
// status, latency, account id — never the key or prompt text.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { startHarness, type Harness } from "./harness.ts";

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(() => h.cleanup());

const SECRET_PROMPT = "the-secret-prompt-text-7781";

test("access log: one line per request with its id, route, status, latency and account; no key, no prompt", async () => {
  const res = await h.chat({ max_tokens: 2, messages: [{ role: "user", content: SECRET_PROMPT }] }, { "x-request-id": "log-1" });
  expect(res.headers.get("x-request-id")).toBe("log-1");
  await res.text();
  await fetch(`${h.url}/v1/models`, { headers: { authorization: "Bearer sk-sluice-wrong" } });
  await fetch(`${h.url}/nope/../../etc/passwd`);
  const lines = h.logs.filter((l) => l.msg === "request");
  const chat = lines.find((l) => l.request_id === "log-1")!;
  expect(chat).toMatchObject({ method: "POST", route: "/v1/chat/completions", status: 200, account_id: (await h.store.accounts.get("local"))!.id, level: "info" });
  expect(typeof chat.latency_ms).toBe("number");
  const unauthorized = lines.find((l) => l.route === "/v1/models" && l.status === 401)!;
  expect(unauthorized.account_id).toBeNull();
  expect(typeof unauthorized.request_id).toBe("string");
  expect(lines.some((l) => l.status === 404 && l.route === "other")).toBe(true);
  const all = JSON.stringify(h.logs);
  expect(all).not.toContain(h.key);
  expect(all).not.toContain(h.key.slice(10));
  expect(all).not.toContain("sk-sluice-wrong");
  expect(all).not.toContain(SECRET_PROMPT);
});

test("/metrics: requests by route and status, latency and TTFT histograms, tokens, errors, engine gauges", async () => {
  for (let i = 0; i < 3; i++) await (await h.chat({ max_tokens: 3, stream: true })).text();
  await (await h.chat({ model: "no/such-model" })).text();
  const res = await fetch(`${h.url}/metrics`);
  expect(res.headers.get("content-type")).toContain("text/plain");
  const text = await res.text();
  const value = (re: RegExp) => Number(re.exec(text)?.[1] ?? NaN);
  expect(value(/^sluice_http_requests_total\{route="\/v1\/chat\/completions",method="POST",status="200"\} (\d+)$/m)).toBeGreaterThanOrEqual(4);
  expect(value(/^sluice_http_requests_total\{route="\/v1\/chat\/completions",method="POST",status="404"\} (\d+)$/m)).toBe(1);
  expect(value(/^sluice_http_errors_total\{route="\/v1\/chat\/completions",status="404",code="model_not_found"\} (\d+)$/m)).toBe(1);
  expect(value(/^sluice_http_request_duration_seconds_count\{route="\/v1\/chat\/completions"\} (\d+)$/m)).toBeGreaterThanOrEqual(5);
  expect(value(/^sluice_time_to_first_token_seconds_count\{model="hardening\/tiny"\} (\d+)$/m)).toBeGreaterThanOrEqual(3);
  expect(value(/^sluice_completion_tokens_total\{model="hardening\/tiny"\} (\d+)$/m)).toBeGreaterThanOrEqual(9);
  expect(value(/^sluice_prompt_tokens_total\{model="hardening\/tiny"\} (\d+)$/m)).toBeGreaterThan(0);
  expect(value(/^sluice_generations_total\{model="hardening\/tiny",status="ok"\} (\d+)$/m)).toBeGreaterThanOrEqual(4);
  expect(text).toMatch(/^sluice_kv_used_bytes\{model="hardening\/tiny"\} \d+$/m);
  expect(text).toMatch(/^sluice_queued_requests\{model="hardening\/tiny"\} \d+$/m);
  // Buckets are cumulative and end with +Inf equal to the count.
  const buckets = [...text.matchAll(/^sluice_http_request_duration_seconds_bucket\{route="\/v1\/chat\/completions",le="([^"]+)"\} (\d+)$/gm)].map((m) => Number(m[2]));
  expect(buckets).toEqual([...buckets].sort((a, b) => a - b));
  expect(buckets.at(-1)).toBe(value(/^sluice_http_request_duration_seconds_count\{route="\/v1\/chat\/completions"\} (\d+)$/m));
  // Every sample line is `name{labels} number` or `name number`.
  for (const line of text.split("\n").filter((l) => l && !l.startsWith("#"))) expect(line).toMatch(/^[a-z_]+(\{[^}]*\})? -?[0-9.e+]+$/);
  // Hostile paths do not become series of their own.
  await fetch(`${h.url}/v1/${"x".repeat(50)}`);
  expect(await (await fetch(`${h.url}/metrics`)).text()).not.toContain("x".repeat(50));
});

test("GET /v1/models answers the same through Bun's route (listening) and Elysia's (api.handle)", async () => {
  const { createApi } = await import("../../src/api/app.ts");
  const { silentLogger } = await import("../../src/log.ts");
  const api = createApi({ store: h.store, engine: h.engine, log: silentLogger(), ready: () => true, version: "test" });
  const viaHttp = await fetch(`${h.url}/v1/models`, { headers: { ...h.headers, "x-request-id": "same-1" } });
  const inProcess = await api.handle(new Request("http://localhost/v1/models", { headers: { ...h.headers, "x-request-id": "same-1" } }));
  expect(inProcess.status).toBe(viaHttp.status);
  expect(await inProcess.text()).toBe(await viaHttp.text());
  expect(inProcess.headers.get("x-request-id")).toBe("same-1");
  expect(viaHttp.headers.get("x-request-id")).toBe("same-1");
  const denied = await api.handle(new Request("http://localhost/v1/models", { headers: { authorization: "Bearer nope" } }));
  const deniedHttp = await fetch(`${h.url}/v1/models`, { headers: { authorization: "Bearer nope" } });
  expect([denied.status, deniedHttp.status]).toEqual([401, 401]);
  expect(await denied.json()).toEqual(await deniedHttp.json());
});
