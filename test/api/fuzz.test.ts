// Property-based fuzzing of the public surface with malformed and hostile requests: every answer
// is a 4xx OpenAI-shaped error (or a success for the rare mutation that stays valid), nothing
// hangs, and the server stays up.
import { afterAll, beforeAll, expect, test } from "bun:test";
import fc from "fast-check";
import { syntheticModel, tinyModelsRoot } from "../helpers/models.ts";
import { tempDir } from "../helpers/paths.ts";
import { startTestServer, type TestServer } from "../helpers/server.ts";

let server: TestServer;
let models: ReturnType<typeof tempDir>;
const MODEL = "fuzz/tiny";

beforeAll(async () => {
  models = tempDir("sluice-fuzz-");
  await syntheticModel(models.path, "m", { preset: "tiny-bytes", seed: 10, id: MODEL, shape: { contextLength: 128 } });
  server = await startTestServer({ modelsDir: models.path, maxBodyBytes: 256 * 1024 });
});

afterAll(async () => {
  await server?.cleanup();
  models?.remove();
});

const valid = () => ({ model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 1 });

async function send(init: { path?: string; method?: string; body?: BodyInit | null; headers?: Record<string, string> }) {
  const res = await fetch(`${server.url}${init.path ?? "/v1/chat/completions"}`, {
    method: init.method ?? "POST",
    headers: { authorization: `Bearer ${server.key}`, "content-type": "application/json", ...init.headers },
    body: init.body,
    signal: AbortSignal.timeout(10_000),
  });
  const text = await res.text();
  return { status: res.status, text, type: res.headers.get("content-type") ?? "" };
}

