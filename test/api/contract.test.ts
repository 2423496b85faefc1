// The public /v1 contract end to end: the real server on an ephemeral port, the official openai
// client where it applies and raw fetch for the rest.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import { syntheticModel } from "../helpers/models.ts";
import { tempDir } from "../helpers/paths.ts";
import { startTestServer, type TestServer } from "../helpers/server.ts";

let server: TestServer;
let models: ReturnType<typeof tempDir>;
let client: OpenAI;

const SLASHED = "acme/tiny-chat-1.5";

beforeAll(async () => {
  models = tempDir("sluice-models-");
  // One model named by its path, one by its sluice.json id.
  await syntheticModel(models.path, "acme/tiny-chat-1.5", { preset: "tiny-bytes", seed: 1, id: SLASHED });
  await syntheticModel(models.path, "other", { preset: "tiny-bytes", seed: 2, id: "sluice/other-2" });
  server = await startTestServer({ modelsDir: models.path, maxBodyBytes: 64 * 1024 });
  client = new OpenAI({ apiKey: server.key, baseURL: `${server.url}/v1`, maxRetries: 0 });
});

afterAll(async () => {
  await server?.cleanup();
  models?.remove();
});

const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(`${server.url}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${server.key}`, "content-type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });

/** The openai client returns thenables that bun's `rejects` does not treat as promises. */
async function rejectsWith(p: PromiseLike<unknown>, cls: abstract new (...a: never[]) => unknown) {
  let caught: unknown = null;
  try {
    await p;
  } catch (e) {
    caught = e;
  }
  expect(caught).toBeInstanceOf(cls);
}

async function expectError(res: Response, status: number, code?: string | null, param?: string | null) {
  expect(res.status).toBe(status);
  expect(res.headers.get("content-type")).toContain("application/json");
  const body = (await res.json()) as { error: Record<string, unknown> };
  expect(Object.keys(body.error).sort()).toEqual(["code", "message", "param", "type"]);
  expect(typeof body.error.message).toBe("string");
  if (code !== undefined) expect(body.error.code).toBe(code);
  if (param !== undefined) expect(body.error.param).toBe(param);
  return body.error;
}

describe("models", () => {
  test("the openai client lists the account's models", async () => {
    const page = await client.models.list();
    const ids = page.data.map((m) => m.id).sort();
    expect(ids).toEqual([SLASHED, "sluice/other-2"]);
    const m = page.data.find((x) => x.id === SLASHED)!;
    expect(m.object).toBe("model");
    expect(m.owned_by).toBe("acme");
    expect((m as unknown as { context_length: number }).context_length).toBeGreaterThan(0);
  });

  test("retrieve works with an id that contains '/' and '.'", async () => {
    const m = await client.models.retrieve(SLASHED);
    expect(m.id).toBe(SLASHED);
  });

  test("an id that is not exactly canonical is not found, never aliased", async () => {
    for (const id of ["acme/tiny-chat-1.50", "ACME/tiny-chat-1.5", "tiny-chat-1.5", "acme/tiny-chat"]) {
      await rejectsWith(client.models.retrieve(id), OpenAI.NotFoundError);
    }
    const res = await fetch(`${server.url}/v1/models/nope/nope`, { headers: { authorization: `Bearer ${server.key}` } });
    await expectError(res, 404, "model_not_found", "model");
  });

  test("bad keys get 401 invalid_api_key on every authenticated route", async () => {
    const bad = new OpenAI({ apiKey: "sk-sluice-wrong", baseURL: `${server.url}/v1`, maxRetries: 0 });
    await rejectsWith(bad.models.list(), OpenAI.AuthenticationError);
    for (const headers of [{} as Record<string, string>, { authorization: "Basic abc" }, { authorization: "Bearer" }, { authorization: "Bearer sk-other" }]) {
      await expectError(await fetch(`${server.url}/v1/models`, { headers }), 401, "invalid_api_key");
      await expectError(await fetch(`${server.url}/v1/models/${SLASHED}`, { headers }), 401, "invalid_api_key");
      await expectError(
        await fetch(`${server.url}/v1/chat/completions`, { method: "POST", headers, body: "{}" }),
        401,
        "invalid_api_key",
      );
    }
  });

  test("a revoked key stops working on the next request", async () => {
    const account = (await server.store.accounts.get("local"))!;
    const { key, info } = await server.store.keys.create(account.id, "short-lived");
    const c = new OpenAI({ apiKey: key, baseURL: `${server.url}/v1`, maxRetries: 0 });
    expect((await c.models.list()).data.length).toBe(2);
    expect((await server.store.keys.revoke(info.id))).toBe(true);
    await rejectsWith(c.models.list(), OpenAI.AuthenticationError);
  });

  test("an account restricted by the operator sees only its grants", async () => {
    const acct = await server.store.accounts.create("restricted");
    const { key } = await server.store.keys.create(acct.id, null);
    const c = new OpenAI({ apiKey: key, baseURL: `${server.url}/v1`, maxRetries: 0 });
    expect((await c.models.list()).data.length).toBe(2);
    await server.store.catalog.revoke(acct.id, "sluice/other-2");
    expect((await c.models.list()).data.map((m) => m.id)).toEqual([SLASHED]);
    await rejectsWith(c.models.retrieve("sluice/other-2"), OpenAI.NotFoundError);
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "sluice/other-2", messages: [{ role: "user", content: "hi" }] }),
    });
    await expectError(res, 404, "model_not_found", "model");
    await server.store.catalog.grant(acct.id, "sluice/other-2");
    expect((await c.models.list()).data.length).toBe(2);
  });

  test("a disabled model disappears from listings and integrations", async () => {
    await server.store.catalog.setStatus("sluice/other-2", "inactive");
    try {
      expect((await client.models.list()).data.map((m) => m.id)).toEqual([SLASHED]);
      const integ = (await (await fetch(`${server.url}/v1/integrations`)).json()) as { models: string[] };
      expect(integ.models).toEqual([SLASHED]);
    } finally {
      await server.store.catalog.setStatus("sluice/other-2", "active");
    }
  });
});

