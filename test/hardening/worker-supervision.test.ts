// A model's worker thread that dies or hangs takes no one down with it: its clients get an error
// (a 503 naming the model, or a final SSE error event), the worker is started again and the model
// serves within seconds, every request keeps its usage row; a worker that keeps dying makes the
// model unavailable (503, /metrics, the log, `sluice doctor`) instead of hanging. And what used to
// kill a worker (a state where nothing may be sampled) now ends only its own request.
import { afterEach, expect, test } from "bun:test";
import { join } from "node:path";
import type { WorkerEngine } from "../../src/engine/host.ts";
import { TextTokenizer } from "../../src/engine/text/tokenizer.ts";
import { doctorReport } from "../../src/cli/doctor.ts";
import { syntheticModel, tinyModelsRoot } from "../helpers/models.ts";
import { tempDir } from "../helpers/paths.ts";
import { spawnServe } from "../helpers/serve-process.ts";
import { readSse, startHarness, type Harness } from "./harness.ts";

const supervision = { crashLoopCrashes: 3, crashLoopWindowMs: 60_000, unavailableMs: 1500, stallMs: 1500 };
let h: Harness | null = null;
afterEach(async () => {
  await h?.cleanup();
  h = null;
});

const engineOf = (x: Harness) => x.engine as WorkerEngine;
const state = (x: Harness) => engineOf(x).health().find((w) => w.model === x.model)!.state;

async function until(what: string, ok: () => boolean | Promise<boolean>, ms = 15_000) {
  const t0 = performance.now();
  while (!(await ok())) {
    if (performance.now() - t0 > ms) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(25);
  }
}

/** The model answers a small request again; how long that took. */
async function servesAgain(x: Harness): Promise<number> {
  const t0 = performance.now();
  for (;;) {
    const r = await x.chat({ max_tokens: 2 });
    if (r.status === 200) return performance.now() - t0;
    expect(r.status).toBe(503);
    expect(r.headers.get("retry-after")).toMatch(/^\d+$/);
    await r.text();
    if (performance.now() - t0 > 15_000) throw new Error("the model did not serve again");
    await Bun.sleep(50);
  }
}

const usage = async (x: Harness, prefix: string) =>
  (await x.store.usage.list((await x.store.accounts.get("local"))!.id, { limit: 1000 })).filter((r) => r.requestId.startsWith(prefix));

test("a worker killed mid-stream: clients get an error, the model serves again, every request keeps its usage row", async () => {
  h = await startHarness({}, { supervision });
  // Long generations (n choices up to the context each), so they are still running at the kill.
  const long = { max_tokens: 2000, n: 8, logit_bias: h.noEos };
  const streams = await Promise.all([0, 1, 2].map((i) => h!.chat({ ...long, stream: true }, { "x-request-id": `kill-s${i}` })));
  const whole = h.chat(long, { "x-request-id": "kill-w" });
  const readers = streams.map((r) => r.body!.getReader());
  // Each stream has produced content: it is generating now.
  for (const r of readers) {
    let got = "";
    while (!/"content":"[^"]/.test(got)) got += new TextDecoder().decode((await r.read()).value);
  }
  await until("the requests to be running", () => (engineOf(h!).stats().models[0]?.runningRequests ?? 0) >= 4);
  engineOf(h).killWorker(h.model);

  for (const r of readers) {
    let text = "";
    for (let c = await r.read(); !c.done; c = await r.read()) text += new TextDecoder().decode(c.value);
    expect(text).not.toContain("data: [DONE]");
    const last = JSON.parse(text.trim().split("\n\n").at(-1)!.slice(6)) as { error: { type: string; code: string; message: string } };
    expect(last.error.type).toBe("service_unavailable");
    expect(last.error.code).toBe("model_unavailable");
    expect(last.error.message).toContain(h.model);
  }
  const w = await whole;
  expect(w.status).toBe(503);
  expect(w.headers.get("retry-after")).toMatch(/^\d+$/);
  const body = (await w.json()) as { error: { code: string; message: string } };
  expect(body.error.code).toBe("model_unavailable");
  expect(body.error.message).toContain("restarted");

  expect(await servesAgain(h)).toBeLessThan(10_000);
  const rows = await usage(h, "kill-");
  expect(rows.map((r) => r.requestId).sort()).toEqual(["kill-s0", "kill-s1", "kill-s2", "kill-w"]);
  for (const r of rows) expect(r.status).toBe("error");
  expect(h.logs.some((l) => l.msg === "model worker crashed" && l.model === h!.model)).toBe(true);
  const metrics = await (await fetch(`${h.url}/metrics`)).text();
  expect(metrics).toContain(`sluice_model_worker_crashes_total{model="${h.model}"} 1`);
  expect(metrics).toContain(`sluice_model_worker_restarts_total{model="${h.model}"} 1`);
  expect(metrics).toContain(`sluice_model_available{model="${h.model}"} 1`);
}, 60_000);

