// A collector that is not there, or that takes connections and never answers: requests are
// answered as ever, and the spans that cannot go out are dropped and counted in /metrics, as
// export_failed (refused at once) or queue_full (the one export in flight hangs while the queue
// fills); a collector that fails exports is left alone a while after each failure. That it costs
// a request nothing measurable is bench/tracing.ts's to show.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { linkCachedModel } from "../helpers/models.ts";
import { tempDir } from "../helpers/paths.ts";
import { startTestServer, type TestServer } from "../helpers/server.ts";
import { closedPort } from "../helpers/otlp-receiver.ts";

const MODEL = "synthetic/dead-collector";
let models: ReturnType<typeof tempDir>;
let refused: TestServer;
let hanging: TestServer;
let failing: TestServer;
const silent = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
/** A collector that refuses every export with a 400 (not retried), counting them. */
let refusedExports = 0;
const refusing = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  async fetch(req) {
    await req.arrayBuffer();
    refusedExports++;
    return new Response("no", { status: 400 });
  },
});


// A small queue, so that it fills within a few requests; an export that gives up within a second.
const batch = { scheduledDelayMillis: 10, maxQueueSize: 16, maxExportBatchSize: 8 };

beforeAll(async () => {
  models = tempDir("sluice-dead-collector-");
  await linkCachedModel(models.path, "bytes", { preset: "tiny-bytes", seed: 5, id: MODEL });
  refused = await startTestServer({ modelsDir: models.path, tracing: { endpoint: `http://127.0.0.1:${closedPort()}`, batch, exportTimeoutMs: 800 } });
  hanging = await startTestServer({ modelsDir: models.path, tracing: { endpoint: `http://127.0.0.1:${silent.port}`, batch, exportTimeoutMs: 6000 } });
  failing = await startTestServer({ modelsDir: models.path, tracing: { endpoint: `http://127.0.0.1:${refusing.port}`, batch, exportTimeoutMs: 1500 } });
}, 120_000);

afterAll(async () => {
  await refused?.cleanup();
  await hanging?.cleanup();
  await failing?.cleanup();
  silent.stop(true);
  refusing.stop(true);
  models?.remove();
});

async function spans(server: TestServer): Promise<{ queueFull: number; exportFailed: number; exported: number }> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  const v = (series: string) => Number(text.split("\n").find((l) => l.startsWith(`${series} `))?.slice(series.length + 1) ?? NaN);
  return {
    queueFull: v('sluice_trace_spans_dropped_total{reason="queue_full"}'),
    exportFailed: v('sluice_trace_spans_dropped_total{reason="export_failed"}'),
    exported: v("sluice_trace_spans_exported_total"),
  };
}

/** 12 requests, streamed and whole, each answered in full with its trace id. */
async function traffic(server: TestServer): Promise<void> {
  for (let i = 0; i < 12; i++) {
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${server.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: `hello ${i}` }], max_tokens: 3, stream: i % 2 === 0 }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-trace-id")).toMatch(/^[0-9a-f]{32}$/);
    expect(await res.text()).toContain(i % 2 === 0 ? "[DONE]" : '"finish_reason"');
  }
}

/** Polls until `ok` holds of the server's counts (within 20 s). */
async function until(server: TestServer, ok: (c: Awaited<ReturnType<typeof spans>>) => boolean) {
  const deadline = Date.now() + 20_000;
  let c = await spans(server);
  while (!ok(c) && Date.now() < deadline) {
    await Bun.sleep(50);
    c = await spans(server);
  }
  return c;
}

describe("a collector that is away", () => {
  test("refusing connections: every request is answered, and every span is counted as a failed export", async () => {
    expect(await spans(refused)).toEqual({ queueFull: 0, exportFailed: 0, exported: 0 });
    await traffic(refused);
    // 12 requests of 8 spans or more each: all of them end up counted.
    const c = await until(refused, (c) => c.exportFailed + c.queueFull >= 12 * 8);
    expect(c.exportFailed).toBeGreaterThan(0);
    expect(c.exportFailed + c.queueFull).toBeGreaterThanOrEqual(12 * 8);
    expect(c.exported).toBe(0);
    expect(refused.tracing!.spanCounts()).toEqual({ exported: 0, droppedQueueFull: c.queueFull, droppedExportFailed: c.exportFailed });
  }, 60_000);

  test("taking connections and never answering: every request is answered; spans find the queue full, the hung export fails", async () => {
    await traffic(hanging);
    // One export hangs with its batch of 8; the queue holds 16 more; the rest are dropped on arrival.
    const c = await spans(hanging);
    expect(c.queueFull).toBeGreaterThanOrEqual(12 * 8 - 16 - 8);
    expect(c.exported).toBe(0);
    const later = await until(hanging, (c) => c.exportFailed > 0);
    expect(later.exportFailed).toBeGreaterThan(0);
  }, 60_000);

  test("failing every export: after a failure the collector is left alone a while, its batches dropped without a request", async () => {
    const t0 = Date.now();
    await traffic(failing);
    const c = await until(failing, (c) => c.exportFailed + c.queueFull >= 12 * 8);
    // Without the pause, each of the dozen batches of 8 was a request to the collector. A pause
    // of 1 s, doubling, allows one at the start and one per pause since.
    const seconds = (Date.now() - t0) / 1000;
    expect(refusedExports).toBeGreaterThanOrEqual(1);
    expect(refusedExports).toBeLessThanOrEqual(1 + Math.ceil(Math.log2(seconds + 1)));
    expect(c.exportFailed).toBeGreaterThan(12 * 8 - 16 - 8);
    expect(c.exported).toBe(0);
  }, 60_000);
});
