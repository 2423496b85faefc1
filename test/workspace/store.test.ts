// The workspace's store modules on both stores: the billing ledger, users (argon2id), sessions,
// sign-in failures, usage aggregates, and the migration that brings the local account to the
// unlimited plan.
import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { chargeNano } from "../../src/store/billing.ts";
import { openSqliteStore } from "../../src/store/index.ts";
import { migrate } from "../../src/store/migrations.ts";
import { tempDir } from "../helpers/paths.ts";
import { eachStore } from "../store/stores.ts";

const model = (id: string) => ({
  id,
  displayName: id,
  contextLength: 128,
  sourceDir: "/x",
  supportsImages: false,
  supportsTools: false,
  supportsStructured: false,
  ownedBy: "t",
  loadError: null,
});

test("a SQLite file from before the workspace keeps its local account unlimited", async () => {
  const dir = tempDir("sluice-ws-store-");
  try {
    const path = join(dir.path, "old.db");
    const db = new Database(path);
    migrate(db, 1);
    db.exec("INSERT INTO accounts (name, created_at) VALUES ('local', 1), ('other', 1)");
    db.close();
    const store = openSqliteStore(path);
    expect(await store.billing.plan((await store.accounts.get("local"))!.id)).toBe("unlimited");
    expect(await store.billing.plan((await store.accounts.get("other"))!.id)).toBe("prepaid");
    await store.close();
  } finally {
    dir.remove();
  }
});