describe("integrations", () => {
  test("no key needed; base_url from the Host header", async () => {
    const res = await fetch(`${server.url}/v1/integrations`, { headers: { host: "gpu.example.test:9000" } });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { base_url: string; models: string[] };
    expect(body.base_url).toBe("http://gpu.example.test:9000/v1");
    expect(body.models.sort()).toEqual([SLASHED, "sluice/other-2"]);
  });

  test("base_url from --public-url when given", async () => {
    const other = await startTestServer({ modelsDir: models.path, publicUrl: "https://llm.example.com/" });
    try {
      const body = (await (await fetch(`${other.url}/v1/integrations`)).json()) as { base_url: string };
      expect(body.base_url).toBe("https://llm.example.com/v1");
    } finally {
      await other.cleanup();
    }
  });
});

describe("routes", () => {
  test("health and readiness", async () => {
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
    const ready = await fetch(`${server.url}/ready`);
    expect(ready.status).toBe(200);
    expect(((await ready.json()) as { ready: boolean }).ready).toBe(true);
  });

  test("unsupported API routes say so, for any method", async () => {
    for (const path of ["/v1/responses", "/v1/messages", "/v1/embeddings", "/v1/rerank"]) {
      for (const method of ["GET", "POST", "DELETE"]) {
        const res = await fetch(`${server.url}${path}`, { method, headers: { "content-type": "application/json" }, body: method === "GET" ? undefined : "{}" });
        const err = await expectError(res, 404, "unsupported_endpoint");
        expect(err.message).toContain("not supported");
        expect(err.message).toContain("/v1/chat/completions");
      }
    }
  });

  test("unknown paths are 404, wrong methods 405 with Allow; never a redirect", async () => {
    await expectError(await fetch(`${server.url}/v1/nothing`, { redirect: "manual" }), 404, "unknown_url");
    await expectError(await fetch(`${server.url}/`, { redirect: "manual" }), 404);
    const res = await fetch(`${server.url}/v1/chat/completions`, { redirect: "manual" });
    expect(res.headers.get("allow")).toBe("POST");
    await expectError(res, 405, "method_not_allowed");
    const res2 = await fetch(`${server.url}/v1/models`, { method: "POST", redirect: "manual" });
    expect(res2.headers.get("allow")).toContain("GET");
    await expectError(res2, 405);
  });
});