test("a crash loop makes the model unavailable (503 naming it, /metrics, log, doctor), then it is tried again", async () => {
  h = await startHarness({}, { supervision });
  const x = h;
  for (let i = 0; i < supervision.crashLoopCrashes; i++) {
    await until("the worker to be up", () => state(x) === "ready");
    engineOf(x).killWorker(x.model);
    await until("the crash to be seen", () => state(x) !== "ready");
  }
  expect(state(x)).toBe("unavailable");
  const r = await x.chat({ max_tokens: 2 });
  expect(r.status).toBe(503);
  expect(Number(r.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
  const err = ((await r.json()) as { error: { message: string; code: string } }).error;
  expect(err.code).toBe("model_unavailable");
  expect(err.message).toContain(`The model ${x.model} is unavailable`);
  const metrics = await (await fetch(`${x.url}/metrics`)).text();
  expect(metrics).toContain(`sluice_model_available{model="${x.model}"} 0`);
  expect(metrics).toContain(`sluice_model_crash_loop{model="${x.model}"} 1`);
  expect(x.logs.some((l) => String(l.msg).startsWith("model worker crash loop") && l.model === x.model)).toBe(true);
  const doctor = doctorReport({ dataDir: x.dataDir, modelsDir: x.dataDir, device: "cpu", binding: "capi" });
  expect(doctor.lines.some((l) => l.includes(`${x.model}: UNAVAILABLE (crash loop`))).toBe(true);
  expect(doctor.ok).toBe(false);
  // After the pause the worker is started again.
  expect(await servesAgain(x)).toBeLessThan(10_000);
  expect(state(x)).toBe("ready");
  expect(doctorReport({ dataDir: x.dataDir, modelsDir: x.dataDir, device: "cpu", binding: "capi" }).lines.some((l) => l.includes(`${x.model}: ready; 3 crashes`))).toBe(true);
}, 60_000);

test("a worker that stops answering while a request waits is restarted; the request gets a 503, not a hang", async () => {
  h = await startHarness({}, { supervision, testHooks: true });
  engineOf(h).blockWorker(h.model, 30_000);
  const t0 = performance.now();
  const r = await h.chat({ max_tokens: 2 });
  expect(r.status).toBe(503);
  expect(((await r.json()) as { error: { message: string } }).error.message).toContain("stopped responding");
  expect(performance.now() - t0).toBeLessThan(supervision.stallMs + 3000);
  expect(await servesAgain(h)).toBeLessThan(10_000);
}, 60_000);

test("logit_bias that bans every token is a 400 up front; a grammar and logit_bias that leave nothing end only that request", async () => {
  // A generous compile time: json_object's budget tables, computed here for the request if the
  // model's own are not done yet, took more than the default second of CPU on a loaded machine.
  h = await startHarness({}, { compileLimits: { maxMillis: 60_000 } });
  const dir = await syntheticModel(tinyModelsRoot(), "hardening-tiny", { preset: "tiny-bytes", seed: 5, id: h.model });
  const tok = TextTokenizer.load(dir);
  const all = Object.fromEntries(Array.from({ length: tok.vocabSize }, (_, i) => [i, -100]));
  const banned = await h.chat({ max_tokens: 4, logit_bias: all });
  expect(banned.status).toBe(400);
  const e1 = ((await banned.json()) as { error: { param: string; message: string } }).error;
  expect(e1.param).toBe("logit_bias");
  expect(e1.message).toContain("bans all");
  // JSON must open with "{" or whitespace: allow only "x".
  const onlyX = { ...all, [tok.tokenToId("x")!]: 0 };
  const whole = await h.chat({ max_tokens: 4, logit_bias: onlyX, response_format: { type: "json_object" } });
  expect(whole.status).toBe(400);
  const e2 = ((await whole.json()) as { error: { code: string; message: string } }).error;
  expect(e2.code).toBe("no_allowed_token");
  expect(e2.message).toContain("choice 0");
  const streamed = await h.chat({ max_tokens: 4, logit_bias: onlyX, response_format: { type: "json_object" }, stream: true });
  expect(streamed.status).toBe(200);
  const { events, done } = await readSse(streamed);
  expect(done).toBe(false);
  expect((events.at(-1) as { error: { code: string } }).error.code).toBe("no_allowed_token");
  // The worker is the same one, and fine.
  expect((await h.chat({ max_tokens: 2 })).status).toBe(200);
  expect(engineOf(h).health()[0]!.crashes).toBe(0);
}, 60_000);

test("a server suspended (SIGSTOP) longer than the stall limit resumes its streams: no worker is restarted for the pause", async () => {
  const models = tempDir("sluice-suspend-models-");
  const data = tempDir("sluice-suspend-data-");
  await syntheticModel(models.path, "suspend", { preset: "tiny-bytes", seed: 4, id: "suspend/tiny" });
  // A stall limit of 3 s, not 1: on a loaded machine a worker starved of CPU for a second was
  // (rightly) restarted, which is not what this test is about.
  const server = await spawnServe(["--data", data.path, "--models", models.path, "--no-demo", "--device", "cpu", "--worker-stall-seconds", "3"]);
  try {
    const headers = { authorization: `Bearer ${server.key}`, "content-type": "application/json" };
    const noEos = Object.fromEntries(TextTokenizer.load(join(models.path, "suspend")).eosTokenIds.map((id) => [id, -100]));
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers,
      body: JSON.stringify({ model: "suspend/tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 3000, logit_bias: noEos, stream: true }),
    });
    const reader = res.body!.getReader();
    let text = new TextDecoder().decode((await reader.read()).value);
    // Mid-stream, the whole process stops for twice the stall limit, then goes on.
    process.kill(server.proc.pid, "SIGSTOP");
    await Bun.sleep(6000);
    process.kill(server.proc.pid, "SIGCONT");
    for (let c = await reader.read(); !c.done; c = await reader.read()) text += new TextDecoder().decode(c.value);
    // The end of the stream, whole in a failure's message.
    expect(text.trim().slice(-300)).toEndWith("data: [DONE]");
    expect(text).toContain('"finish_reason":"length"');
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    expect(metrics).toMatch(/sluice_model_worker_restarts_total\{model="suspend\/tiny"\} 0/);
  } finally {
    await server.stop();
    models.remove();
    data.remove();
  }
}, 60_000);
