// The tables several nodes share, on both stores: requests in flight with their credit
// reservations, rate-limit counters, and the node registry. Races are run from two connections
// (two nodes) at once: the answers must be those of one admission at a time.
import { describe, expect, test } from "bun:test";
import type { Store } from "../../src/store/index.ts";
import { eachStore } from "./stores.ts";

const model = (id: string) => ({ id, displayName: id, contextLength: 128, sourceDir: "/x", supportsImages: false, supportsTools: false, supportsStructured: false, ownedBy: "t", loadError: null });
const usage = (requestId: string, accountId: number, modelId = "m/a") => ({
  requestId,
  accountId,
  keyId: null,
  modelId,
  promptTokens: 100,
  completionTokens: 50,
  latencyMs: 5,
  status: "ok",
  finishReason: "stop",
  user: null,
  metadata: null,
});
const admitInput = (accountId: number, requestId: string, nodeId = "n1") => ({ requestId, accountId, keyId: null, modelId: "m/a", nodeId, promptTokens: 200, completionTokens: 100 });

/** A prepaid account with $1 and a model whose worst case (200 + 100 tokens) reserves $0.30. */
async function prepaid(store: Store, name = "acme") {
  await store.catalog.sync([model("m/a")]);
  await store.catalog.setPrices("m/a", 1000, 1000);
  const a = await store.accounts.create(name);
  await store.billing.topUp(a.id, 1, "start");
  return a;
}

