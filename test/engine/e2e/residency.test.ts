// Models loaded on demand under one memory budget, through the real server: three synthetic models
// and a budget that fits two. Which model is unloaded for a load, which never is (streaming,
// pinned), keep-alive expiry, a broken model's load, the memory shown (control listener, CLI,
// /metrics), and a cold stream's first chunk coming after the load.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import { readControlFile } from "../../../src/control-file.ts";
import type { ModelResidency, ResidencySummary } from "../../../src/engine/types.ts";
import { syntheticModel } from "../../helpers/models.ts";
import { BUN, REPO, tempDir } from "../../helpers/paths.ts";
import { startTestServer, type TestServer } from "../../helpers/server.ts";

const MiB = 2 ** 20;
/** Each model: about 0.4 MiB of weights and this KV budget. */
const KV_MB = 8;
const IDS = ["res/a", "res/b", "res/c"];

let models: ReturnType<typeof tempDir>;
let server: TestServer;
let client: OpenAI;

async function residency(): Promise<ResidencySummary> {
  const control = readControlFile(server.dataDir)!;
  const res = await fetch(`${control.url}/residency`, { headers: { authorization: `Bearer ${control.token}` } });
  expect(res.status).toBe(200);
  return (await res.json()) as ResidencySummary;
}

/** `sluice models …` against this server's data directory (asynchronously: the server runs in this process). */
async function sluice(...args: string[]) {
  const p = Bun.spawn([BUN, join(REPO, "src/cli/main.ts"), "models", ...args, "--data", server.dataDir], { cwd: REPO, stdout: "pipe", stderr: "pipe" });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  return { out, err, code };
}

const state = async (id: string) => (await residency()).models.find((m) => m.model === id)!;
const states = async () => Object.fromEntries((await residency()).models.map((m) => [m.model, m.state]));

const ask = (model: string, maxTokens = 4) =>
  client.chat.completions.create({ model, messages: [{ role: "user", content: "hello" }], max_tokens: maxTokens, temperature: 0 });

/** A stream held open: it has produced its first token and waits for the test to read on. */
async function holdStream(model: string) {
  const stream = await client.chat.completions.create({
    model,
    messages: [{ role: "user", content: "hello" }],
    // Long enough to outlast the test's steps (seconds even on an idle machine); ended by aborting.
    max_tokens: 7000,
    temperature: 0,
    stream: true,
  });
  const it = stream[Symbol.asyncIterator]();
  await it.next();
  return { close: () => stream.controller.abort() };
}

async function until(what: string, check: () => Promise<boolean>, ms = 20_000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await check()) return;
    await Bun.sleep(50);
  }
  throw new Error(`timed out waiting for ${what}`);
}

beforeAll(async () => {
  models = tempDir("sluice-residency-");
  for (const [i, id] of IDS.entries()) await syntheticModel(models.path, id, { preset: "tiny-bytes", id, seed: 20 + i, shape: { contextLength: 8192 } });
  // A model whose graph is not ONNX: its load fails.
  const broken = await syntheticModel(models.path, "res/broken", { preset: "tiny-bytes", id: "res/broken", seed: 30 });
  writeFileSync(join(broken, "onnx", "model.onnx"), "not an onnx file");
  // Two of the three fit (8.4 MiB each), not three.
  server = await startTestServer({
    modelsDir: models.path,
    engine: { kvBudgetBytes: KV_MB * MiB, memoryBudget: { bytes: 20 * MiB }, loadWaitMs: 1500, keepAliveMs: 60_000 },
  });
  client = new OpenAI({ apiKey: server.key, baseURL: `${server.url}/v1`, maxRetries: 0 });
}, 120_000);

afterAll(async () => {
  await server?.cleanup();
  models?.remove();
});

