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

test("200 concurrent streams, a third aborted at random points: nothing left running, KV at baseline, all recorded", async () => {
  // Warm up so the prefix cache and engine stats exist before the baseline is read.
  await (await h.chat({ max_tokens: 2, stream: true })).text();
  const baseline = (await settled()).kvUsedBytes - stats().prefixCacheBytes;
  const before = await h.store.usage.countAll();
  let seed = 12345;
  const rand = () => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff);
  const outcomes = await Promise.all(
    Array.from({ length: 200 }, async (_, i) => {
      const abort = new AbortController();
      const abortAfter = rand() < 0.33 ? Math.floor(rand() * 40) : -1;
      if (abortAfter >= 0) setTimeout(() => abort.abort(), abortAfter);
      try {
        const res = await h.chat(
          { max_tokens: 1 + (i % 24), stream: true, logit_bias: h.noEos, messages: [{ role: "user", content: `req ${i} ${"y".repeat(i % 50)}` }] },
          { "x-request-id": `c-${i}` },
          abort.signal,
        );
        if (res.status !== 200) return `status ${res.status}`;
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
  const s = await settled();
  expect(s.runningSequences).toBe(0);
  expect(s.runningRequests).toBe(0);
  expect(s.queuedRequests).toBe(0);
  // Only the prefix cache may hold KV memory now, as before the burst.
  expect(s.kvUsedBytes - s.prefixCacheBytes).toBe(baseline);
  // Every request that reached the engine left exactly one usage row (aborted ones as cancelled).
  for (let i = 0; i < 100 && (await h.store.usage.countAll()) - before < (counts.done ?? 0); i++) await Bun.sleep(20);
  const rows = (await h.store.usage.list((await h.store.accounts.get("local"))!.id, { limit: 1000 })).filter((r) => r.requestId.startsWith("c-"));
  expect(new Set(rows.map((r) => r.requestId)).size).toBe(rows.length);
  const statuses = rows.reduce<Record<string, number>>((m, r) => ((m[r.status] = (m[r.status] ?? 0) + 1), m), {});
  // A client may abort after the last byte left the server: then its row says ok.
  expect(statuses.ok).toBeGreaterThanOrEqual(counts.done!);
  expect(Object.keys(statuses).sort()).toEqual(["cancelled", "ok"]);
}, 60_000);

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
