// Per-request limits set by the operator: number of messages, a max_tokens cap, a wall-time limit
// (ended with finish_reason "length" and recorded), and idle streams (cut off, generation freed).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createApi } from "../../src/api/app.ts";
import { silentLogger } from "../../src/log.ts";
import { readSse, startHarness, type Harness } from "./harness.ts";

let h: Harness;
beforeAll(async () => {
  // No wall-time limit here: the capped request must make its 8 tokens however busy the machine
  // (with 300 ms, a full suite on two cores once ended it early); "wall time" below has its own server.
  h = await startHarness({ maxMessages: 3, maxTokensCap: 8, streamIdleMs: 60_000 });
});
afterAll(() => h.cleanup());

const usageRow = async (requestId: string) => (await h.store.usage.list((await h.store.accounts.get("local"))!.id)).find((r) => r.requestId === requestId);

async function waitFor<T>(f: () => Promise<T | undefined | null>, ms = 5000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() > end) throw new Error("timed out waiting");
    await Bun.sleep(20);
  }
}

describe("request shape", () => {
  test("more messages than --max-messages: 400 too_many_messages naming the param", async () => {
    const messages = Array.from({ length: 4 }, (_, i) => ({ role: "user", content: `m${i}` }));
    const res = await h.chat({ messages });
    expect(res.status).toBe(400);
    const { error } = (await res.json()) as { error: { code: string; param: string; message: string } };
    expect(error).toMatchObject({ code: "too_many_messages", param: "messages" });
    expect(error.message).toContain("at most 3");
  });

  test("max_tokens above --max-tokens-cap: 400; no max_tokens: the cap bounds the generation", async () => {
    const over = await h.chat({ max_tokens: 9 });
    expect(over.status).toBe(400);
    expect(((await over.json()) as { error: { code: string; param: string } }).error).toMatchObject({ code: "max_tokens_too_large", param: "max_tokens" });
    const capped = await h.chat({ logit_bias: h.noEos });
    expect(capped.status).toBe(200);
    const body = (await capped.json()) as { usage: { completion_tokens: number }; choices: { finish_reason: string }[] };
    expect(body.usage.completion_tokens).toBe(8);
    expect(body.choices[0]!.finish_reason).toBe("length");
  });
});

describe("wall time", () => {
  // The cap of 8 tokens would end these first; a second server without a cap runs long enough.
  let long: Harness;
  beforeAll(async () => {
    long = await startHarness({ maxGenerationMs: 300 });
  });
  afterAll(() => long.cleanup());

  test("a stream running past --max-generation-seconds ends with finish_reason length and is recorded", async () => {
    const res = await long.chat({ max_tokens: 1_000_000, stream: true, stream_options: { include_usage: true }, logit_bias: long.noEos }, { "x-request-id": "wall-1" });
    const started = performance.now();
    const { events, done } = await readSse(res);
    expect(performance.now() - started).toBeLessThan(10_000);
    expect(done).toBe(true);
    const finishes = events.flatMap((e) => ((e.choices as { finish_reason: string | null }[]) ?? []).map((c) => c.finish_reason)).filter(Boolean);
    expect(finishes).toEqual(["length"]);
    const usage = events.find((e) => e.usage && (e.choices as unknown[]).length === 0)!.usage as { completion_tokens: number };
    expect(usage.completion_tokens).toBeGreaterThan(0);
    const row = await waitFor(async () => (await long.store.usage.list((await long.store.accounts.get("local"))!.id)).find((r) => r.requestId === "wall-1"));
    expect(row.status).toBe("time_limit");
    expect(row.finishReason).toBe("length");
    expect(row.completionTokens).toBe(usage.completion_tokens);
  });

  test("a whole (non-streamed) answer too", async () => {
    const res = await long.chat({ max_tokens: 1_000_000, logit_bias: long.noEos }, { "x-request-id": "wall-2" });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { choices: { finish_reason: string }[]; usage: { completion_tokens: number } };
    expect(body.choices[0]!.finish_reason).toBe("length");
    expect(body.usage.completion_tokens).toBeGreaterThan(0);
    const row = await waitFor(async () => (await long.store.usage.list((await long.store.accounts.get("local"))!.id)).find((r) => r.requestId === "wall-2"));
    expect(row.status).toBe("time_limit");
  });
});

test("a stream whose client stops reading is cut off after --stream-idle-seconds; its sequence is freed", async () => {
  // The app answered in-process: no socket buffers between it and this reader, so "stops reading" is exact.
  const api = createApi({ store: h.store, engine: h.engine, log: silentLogger(), ready: () => true, version: "test", limits: { streamIdleMs: 300, maxTokensCap: 0, maxGenerationMs: 0 } });
  const res = await api.handle(
    new Request("http://localhost/v1/chat/completions", {
      method: "POST",
      headers: { ...h.headers, "x-request-id": "idle-1" },
      body: JSON.stringify({ model: h.model, messages: [{ role: "user", content: "x" }], max_tokens: 1_000_000, stream: true, logit_bias: h.noEos }),
    }),
  );
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  await reader.read();
  await reader.read();
  // Stop reading. The generation must end and free its sequence without any read from us.
  const row = await waitFor(() => usageRow("idle-1"), 10_000);
  expect(row.status).toBe("idle_timeout");
  expect(row.completionTokens).toBeGreaterThan(0);
  const stats = await waitFor(async () => {
    const s = h.engine.stats?.().models[0];
    return s && s.runningSequences === 0 ? s : null;
  });
  expect(stats.runningRequests).toBe(0);
  // What the reader sees next: at most the chunk already queued, then the error.
  let failed = false;
  try {
    for (let i = 0; i < 3; i++) if ((await reader.read()).done) break;
  } catch {
    failed = true;
  }
  expect(failed).toBe(true);
});