eachStore((kind) => {
  describe("requests in flight", () => {
    test("reservations count against the credit until the request is recorded, once", async () => {
      const store = await kind.open();
      const a = await prepaid(store);
      const admitted = [];
      for (let i = 0; i < 5; i++) admitted.push(await store.inflight.admit(admitInput(a.id, `r${i}`)));
      // $1 less 0, 0.3, 0.6, 0.9 reserved is positive; less 1.2 it is not.
      expect(admitted.map((r) => r !== null)).toEqual([true, true, true, true, false]);
      expect(admitted[0]!.reservedUsd).toBeCloseTo(0.3, 9);
      expect(await store.billing.hasCredit(a.id)).toBe(false);
      expect(await store.inflight.finish(admitted[0]!.id, usage("r0", a.id), true)).toBe(true);
      expect(await store.inflight.finish(admitted[0]!.id, usage("r0", a.id), true)).toBe(false);
      expect(await store.inflight.interrupt(admitted[0]!.id)).toBe(false);
      expect(await store.billing.balanceUsd(a.id)).toBeCloseTo(1 - 0.15, 9);
      expect(await store.inflight.interrupt(admitted[1]!.id)).toBe(true);
      await store.inflight.discard(admitted[2]!.id);
      const rows = await store.usage.list(a.id);
      expect(rows.map((r) => [r.requestId, r.status, r.completionTokens])).toEqual([
        ["r1", "interrupted", 0],
        ["r0", "ok", 50],
      ]);
      // One charge: the interrupted request is not billed, the discarded one never ran.
      expect((await store.billing.history(a.id)).filter((e) => e.kind === "charge")).toHaveLength(1);
      expect((await store.inflight.list(a.id)).map((r) => r.requestId)).toEqual(["r3"]);
      expect(await store.billing.hasCredit(a.id)).toBe(true);
    });

    test("an unlimited account reserves nothing; a sweep interrupts the requests of nodes gone", async () => {
      const store = await kind.open();
      await store.catalog.sync([model("m/a")]);
      const a = await store.accounts.create("big");
      await store.billing.setPlan(a.id, "unlimited");
      const on1 = (await store.inflight.admit(admitInput(a.id, "x1", "n1")))!;
      await store.inflight.admit(admitInput(a.id, "x2", "n2"));
      expect(on1.reservedUsd).toBe(0);
      expect(await store.inflight.sweep(["n1"])).toBe(1);
      expect((await store.inflight.list()).map((r) => r.nodeId)).toEqual(["n1"]);
      expect((await store.usage.list(a.id)).map((r) => [r.requestId, r.status])).toEqual([["x2", "interrupted"]]);
      expect(await store.inflight.sweep([])).toBe(1);
    });

    test("racing admissions (two nodes' connections on PostgreSQL) spend the credit as one at a time would", async () => {
      const store = await kind.open();
      const other = await kind.concurrent(store);
      const a = await prepaid(store);
      const results = await Promise.all(Array.from({ length: 16 }, (_, i) => (i % 2 ? store : other).inflight.admit(admitInput(a.id, `c${i}`))));
      expect(results.filter((r) => r !== null)).toHaveLength(4);
    });
  });

  describe("rate counters", () => {
    const limits = (l: Partial<{ requestsPerMinute: number; tokensPerMinute: number; maxConcurrent: number }>) => ({
      requestsPerMinute: l.requestsPerMinute ?? null,
      tokensPerMinute: l.tokensPerMinute ?? null,
      maxConcurrent: l.maxConcurrent ?? null,
    });

    test("racing requests per minute hold across connections; tokens are taken and settled", async () => {
      const store = await kind.open();
      const other = await kind.concurrent(store);
      const scope = [{ id: "account:1", limits: limits({ requestsPerMinute: 3 }) }];
      const results = await Promise.all(Array.from({ length: 10 }, (_, i) => (i % 2 ? store : other).rates.admit("n1", scope, 0, false)));
      expect(results.filter((r) => r.ok)).toHaveLength(3);
      const refused = results.find((r) => !r.ok)!;
      expect(refused).toMatchObject({ ok: false, dimension: "requests", limit: 3 });
      const tokens = [{ id: "key:k", limits: limits({ tokensPerMinute: 100 }) }];
      const first = await store.rates.admit("n1", tokens, 60, false);
      expect(first.ok && first.state.tokens?.remaining).toBe(40);
      expect((await store.rates.admit("n1", tokens, 60, false)).ok).toBe(false);
      await store.rates.settle(["key:k"], 60, 10);
      const after = await store.rates.admit("n1", tokens, 60, false);
      expect(after.ok).toBe(true);
    });

    test("concurrency counts the requests of live nodes only", async () => {
      const store = await kind.open();
      const scope = [{ id: "account:2", limits: limits({ maxConcurrent: 2 }) }];
      await store.nodes.heartbeat({ id: "n1", url: "http://n1", version: "t", startedAt: 1 }, [], 60_000);
      expect((await store.rates.admit("n1", scope, 0, true)).ok).toBe(true);
      expect((await store.rates.admit("n2", scope, 0, true)).ok).toBe(true);
      expect(await store.rates.admit("n2", scope, 0, true)).toMatchObject({ ok: false, dimension: "concurrency", limit: 2 });
      await store.rates.release("n2", ["account:2"]);
      expect((await store.rates.admit("n2", scope, 0, true)).ok).toBe(true);
      // n1 dies (its registration expires): its slot no longer counts, and a sweep forgets it.
      await store.nodes.heartbeat({ id: "n1", url: "http://n1", version: "t", startedAt: 1 }, [], 1);
      await Bun.sleep(5);
      expect((await store.rates.admit("n2", scope, 0, true)).ok).toBe(true);
      expect((await store.rates.admit("n2", scope, 0, true)).ok).toBe(false);
      expect(await store.rates.sweep(["n2"])).toBe(1);
    });
  });

  describe("nodes", () => {
    test("heartbeats register models with queues; expiry and sweep remove a node; the cache signal moves", async () => {
      const store = await kind.open();
      const other = await kind.reopen(store);
      const node = (id: string) => ({ id, url: `http://${id}:8080`, version: "t", startedAt: 1 });
      const before = store.cacheGeneration();
      await store.nodes.heartbeat(node("n1"), [{ id: "m/a", queueDepth: 2 }, { id: "m/b", queueDepth: 0 }], 60_000);
      await other.nodes.heartbeat(node("n2"), [{ id: "m/b", queueDepth: 5 }], 60_000);
      expect(store.cacheGeneration()).not.toBe(before);
      const live = await store.nodes.live();
      expect(live.map((n) => [n.id, n.url, n.models])).toEqual([
        ["n1", "http://n1:8080", [{ id: "m/a", queueDepth: 2 }, { id: "m/b", queueDepth: 0 }]],
        ["n2", "http://n2:8080", [{ id: "m/b", queueDepth: 5 }]],
      ]);
      expect(live[0]!.expiresAt - live[0]!.heartbeatAt).toBe(60_000);
      await store.nodes.heartbeat(node("n1"), [{ id: "m/a", queueDepth: 0 }], 60_000);
      expect((await store.nodes.live())[0]!.models).toEqual([{ id: "m/a", queueDepth: 0 }]);
      await other.nodes.heartbeat(node("n2"), [{ id: "m/b", queueDepth: 5 }], 1);
      await Bun.sleep(5);
      expect((await store.nodes.live()).map((n) => n.id)).toEqual(["n1"]);
      expect(await store.nodes.sweep()).toEqual(["n2"]);
      await store.nodes.remove("n1");
      expect(await store.nodes.live()).toEqual([]);
    });
  });
});
