// Under load and client faults: 200 concurrent streams with random aborts leave no sequence running
// and KV use back at its baseline, every request recorded; 10,000 sequential requests do not grow
// the process's memory (generous bounds: this checks for leaks, not performance).
import { afterAll, beforeAll, expect, test } from "bun:test";
import { heapStats } from "bun:jsc";
import { startHarness, type Harness } from "./harness.ts";

let h: Harness;
beforeAll(async () => {
  // Room for all 200 in the engine's queue: this is about cleanup, not about refusing when busy.
  h = await startHarness({}, { maxQueue: 256 });
});
afterAll(() => h.cleanup());

const stats = () => h.engine.stats!().models[0]!;

async function settled(): Promise<ReturnType<typeof stats>> {
  for (let i = 0; i < 500; i++) {
    const s = stats();
    if (s.runningSequences === 0 && s.runningRequests === 0 && s.queuedRequests === 0) return s;
    await Bun.sleep(20);
  }
  return stats();
}

/** Reads a stream's body until its `n`th chunk has come, then aborts it: the generation is running then. */
async function abortAfterChunks(res: Response, abort: AbortController, n: number): Promise<void> {
  const reader = res.body!.getReader();
  for (let i = 0; i < n; i++) if ((await reader.read()).done) return;
  abort.abort();
  await reader.cancel().catch(() => {});
}

test("200 concurrent streams, a third aborted at random points: nothing left running, KV at baseline, all recorded", async () => {
  // Warm up so the prefix cache and engine stats exist before the baseline is read.
  await (await h.chat({ max_tokens: 2, stream: true })).text();
  const baseline = (await settled()).kvUsedBytes - stats().prefixCacheBytes;
  const before = await h.store.usage.countAll();
  let seed = 12345;
  const rand = () => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff);
  // Aborts at random times (before the request reaches the engine, or during it, or after it),
  // and aborts after a stream's first chunks, counted: those always end a running generation, so
  // they leave a cancelled row however busy the machine is (their max_tokens outlasts the abort).
  const midStream = new Set<string>();
  const outcomes = await Promise.all(
    Array.from({ length: 200 }, async (_, i) => {
      const abort = new AbortController();
      const r = rand();
      const abortAfterMs = r < 0.17 ? Math.floor(rand() * 40) : -1;
      const abortAfterChunk = r >= 0.17 && r < 0.33 ? 1 + Math.floor(rand() * 3) : 0;
      if (abortAfterMs >= 0) setTimeout(() => abort.abort(), abortAfterMs);
      const id = `c-${i}`;
      try {
        const res = await h.chat(
          { max_tokens: abortAfterChunk ? 1500 : 1 + (i % 24), stream: true, logit_bias: h.noEos, messages: [{ role: "user", content: `req ${i} ${"y".repeat(i % 50)}` }] },
          { "x-request-id": id },
          abort.signal,
        );
        if (res.status !== 200) return `status ${res.status}`;
        if (abortAfterChunk) {
          midStream.add(id);
          await abortAfterChunks(res, abort, abortAfterChunk);
          return "aborted";
        }
        const text = await res.text();
        return text.trimEnd().endsWith("data: [DONE]") ? "done" : "truncated";
      } catch {
        return "aborted";
      }
    }),
  );
  const counts = outcomes.reduce<Record<string, number>>((m, o) => ((m[o] = (m[o] ?? 0) + 1), m), {});
  expect(Object.keys(counts).filter((k) => k !== "done" && k !== "aborted")).toEqual([]);
  expect(counts.done).toBeGreaterThan(100);
  expect(counts.aborted).toBeGreaterThan(5);
  expect(midStream.size).toBeGreaterThan(5);
  const s = await settled();
  expect(s.runningSequences).toBe(0);
  expect(s.runningRequests).toBe(0);
  expect(s.queuedRequests).toBe(0);
  // Only the prefix cache may hold KV memory now, as before the burst.
  expect(s.kvUsedBytes - s.prefixCacheBytes).toBe(baseline);
  // Every request that reached the engine left exactly one usage row (aborted ones as cancelled).
  const expected = (counts.done ?? 0) + midStream.size;
  for (let i = 0; i < 250 && (await h.store.usage.countAll()) - before < expected; i++) await Bun.sleep(20);
  const rows = (await h.store.usage.list((await h.store.accounts.get("local"))!.id, { limit: 1000 })).filter((r) => r.requestId.startsWith("c-"));
  expect(new Set(rows.map((r) => r.requestId)).size).toBe(rows.length);
  const statuses = rows.reduce<Record<string, number>>((m, r) => ((m[r.status] = (m[r.status] ?? 0) + 1), m), {});
  // A client may abort after the last byte left the server: then its row says ok.
  expect(statuses.ok).toBeGreaterThanOrEqual(counts.done!);
  expect(Object.keys(statuses).sort()).toEqual(["cancelled", "ok"]);
  // Each stream aborted mid-generation is recorded as cancelled.
  expect(rows.filter((r) => midStream.has(r.requestId)).map((r) => `${r.requestId} ${r.status}`).sort()).toEqual([...midStream].map((id) => `${id} cancelled`).sort());
}, 120_000);

test("10,000 sequential requests (/v1/models and tiny chats): no memory growth", async () => {
  const run = async (n: number) => {
    for (let i = 0; i < n; i++) {
      if (i % 10 === 0) {
        const res = await h.chat({ max_tokens: 1 + (i % 4), stream: i % 20 === 0 });
        expect(res.status).toBe(200);
        await res.text();
      } else {
        const res = await fetch(`${h.url}/v1/models`, { headers: h.headers });
        expect(res.status).toBe(200);
        await res.arrayBuffer();
      }
    }
  };
  await run(1000);
  Bun.gc(true);
  const rss0 = process.memoryUsage().rss;
  const heap0 = heapStats().heapSize;
  await run(9000);
  Bun.gc(true);
  const rssGrowth = process.memoryUsage().rss - rss0;
  const heapGrowth = heapStats().heapSize - heap0;
  console.log(`10,000 requests: RSS ${(rssGrowth / 2 ** 20).toFixed(1)} MiB, JS heap ${(heapGrowth / 2 ** 20).toFixed(1)} MiB growth`);
  // A leak of even 4 KiB per request would show as ~36 MiB.
  expect(heapGrowth).toBeLessThan(16 * 2 ** 20);
  expect(rssGrowth).toBeLessThan(64 * 2 ** 20);
  expect((await settled()).runningSequences).toBe(0);
}, 120_000);