describe("residency", () => {
  test("GET /v1/models lists every model before any is loaded; nothing is loaded at start", async () => {
    expect((await client.models.list()).data.map((m) => m.id).sort()).toEqual(["res/a", "res/b", "res/broken", "res/c"]);
    expect(Object.values(await states())).toEqual(["unloaded", "unloaded", "unloaded", "unloaded"]);
  });

  test("a cold stream's first chunk comes after the load; its time to first token counts the load", async () => {
    const sent = Date.now();
    const stream = await client.chat.completions.create({ model: "res/a", messages: [{ role: "user", content: "hi" }], max_tokens: 3, stream: true });
    let first = 0;
    for await (const _ of stream) first ||= Date.now();
    const a = await state("res/a");
    expect(a.state).toBe("resident");
    expect(a.loadedAt!).toBeGreaterThanOrEqual(sent);
    expect(first).toBeGreaterThanOrEqual(a.loadedAt!);
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    const ttft = Number(/^sluice_time_to_first_token_seconds_sum\{model="res\/a"\} (\S+)/m.exec(metrics)![1]);
    expect(ttft * 1000).toBeGreaterThanOrEqual(a.lastLoadMs! * 0.9);
  }, 60_000);

  test("memory shown: weights are the ONNX file's size, memory is weights + KV budget, the budget's use is their sum", async () => {
    await ask("res/b");
    const s = await residency();
    const byId = new Map(s.models.map((m) => [m.model, m]));
    for (const id of ["res/a", "res/b"]) {
      const m = byId.get(id)!;
      const file = Bun.file(join(models.path, id, "onnx", "model.onnx")).size;
      expect(m).toMatchObject({ state: "resident", weightsBytes: file, kvBytes: KV_MB * MiB, bytes: file + KV_MB * MiB });
    }
    expect(s.budgetBytes).toBe(20 * MiB);
    expect(s.usedBytes).toBe(byId.get("res/a")!.bytes + byId.get("res/b")!.bytes);
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    expect(metrics).toContain(`sluice_memory_used_bytes ${s.usedBytes}`);
    expect(metrics).toContain(`sluice_model_memory_bytes{model="res/b"} ${byId.get("res/b")!.bytes}`);
    expect(metrics).toContain(`sluice_model_resident{model="res/c"} 0`);
    // The operator's command shows the same, through the control listener.
    const cli = await sluice("resident", "--json");
    expect(cli.code).toBe(0);
    expect((JSON.parse(cli.out) as ResidencySummary).usedBytes).toBe(s.usedBytes);
  });

  test("a request for the third model unloads the least recently used idle one", async () => {
    await ask("res/a"); // b is now the least recently used
    await ask("res/c");
    expect(await states()).toMatchObject({ "res/a": "resident", "res/b": "unloaded", "res/c": "resident" });
    expect((await state("res/b")).evictions).toBe(1);
  }, 60_000);

  test("a model streaming is never unloaded: the idle one goes, even when it was used later", async () => {
    const streaming = await holdStream("res/c"); // c is older than a now, but in use
    try {
      await ask("res/a");
      await ask("res/b");
      expect(await states()).toMatchObject({ "res/a": "unloaded", "res/b": "resident", "res/c": "resident" });
    } finally {
      streaming.close();
    }
  }, 60_000);

  test("when every loaded model is in use, the request waits up to the bound, then 503 with Retry-After; it loads once one is free", async () => {
    const b = await holdStream("res/b");
    const c = await holdStream("res/c");
    let closed = false;
    try {
      const res = await fetch(`${server.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${server.key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "res/a", messages: [{ role: "user", content: "hi" }], max_tokens: 2 }),
      });
      expect(res.status).toBe(503);
      expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
      const body = (await res.json()) as { error: { code: string; message: string } };
      expect(body.error.code).toBe("insufficient_memory");
      expect(body.error.message).toContain("res/b (1 in flight)");
      // Within the bound: c's stream ends while a waits, and a loads in its place.
      const waiting = ask("res/a");
      await Bun.sleep(200);
      c.close();
      closed = true;
      await waiting;
      expect(await states()).toMatchObject({ "res/a": "resident", "res/b": "resident", "res/c": "unloaded" });
    } finally {
      b.close();
      if (!closed) c.close();
    }
  }, 60_000);

  test("a pinned model (keep-alive -1) is never unloaded for another", async () => {
    await server.store.catalog.setKeepAlive("res/a", -1);
    await until("the pin to be seen", async () => (await state("res/a")).keepAliveMs === -1);
    await ask("res/b"); // a is now the least recently used, but pinned
    await ask("res/c");
    expect(await states()).toMatchObject({ "res/a": "resident", "res/b": "unloaded", "res/c": "resident" });
    await server.store.catalog.setKeepAlive("res/a", null);
  }, 60_000);

  test("an idle model unloads after its keep-alive", async () => {
    await server.store.catalog.setKeepAlive("res/c", 1);
    await until("res/c to unload after 1 s idle", async () => (await state("res/c")).state === "unloaded");
    expect((await state("res/c")).evictions).toBe(1); // its earlier eviction; expiry is not one
    await server.store.catalog.setKeepAlive("res/c", null);
  }, 30_000);

  test("a load failure is a clear 503; the model leaves the catalog and the others keep serving", async () => {
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${server.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "res/broken", messages: [{ role: "user", content: "hi" }], max_tokens: 2 }),
    });
    expect(res.status).toBe(503);
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("model_load_failed");
    expect(body.error.message).toMatch(/^The model res\/broken could not be loaded: .+/);
    await until("the catalog to leave it out", async () => !(await client.models.list()).data.some((m) => m.id === "res/broken"));
    expect((await server.store.catalog.get("res/broken"))!.loadError).toContain("failed to load");
    expect((await ask("res/b")).choices[0]!.message.content).toBeString();
    expect((await state("res/broken")).lastError).toBeTruthy();
  }, 60_000);

  test("a model unloaded as soon as its cancelled stream ends, ten times over: its worker ends only once its native calls are done, and the server keeps serving", async () => {
    // Keep-alive 0: each cancelled stream's end unloads the model at once, while the next request
    // is already waiting to load it again. A worker terminated inside an ONNX Runtime run would
    // abort this whole process (the server runs in it).
    await server.store.catalog.setKeepAlive("res/b", 0);
    await until("keep-alive 0 to be seen", async () => (await state("res/b")).keepAliveMs === 0);
    const loadsBefore = (await state("res/b")).loads;
    for (let i = 0; i < 10; i++) {
      const s = await holdStream("res/b");
      s.close();
      // Every other time the next request comes only once the unload has begun; else at once.
      if (i % 2 === 0) await until("res/b to start unloading", async () => (await state("res/b")).state !== "resident");
    }
    expect((await ask("res/b")).choices[0]!.message.content).toBeString();
    await until("res/b to unload after its last request", async () => (await state("res/b")).state === "unloaded");
    expect((await state("res/b")).loads).toBeGreaterThanOrEqual(loadsBefore + 5);
    await server.store.catalog.setKeepAlive("res/b", null);
    expect((await ask("res/a")).choices[0]!.message.content).toBeString();
  }, 120_000);

  test("models load and unload through the running server's control listener", async () => {
    const loaded = await sluice("load", "res/c", "--json");
    expect(loaded.code).toBe(0);
    expect((JSON.parse(loaded.out) as ModelResidency).state).toBe("resident");
    const unloaded = await sluice("unload", "res/c");
    expect(unloaded.code).toBe(0);
    expect(unloaded.out.trim()).toBe("unloaded res/c; it loads again on its next request");
    expect((await state("res/c")).state).toBe("unloaded");
    const unknown = await sluice("load", "res/none");
    expect(unknown.code).toBe(1);
    expect(unknown.err).toContain("no model res/none");
  }, 60_000);
});