eachStore((kind) => {
  describe("billing", () => {
    test("charges are tokens × price per million, exact in the ledger", async () => {
      expect(chargeNano(1_000_000, 0, 0.15, 0)).toBe(150_000_000);
      expect(chargeNano(17, 5, 0.5, 1.5)).toBe(17 * 500 + 5 * 1500);
      const store = await kind.open();
      await store.catalog.sync([model("m/a")]);
      await store.catalog.setPrices("m/a", 2, 8);
      const a = await store.accounts.create("acme");
      expect(await store.billing.plan(a.id)).toBe("prepaid");
      expect(await store.billing.hasCredit(a.id)).toBe(false);
      await store.billing.topUp(a.id, 0.001, "start");
      expect(await store.billing.hasCredit(a.id)).toBe(true);
      const e = (await store.billing.charge({ accountId: a.id, requestId: "r1", modelId: "m/a", promptTokens: 100, completionTokens: 50 }))!;
      expect(e.amountUsd).toBeCloseTo(-(100 * 2 + 50 * 8) / 1e6, 15);
      expect(await store.billing.balanceUsd(a.id)).toBeCloseTo(0.001 - 0.0006, 15);
      await store.billing.charge({ accountId: a.id, requestId: "r2", modelId: "m/a", promptTokens: 100, completionTokens: 50 });
      expect(await store.billing.hasCredit(a.id)).toBe(false);
      expect(await store.billing.charge({ accountId: a.id, requestId: "r3", modelId: "nope", promptTokens: 1, completionTokens: 1 })).toBeNull();
      const s = await store.billing.summary(a.id, 0);
      expect(s.spendUsd).toBeCloseTo(0.0012, 15);
      expect(s.topUpsUsd).toBeCloseTo(0.001, 15);
      expect((await store.billing.history(a.id)).map((h) => h.kind)).toEqual(["charge", "charge", "topup"]);
      await store.billing.setPlan(a.id, "unlimited");
      expect(await store.billing.hasCredit(a.id)).toBe(true);
      expect(store.billing.topUp(a.id, -5, null)).rejects.toThrow(/positive/);
    });

    test("prompt tokens served from the prefix cache are charged at the cached-input price", async () => {
      expect(chargeNano(100, 10, 2, 8, 60, 0.5)).toBe(40 * 2000 + 60 * 500 + 10 * 8000);
      // Without a cached price they cost the input price; more cached than prompt tokens is capped.
      expect(chargeNano(100, 10, 2, 8, 60, null)).toBe(chargeNano(100, 10, 2, 8));
      expect(chargeNano(10, 0, 2, 8, 60, 0)).toBe(0);
      const store = await kind.open();
      await store.catalog.sync([model("m/c")]);
      await store.catalog.setPrices("m/c", 2, 8, 0.5);
      expect((await store.catalog.get("m/c"))!.cachedInputPricePerMTok).toBe(0.5);
      // Setting input and output only leaves the cached price as it was; null clears it.
      await store.catalog.setPrices("m/c", 3, 8);
      expect((await store.catalog.get("m/c"))!.cachedInputPricePerMTok).toBe(0.5);
      expect(store.catalog.setPrices("m/c", 3, 8, -1)).rejects.toThrow(/negative/);
      const a = await store.accounts.create("cachey");
      const e = (await store.billing.charge({ accountId: a.id, requestId: "r1", modelId: "m/c", promptTokens: 1000, cachedTokens: 800, completionTokens: 10 }))!;
      expect(e.amountUsd).toBeCloseTo(-(200 * 3 + 800 * 0.5 + 10 * 8) / 1e6, 15);
      expect([e.promptTokens, e.cachedTokens, e.completionTokens]).toEqual([1000, 800, 10]);
      await store.catalog.setPrices("m/c", 3, 8, null);
      expect((await store.catalog.get("m/c"))!.cachedInputPricePerMTok).toBeNull();
      const full = (await store.billing.charge({ accountId: a.id, requestId: "r2", modelId: "m/c", promptTokens: 1000, cachedTokens: 800, completionTokens: 10 }))!;
      expect(full.amountUsd).toBeCloseTo(-(1000 * 3 + 10 * 8) / 1e6, 15);
    });
  });

  describe("users and sessions", () => {
    test("argon2id hashes, case-insensitive emails, no duplicate, verify", async () => {
      const store = await kind.open();
      const a = await store.accounts.create("acme");
      const u = await store.users.create({ accountId: a.id, email: "Ann@Example.com", password: "long enough pw" });
      const [row] = (await kind.raw(store, "SELECT password_hash FROM users")) as { password_hash: string }[];
      expect(row!.password_hash).toStartWith("$argon2id$");
      expect(row!.password_hash).not.toContain("long enough pw");
      expect((await store.users.verify("ann@example.com", "long enough pw"))?.id).toBe(u.id);
      expect((await store.users.getByEmail("ANN@example.COM"))?.id).toBe(u.id);
      expect(await store.users.verify("ann@example.com", "long enough px")).toBeNull();
      expect(await store.users.verify("nobody@example.com", "long enough pw")).toBeNull();
      await expect(store.users.create({ accountId: a.id, email: "ANN@example.com", password: "long enough pw" })).rejects.toThrow(/already exists/);
      await expect(store.users.create({ accountId: a.id, email: "bad", password: "long enough pw" })).rejects.toThrow(/invalid email/);
      await expect(store.users.create({ accountId: a.id, email: "b@x.io", password: "short" })).rejects.toThrow(/at least/);
    });

    test("sessions: hashed token, expiry, destroyed by a password change", async () => {
      const store = await kind.open();
      const a = await store.accounts.create("acme");
      const u = await store.users.create({ accountId: a.id, email: "a@x.io", password: "long enough pw" });
      const { token, session } = await store.sessions.create(u.id, 60_000);
      expect(await store.sessions.get(token)).toEqual(session);
      expect(await store.sessions.get(token + "x")).toBeNull();
      const expired = await store.sessions.create(u.id, -1);
      expect(await store.sessions.get(expired.token)).toBeNull();
      expect(await store.sessions.purgeExpired()).toBe(1);
      await store.users.setPassword(u.id, "another long pw");
      expect(await store.sessions.get(token)).toBeNull();
      expect(await store.users.remove(u.id)).toBe(true);
      expect(await store.users.get(u.id)).toBeNull();
    });

    test("single sign-on: users without a password, roles, and sign-ins taken once", async () => {
      const store = await kind.open();
      const a = await store.accounts.create("acme");
      const u = await store.users.create({ accountId: a.id, email: "sso@x.io", password: null });
      expect(u.role).toBe("member");
      // No password, not even the empty one, signs in as a user the provider created.
      expect(await store.users.verify("sso@x.io", "")).toBeNull();
      expect(await store.users.verify("sso@x.io", "long enough pw")).toBeNull();
      expect(await store.users.setRole(u.id, "operator")).toBe(true);
      expect((await store.users.get(u.id))!.role).toBe("operator");
      expect(await store.users.setRole(u.id + 100, "operator")).toBe(false);
      await store.users.setPassword(u.id, "now a password");
      expect((await store.users.verify("sso@x.io", "now a password"))?.id).toBe(u.id);

      await store.oidcLogins.begin("state-one", { nonce: "n1", codeVerifier: "v1" }, 60_000);
      await store.oidcLogins.begin("state-old", { nonce: "n2", codeVerifier: "v2" }, -1);
      // The state itself is not on disk, only its hash.
      expect((await kind.raw(store, "SELECT state_hash FROM oidc_logins")).map((r) => r.state_hash)).not.toContain("state-one");
      expect(await store.oidcLogins.take("state-old")).toBeNull();
      expect(await store.oidcLogins.take("state-two")).toBeNull();
      expect(await store.oidcLogins.take("state-one")).toEqual({ nonce: "n1", codeVerifier: "v1" });
      expect(await store.oidcLogins.take("state-one")).toBeNull();
    });

    test("sign-in failures count per email and per client within the window", async () => {
      const store = await kind.open();
      for (let i = 0; i < 3; i++) await store.signIns.recordFailure("a@x.io", "10.0.0.1", 1000 + i);
      await store.signIns.recordFailure("b@x.io", "10.0.0.1", 1000);
      expect(await store.signIns.failures("A@x.io", "10.0.0.1", 0)).toEqual({ email: 3, client: 4 });
      expect(await store.signIns.failures("a@x.io", "10.0.0.2", 1001)).toEqual({ email: 2, client: 0 });
      await store.signIns.clear("a@X.io");
      expect((await store.signIns.failures("a@x.io", "10.0.0.1", 0)).email).toBe(0);
    });
  });

  test("usage reports aggregate per UTC day and per model", async () => {
    const store = await kind.open();
    const a = await store.accounts.create("acme");
    const b = await store.accounts.create("other");
    const day = Date.UTC(2026, 0, 10);
    const rec = (accountId: number, modelId: string, at: number, p: number, c: number, cached = 0, reasoning = 0) =>
      store.usage.record({ requestId: "r", accountId, keyId: null, modelId, promptTokens: p, completionTokens: c, cachedTokens: cached, reasoningTokens: reasoning, latencyMs: 1, status: "ok", finishReason: "stop", user: null, metadata: null, createdAt: at });
    await rec(a.id, "m/a", day + 1000, 10, 2, 4, 1);
    await rec(a.id, "m/b", day + 86_399_000, 5, 1);
    await rec(a.id, "m/a", day + 86_400_000, 7, 3, 0, 2);
    await rec(b.id, "m/a", day + 1000, 100, 100, 50, 50);
    expect(await store.usageReports.daily(a.id, day, day + 2 * 86_400_000)).toEqual([
      { day: "2026-01-10", requests: 2, promptTokens: 15, completionTokens: 3, cachedTokens: 4, reasoningTokens: 1 },
      { day: "2026-01-11", requests: 1, promptTokens: 7, completionTokens: 3, cachedTokens: 0, reasoningTokens: 2 },
    ]);
    expect(await store.usageReports.byModel(a.id, day, day + 2 * 86_400_000)).toEqual([
      { modelId: "m/a", requests: 2, promptTokens: 17, completionTokens: 5, cachedTokens: 4, reasoningTokens: 3 },
      { modelId: "m/b", requests: 1, promptTokens: 5, completionTokens: 1, cachedTokens: 0, reasoningTokens: 0 },
    ]);
    expect((await store.usage.list(a.id)).map((u) => [u.cachedTokens, u.reasoningTokens])).toEqual([[0, 2], [0, 0], [4, 1]]);
});
});
