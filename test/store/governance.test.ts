// Governance tables on both stores: the audit log's chain under appends racing from two
// connections (two nodes), the audited store's entries (none for a change that changes nothing,
// none for a change that failed), and a key's budget held by reservations under racing admissions.
import { describe, expect, test } from "bun:test";
import { auditedStore, BudgetExceededError, type Store } from "../../src/store/index.ts";
import { eachStore } from "./stores.ts";

const actor = { kind: "cli" as const, name: "tester", source: "cli@test" };
const model = (id: string) => ({ id, displayName: id, contextLength: 128, sourceDir: "/x", supportsImages: false, supportsTools: false, supportsStructured: false, ownedBy: "t", loadError: null });

eachStore((kind) => {
  describe("the audit log", () => {
    test("appends racing from two connections make one unbroken chain", async () => {
      const store = await kind.open();
      const other = await kind.concurrent(store);
      await Promise.all(Array.from({ length: 24 }, (_, i) => (i % 2 ? store : other).audit.append({ actor, action: "test.append", target: `t:${i}`, before: null, after: { i } })));
      expect(await store.audit.verify()).toEqual({ ok: true, rows: 24 });
      const seqs = (await store.audit.list({ limit: 100 })).map((e) => e.seq);
      expect(seqs).toEqual(Array.from({ length: 24 }, (_, i) => 24 - i));
    });

    test("the audited store records each change with before and after, nothing for a no-op or a failure", async () => {
      const store = await kind.open();
      const s: Store = auditedStore(store, actor);
      const a = await s.accounts.create("acme");
      const { info } = await s.keys.create(a.id, "ci", { budgetUsd: 2 });
      expect(await s.keys.revoke("key_nosuchkey")).toBe(false);
      await expect(s.accounts.create("acme")).rejects.toThrow(/already exists/);
      await expect(s.billing.topUp(a.id, -5, null)).rejects.toThrow(/positive/);
      await s.keys.update(info.id, { budgetUsd: 3 });
      await s.limits.set(a.id, null, { requestsPerMinute: 5, tokensPerMinute: null, maxConcurrent: null }, "m/x");
      const log = (await store.audit.list()).reverse();
      expect(log.map((e) => e.action)).toEqual(["accounts.create", "keys.create", "keys.update", "limits.set"]);
      expect(log[2]!.before).toMatchObject({ budget_usd: 2 });
      expect(log[2]!.after).toMatchObject({ budget_usd: 3 });
      expect(log[3]!.target).toBe("account:acme model:m/x");
      expect(log.every((e) => e.actor === "tester" && e.actorKind === "cli" && e.source === "cli@test")).toBe(true);
      expect(await store.audit.verify()).toEqual({ ok: true, rows: 4 });
    });
  });

  describe("a key's budget", () => {
    test("racing admissions from two connections reserve no more than the budget; spend counts from usage rows", async () => {
      const store = await kind.open();
      const other = await kind.concurrent(store);
      await store.catalog.sync([model("m/a")]);
      await store.catalog.setPrices("m/a", 1000, 1000);
      const a = await store.accounts.create("acme");
      await store.billing.setPlan(a.id, "unlimited");
      // A worst case of 200 + 100 tokens at $1 per 1000: $0.30; a budget of $1 holds three.
      const { info } = await store.keys.create(a.id, null, { budgetUsd: 1, budgetPeriod: "day" });
      const results = await Promise.allSettled(
        Array.from({ length: 12 }, (_, i) =>
          (i % 2 ? store : other).inflight.admit({ requestId: `r${i}`, accountId: a.id, keyId: info.id, modelId: "m/a", nodeId: "n", promptTokens: 200, completionTokens: 100 }),
        ),
      );
      const admitted = results.filter((r) => r.status === "fulfilled");
      expect(admitted).toHaveLength(3);
      for (const r of results) if (r.status === "rejected") expect(r.reason).toBeInstanceOf(BudgetExceededError);
      const first = (admitted[0] as PromiseFulfilledResult<{ id: string }>).value;
      // Finished for less than its worst case: the rest of its reservation frees up.
      await store.inflight.finish(first.id, { requestId: "r", accountId: a.id, keyId: info.id, modelId: "m/a", promptTokens: 50, completionTokens: 50, latencyMs: 1, status: "ok", finishReason: "stop", user: null, metadata: null }, true);
      expect(await store.keys.spendUsd(info.id, 0)).toBeCloseTo(0.1, 9);
      expect(await store.inflight.admit({ requestId: "x", accountId: a.id, keyId: info.id, modelId: "m/a", nodeId: "n", promptTokens: 200, completionTokens: 100 })).not.toBeNull();
      const over = await store.inflight.admit({ requestId: "y", accountId: a.id, keyId: info.id, modelId: "m/a", nodeId: "n", promptTokens: 200, completionTokens: 100 }).catch((e) => e);
      expect(over).toBeInstanceOf(BudgetExceededError);
      expect((over as BudgetExceededError).scope).toBe("key");
      // Another key of the account is not held by this one's budget.
      const { info: free } = await store.keys.create(a.id, null);
      expect(await store.inflight.admit({ requestId: "z", accountId: a.id, keyId: free.id, modelId: "m/a", nodeId: "n", promptTokens: 200, completionTokens: 100 })).not.toBeNull();
    });
  });
});