describe("chat request validation", () => {
  const ok = { model: SLASHED, messages: [{ role: "user", content: "hello" }], max_tokens: 2 };

  test("malformed JSON, wrong content type, oversized bodies", async () => {
    await expectError(await post("/v1/chat/completions", "{nope"), 400, "invalid_json");
    await expectError(await post("/v1/chat/completions", JSON.stringify(ok), { "content-type": "text/plain" }), 415);
    await expectError(await post("/v1/chat/completions", "[1,2]"), 400);
    const huge = { ...ok, messages: [{ role: "user", content: "x".repeat(100 * 1024) }] };
    await expectError(await post("/v1/chat/completions", huge), 413, "request_too_large");
  });

  test("unknown fields and fields that cannot be honoured are refused, naming the param", async () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ ...ok, frobnicate: true }, "frobnicate"],
      [{ ...ok, functions: [] }, "functions"],
      [{ ...ok, audio: { voice: "x" } }, "audio"],
      [{ ...ok, store: true }, "store"],
      [{ ...ok, modalities: ["text", "audio"] }, "modalities"],
      [{ ...ok, temperature: 2.5 }, "temperature"],
      [{ ...ok, temperature: "1" }, "temperature"],
      [{ ...ok, n: 0 }, "n"],
      [{ ...ok, max_tokens: -1 }, "max_tokens"],
      [{ ...ok, stop: ["a", "b", "c", "d", "e"] }, "stop"],
      [{ ...ok, logit_bias: { "12": 101 } }, "logit_bias.12"],
      [{ ...ok, logit_bias: { abc: 1 } }, "logit_bias"],
      [{ ...ok, top_logprobs: 2 }, "top_logprobs"],
      [{ ...ok, stream_options: { include_usage: true } }, "stream_options"],
      [{ ...ok, tool_choice: "required" }, "tool_choice"],
      [{ model: SLASHED }, "messages"],
      [{ ...ok, messages: [] }, "messages"],
      [{ ...ok, messages: [{ role: "robot", content: "x" }] }, "messages[0].role"],
      [{ ...ok, messages: [{ role: "user" }] }, "messages[0].content"],
      [{ ...ok, messages: [{ role: "user", content: [{ type: "input_audio", input_audio: {} }] }] }, "messages[0].content[0].type"],
      [{ ...ok, messages: [{ role: "tool", content: "x" }] }, "messages[0].tool_call_id"],
      [{ ...ok, response_format: { type: "yaml" } }, "response_format.type"],
      [{ ...ok, messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "data:image/png;base64,AAAA" } }] }] }, "messages[0].content[0]"],
    ];
    for (const [body, param] of cases) {
      const err = await expectError(await post("/v1/chat/completions", body), 400, undefined, param);
      expect(err.type).toBe("invalid_request_error");
    }
  });

  test("an assistant turn may leave its content out (as null) or give refusal parts (what it said)", async () => {
    const promptTokens = async (assistant: Record<string, unknown>) => {
      const res = await post("/v1/chat/completions", { ...ok, messages: [{ role: "user", content: "hi" }, { role: "assistant", ...assistant }, { role: "user", content: "and?" }] });
      expect(res.status).toBe(200);
      return ((await res.json()) as { usage: { prompt_tokens: number } }).usage.prompt_tokens;
    };
    expect(await promptTokens({})).toBe(await promptTokens({ content: null }));
    expect(await promptTokens({ content: [{ type: "refusal", refusal: "I cannot." }] })).toBe(await promptTokens({ content: "I cannot." }));
    expect(await promptTokens({ content: "I cannot." })).toBeGreaterThan(await promptTokens({ content: null }));
  });

  test("a model that is not exactly an available id is 404 model_not_found", async () => {
    await expectError(await post("/v1/chat/completions", { ...ok, model: "acme/tiny-chat" }), 404, "model_not_found", "model");
    await expectError(await post("/v1/chat/completions", { ...ok, model: "../etc/passwd" }), 404, "model_not_found");
  });

  test("the openai client surfaces these as typed errors", async () => {
    await rejectsWith(client.chat.completions.create({ model: "no/such-model", messages: [{ role: "user", content: "x" }] }), OpenAI.NotFoundError);
    await rejectsWith(client.chat.completions.create({ model: SLASHED, messages: [{ role: "user", content: "x" }], temperature: 9 }), OpenAI.BadRequestError);
  });

  test("x-request-id is echoed or generated", async () => {
    const res = await fetch(`${server.url}/health`, { headers: { "x-request-id": "abc-123" } });
    expect(res.headers.get("x-request-id")).toBe("abc-123");
    const res2 = await fetch(`${server.url}/v1/nothing`);
    expect(res2.headers.get("x-request-id")).toBeTruthy();
  });
});

describe("catalog synchronisation", () => {
  test("a new directory appears and a removed one disappears on resync", async () => {
    const added = await syntheticModel(models.path, "late/arrival-0.1", { preset: "tiny-bytes", seed: 3, id: "late/arrival-0.1" });
    await server.syncCatalog();
    expect((await client.models.list()).data.map((m) => m.id)).toContain("late/arrival-0.1");
    rmSync(added, { recursive: true, force: true });
    await server.syncCatalog();
    expect((await client.models.list()).data.map((m) => m.id)).not.toContain("late/arrival-0.1");
    expect((await server.store.catalog.get("late/arrival-0.1"))?.present).toBe(false);
  });

  test("a directory that cannot be loaded is reported and left out; the server keeps serving", async () => {
    const broken = join(models.path, "broken/model");
    await syntheticModel(models.path, "broken/model", { preset: "tiny-bytes", seed: 4, id: "broken/model" });
    await Bun.write(join(broken, "onnx", "model.onnx"), "not an onnx file");
    await server.syncCatalog();
    const entry = await server.store.catalog.get("broken/model");
    expect(entry?.loadError).toBeTruthy();
    expect((await client.models.list()).data.map((m) => m.id)).not.toContain("broken/model");
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
    rmSync(broken, { recursive: true, force: true });
    await server.syncCatalog();
  });
});