function expectShaped(r: { status: number; text: string; type: string }) {
  expect(r.status).toBeLessThan(500);
  if (r.status >= 400) {
    expect(r.type).toContain("application/json");
    const body = JSON.parse(r.text) as { error: Record<string, unknown> };
    expect(typeof body.error.message).toBe("string");
    expect(Object.keys(body.error).sort()).toEqual(["code", "message", "param", "type"]);
    // No internal detail leaks into errors.
    expect(r.text).not.toMatch(/\/work\/|node_modules|at [A-Za-z]+ \(|\.ts:\d+/);
  }
}

const hostileValue = fc.oneof(
  fc.jsonValue({ maxDepth: 4 }),
  fc.constantFrom(1e308, -1e308, -1, 0, 2 ** 53, -(2 ** 53), 0.5, "", "NaN", "Infinity", null, true, [], {}),
  fc.string({ maxLength: 50 }),
  fc.constant({ __proto__: { admin: true } }),
  fc.constant(JSON.parse('{"__proto__": {"polluted": 1}}')),
);

test("arbitrary JSON bodies", async () => {
  await fc.assert(
    fc.asyncProperty(fc.jsonValue({ maxDepth: 5 }), async (body) => expectShaped(await send({ body: JSON.stringify(body) }))),
    { numRuns: 400 },
  );
});

test("valid requests with one field replaced by hostile values", async () => {
  const fields = ["model", "messages", "max_tokens", "temperature", "top_p", "n", "stop", "logit_bias", "tools", "tool_choice", "response_format", "stream", "stream_options", "seed", "logprobs", "top_logprobs", "metadata", "user", "__proto__", "constructor", "extra"];
  await fc.assert(
    fc.asyncProperty(fc.constantFrom(...fields), hostileValue, async (field, value) => {
      const body: Record<string, unknown> = valid();
      Object.defineProperty(body, field, { value, enumerable: true, configurable: true, writable: true });
      expectShaped(await send({ body: JSON.stringify(body) }));
    }),
    { numRuns: 600 },
  );
});

test("hostile message shapes", async () => {
  const message = fc.record(
    { role: fc.oneof(fc.constantFrom("user", "system", "assistant", "tool", "developer", "function"), fc.string()), content: hostileValue, name: hostileValue, tool_calls: hostileValue, tool_call_id: hostileValue },
    { requiredKeys: ["role"] },
  );
  await fc.assert(
    fc.asyncProperty(fc.array(message, { maxLength: 4 }), async (messages) => expectShaped(await send({ body: JSON.stringify({ ...valid(), messages }) }))),
    { numRuns: 400 },
  );
});

test("garbage bytes, invalid UTF-8, truncated JSON, wrong content types", async () => {
  const full = JSON.stringify(valid());
  await fc.assert(
    fc.asyncProperty(
      fc.oneof(
        fc.uint8Array({ maxLength: 300 }).map((b) => ({ body: b as BodyInit, ct: "application/json" })),
        fc.integer({ min: 0, max: full.length - 1 }).map((n) => ({ body: full.slice(0, n) as BodyInit, ct: "application/json" })),
        fc.constantFrom("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "", "application/jsonp", "application/json; charset=latin1").map((ct) => ({ body: full as BodyInit, ct })),
        fc.constant({ body: new Uint8Array([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x3a, 0x31, 0x7d]) as BodyInit, ct: "application/json" }),
      ),
      async ({ body, ct }) => {
        const r = await send({ body, headers: { "content-type": ct } });
        expectShaped(r);
        if (r.status !== 200) expect(r.status).toBeGreaterThanOrEqual(400);
      },
    ),
    { numRuns: 300 },
  );
});

test("deep nesting and enormous strings", async () => {
  const deep = "[".repeat(100_000) + "]".repeat(100_000);
  expectShaped(await send({ body: deep }));
  const deepObj = '{"model":"x","messages":' + '{"a":'.repeat(50_000) + "1" + "}".repeat(50_000) + "}";
  expectShaped(await send({ body: deepObj }));
  const deepTools = JSON.stringify({ ...valid(), tools: [{ type: "function", function: { name: "f", parameters: JSON.parse('{"a":'.repeat(2000) + "1" + "}".repeat(2000)) } }] });
  expectShaped(await send({ body: deepTools }));
  expectShaped(await send({ body: JSON.stringify({ ...valid(), messages: [{ role: "user", content: "x".repeat(300_000) }] }) }));
  expectShaped(await send({ body: JSON.stringify({ ...valid(), user: "u".repeat(100_000) }) }));
});

test("random paths, methods and authorization headers", async () => {
  await fc.assert(
    fc.asyncProperty(
      fc.constantFrom("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"),
      fc.oneof(fc.webPath(), fc.constantFrom("/v1/models/../../etc/passwd", "/v1/models/%2e%2e%2fsecret", "/v1//models", "/v1/models/a%00b", "/v1/chat/completions/")),
      fc.oneof(fc.constant(`Bearer ${"sk-sluice-"}x`), fc.string(), fc.constant("Bearer " + "a".repeat(10_000))),
      async (method, path, auth) => {
        const r = await send({ path: path.startsWith("/") ? path : `/${path}`, method, headers: { authorization: auth }, body: method === "GET" ? null : "{}" });
        expectShaped(r);
      },
    ),
    { numRuns: 400 },
  );
});

test("raw garbage on the socket and slow, truncated requests leave the server up", async () => {
  const { hostname, port } = new URL(server.url);
  const garbage = [
    "GARBAGE\r\n\r\n",
    "\x00\x01\x02\xff\xfe",
    "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nContent-Type: application/json\r\n\r\n{\"model\":",
    "GET /health HTTP/1.1\r\nHost: x\r\nX-Long: " + "a".repeat(200_000) + "\r\n\r\n",
    "POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\nHost: x\r\n\r\nzz\r\n",
  ];
  for (const g of garbage) {
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, 2000);
      void Bun.connect({
        hostname,
        port: Number(port),
        socket: {
          open(s) {
            s.write(g);
            s.shutdown?.();
          },
          data() {},
          close() {
            clearTimeout(timer);
            resolve();
          },
          error() {
            clearTimeout(timer);
            resolve();
          },
        },
      }).catch(() => resolve());
    });
  }
  // Slow headers: a byte at a time, then abandoned.
  const slow = await Bun.connect({ hostname, port: Number(port), socket: { data() {}, close() {}, error() {} } });
  for (const ch of "GET /hea") {
    slow.write(ch);
    await Bun.sleep(20);
  }
  slow.end();
  expect((await fetch(`${server.url}/health`)).status).toBe(200);
  const ok = await send({ body: JSON.stringify(valid()) });
  expect(ok.status).toBe(200);
});
