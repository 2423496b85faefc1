// Graceful shutdown: /ready turns false, new work is refused, a running stream ends cleanly at the
// deadline with its usage recorded, and the database is closed.
import { expect, test } from "bun:test";
import { join } from "node:path";
import { TextTokenizer } from "../../src/engine/text/tokenizer.ts";
import { openSqliteStore } from "../../src/store/index.ts";
import { syntheticModel, tinyModelsRoot } from "../helpers/models.ts";
import { tempDir } from "../helpers/paths.ts";
import { startTestServer } from "../helpers/server.ts";
import type { WorkerEngine } from "../../src/engine/host.ts";
import { startHarness } from "../hardening/harness.ts";

test("stop(): drain to the deadline, end streams with [DONE], record usage, close the store", async () => {
  const models = tempDir("sluice-shutdown-");
  const dir = await syntheticModel(models.path, "m", { preset: "tiny-bytes", seed: 9, id: "t/m" });
  const noEos = Object.fromEntries(TextTokenizer.load(dir).eosTokenIds.map((id) => [id, -100]));
  const server = await startTestServer({ modelsDir: models.path });
  const headers = { authorization: `Bearer ${server.key}`, "content-type": "application/json" };
  try {
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { ...headers, "x-request-id": "long-1" },
      body: JSON.stringify({ model: "t/m", messages: [{ role: "user", content: "x" }], max_tokens: 100000, stream: true, stream_options: { include_usage: true }, logit_bias: noEos }),
    });
    const reader = res.body!.getReader();
    let text = new TextDecoder().decode((await reader.read()).value);
    const stopping = server.stop(400);
    await Bun.sleep(50);
    expect((await fetch(`${server.url}/ready`)).status).toBe(503);
    const refused = await fetch(`${server.url}/v1/chat/completions`, { method: "POST", headers, body: JSON.stringify({ model: "t/m", messages: [{ role: "user", content: "y" }] }) });
    expect(refused.status).toBe(503);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("shutting_down");
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    await stopping;
    expect(text.trimEnd().endsWith("data: [DONE]")).toBe(true);
    expect(text).toContain('"usage":{"prompt_tokens"');
    const store = openSqliteStore(join(server.dataDir, "sluice.db"));
    const row = (await store.usage.list((await store.accounts.get("local"))!.id)).find((r) => r.requestId === "long-1");
    store.close();
    expect(row?.status).toBe("interrupted");
    expect(row!.completionTokens).toBeGreaterThan(0);
    expect((await server.store.healthy())).toBe(false);
    // Stopped again (cleanup stops it too): quietly, without Elysia's "isn't running" and a stack trace.
    const printed: string[] = [];
    const log = console.log;
    console.log = (...args: unknown[]) => void printed.push(args.map(String).join(" "));
    try {
      await server.cleanup();
    } finally {
      console.log = log;
    }
    expect(printed).toEqual([]);
  } finally {
    await server.cleanup().catch(() => {});
    models.remove();
  }
});

test("stop() while a model's worker is stuck: the waiting request gets a 503 and the stream a final error event", async () => {
  // The stall check must not rescue the worker first: this is about shutdown alone.
  const h = await startHarness({}, { testHooks: true, supervision: { stallMs: 600_000 } });
  let stopped = false;
  try {
    const res = await h.chat({ max_tokens: 100000, stream: true, logit_bias: h.noEos }, { "x-request-id": "stuck-stream" });
    const reader = res.body!.getReader();
    let text = "";
    while (!/"content":"[^"]/.test(text)) {
      const c = await reader.read();
      if (c.done) throw new Error(`the stream (${res.status}) ended before its first content: ${text}`);
      text += new TextDecoder().decode(c.value);
    }
    (h.engine as WorkerEngine).blockWorker(h.model, 20_000);
    const waiting = h.chat({ max_tokens: 4 }, { "x-request-id": "stuck-waiting" });
    await Bun.sleep(300);
    const t0 = performance.now();
    const stopping = h.stop(300);
    const w = await waiting;
    expect(w.status).toBe(503);
    expect(((await w.json()) as { error: { code: string } }).error.code).toBe("model_unavailable");
    for (let c = await reader.read(); !c.done; c = await reader.read()) text += new TextDecoder().decode(c.value);
    const last = JSON.parse(text.trim().split("\n\n").at(-1)!.slice(6)) as { error: { type: string; message: string } };
    expect(last.error.type).toBe("service_unavailable");
    expect(last.error.message).toContain("shutting down");
    await stopping;
    stopped = true;
    expect(performance.now() - t0).toBeLessThan(15_000);
    // Both were recorded before the database closed.
    const store = openSqliteStore(join(h.dataDir, "sluice.db"));
    const rows = (await store.usage.list((await store.accounts.get("local"))!.id)).filter((r) => r.requestId.startsWith("stuck-"));
    await store.close();
    expect(rows.map((r) => r.requestId).sort()).toEqual(["stuck-stream"]);
  } finally {
    if (!stopped) await h.stop(100);
    await h.cleanup().catch(() => {});
  }
}, 60_000);
