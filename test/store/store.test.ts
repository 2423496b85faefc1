import { Database } from "bun:sqlite";
import { SQL } from "bun";
import { afterEach, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { migrate, migratePostgres, MIGRATIONS, postgresSchemaVersion, SCHEMA_VERSION, schemaVersion } from "../../src/store/migrations.ts";
import { hashKey } from "../../src/store/keys.ts";
import { openPostgresStore, openSqliteStore, type DiscoveredModel } from "../../src/store/index.ts";
import { tempDir } from "../helpers/paths.ts";
import { eachStore } from "./stores.ts";

const model = (id: string, extra: Partial<DiscoveredModel> = {}): DiscoveredModel => ({
  id,
  displayName: id,
  contextLength: 512,
  sourceDir: `/models/${id}`,
  supportsImages: false,
  supportsTools: false,
  supportsStructured: true,
  ownedBy: id.split("/")[0]!,
  loadError: null,
  ...extra,
});

describe("sqlite migrations", () => {
  const dirs: { remove: () => void }[] = [];
  afterEach(() => dirs.splice(0).forEach((d) => d.remove()));
  const dbPath = () => {
    const d = tempDir("sluice-store-");
    dirs.push(d);
    return join(d.path, "sluice.db");
  };

  test("an empty file is brought to the current version, in WAL mode", async () => {
    const path = dbPath();
    await openSqliteStore(path).close();
    const db = new Database(path);
    expect(schemaVersion(db)).toBe(SCHEMA_VERSION);
    expect((db.query("PRAGMA journal_mode").get() as { journal_mode: string }).journal_mode).toBe("wal");
    db.close();
  });

  for (let from = 1; from < SCHEMA_VERSION; from++) {
    test(`a file at version ${from} is migrated forward with its data`, async () => {
      const path = dbPath();
      const db = new Database(path);
      migrate(db, from);
      db.exec("INSERT INTO accounts (name, created_at) VALUES ('old', 1)");
      db.close();
      const store = openSqliteStore(path);
      expect((await store.accounts.get("old"))?.name).toBe("old");
      await store.close();
    });
  }

  test("every migration applies in order and the data of version 1 survives to the end", async () => {
    const path = dbPath();
    const db = new Database(path);
    migrate(db, 1);
    db.exec("INSERT INTO accounts (name, created_at) VALUES ('early', 1)");
    for (let v = 2; v <= MIGRATIONS.length; v++) {
      migrate(db, v);
      expect(schemaVersion(db)).toBe(v);
    }
    db.close();
    const store = openSqliteStore(path);
    expect((await store.accounts.list()).map((a) => a.name)).toEqual(["early"]);
    await store.close();
  });

  test("a file from a newer build is refused with a clear message", () => {
    const path = dbPath();
    const db = new Database(path);
    db.exec(`PRAGMA user_version = ${SCHEMA_VERSION + 1}`);
    db.close();
    expect(() => openSqliteStore(path)).toThrow(/newer than this build/);
  });
});

eachStore((kind) => {
  if (kind.name === "postgres") {
    describe("postgres migrations", () => {
      test("every version is migrated forward with its data; a newer database is refused", async () => {
        // A database of its own per version, migrated by hand to that version, beside the probe's.
        const probe = await kind.open();
        const name = (await kind.raw(probe, "SELECT current_database() AS d"))[0]!.d as string;
        const base = probe.location.replace(/\/[^/]+$/, "");
        const admin = new SQL(`${base}/postgres`, { max: 1 });
        try {
          for (let from = 1; from <= SCHEMA_VERSION; from++) {
            const db = `${name}_v${from}`;
            await admin.unsafe(`CREATE DATABASE ${db}`);
            const sql = new SQL(`${base}/${db}`, { max: 1 });
            await migratePostgres(sql, from);
            expect(await postgresSchemaVersion(sql)).toBe(from);
            await sql.unsafe("INSERT INTO accounts (name, created_at) VALUES ('old', 1)");
            if (from === SCHEMA_VERSION) await sql.unsafe(`UPDATE sluice_schema SET version = ${SCHEMA_VERSION + 1}`);
            await sql.close();
            if (from === SCHEMA_VERSION) {
              expect(openPostgresStore(`${base}/${db}`)).rejects.toThrow(/newer than this build/);
              continue;
            }
            const store = await openPostgresStore(`${base}/${db}`);
            expect((await store.accounts.get("old"))?.name).toBe("old");
            await store.close();
          }
        } finally {
          await admin.close();
        }
      }, 60_000); // every migration from the first, on a database server: seconds on a busy machine
    });
  }

  describe("keys", () => {
    test("format, hashing, display prefix, revocation", async () => {
      const store = await kind.open();
      const acct = await store.accounts.create("acme");
      const { key, info } = await store.keys.create(acct.id, "ci");
      expect(key).toMatch(/^sk-sluice-[0-9A-Za-z]{32,}$/);
      expect(info.prefix).toBe(key.slice(0, 14));
      expect((await store.keys.authenticate(key))?.id).toBe(info.id);
      expect(store.keys.peek(key)?.id).toBe(info.id);
      expect(await store.keys.authenticate(key + "x")).toBeNull();
      expect((await store.keys.create(acct.id, null)).key).not.toBe(key);
      expect(await store.keys.revoke(info.id)).toBe(true);
      expect(await store.keys.revoke(info.id)).toBe(false);
      expect(store.keys.peek(key)).toBeUndefined();
      expect(await store.keys.authenticate(key)).toBeNull();
      // Only the hash is in the database.
      const dump = JSON.stringify(await kind.raw(store, "SELECT * FROM api_keys"));
      expect(dump).not.toContain(key);
      expect(dump).toContain(hashKey(key));
    });

    test("a key revoked through another connection (the CLI, another node) fails at once or within the signal's bound", async () => {
      const store = await kind.open();
      const other = await kind.reopen(store);
      const acct = await store.accounts.create("acme");
      const { key, info } = await store.keys.create(acct.id, null);
      expect((await store.keys.authenticate(key))?.id).toBe(info.id);
      expect(store.keys.peek(key)?.id).toBe(info.id);
      const before = store.cacheGeneration();
      expect(await other.keys.revoke(info.id)).toBe(true);
      // SQLite sees the commit on the next read; PostgreSQL by its notification (or the periodic check).
      const deadline = Date.now() + 1000;
      while (store.cacheGeneration() === before && Date.now() < deadline) await Bun.sleep(10);
      expect(store.cacheGeneration()).not.toBe(before);
      expect(store.keys.peek(key)).toBeUndefined();
      expect(await store.keys.authenticate(key)).toBeNull();
    });

    test("a key revoked through another account's scope is not touched", async () => {
      const store = await kind.open();
      const a = await store.accounts.create("a");
      const b = await store.accounts.create("b");
      const { info } = await store.keys.create(a.id, null);
      expect(await store.keys.revoke(info.id, b.id)).toBe(false);
      expect((await store.keys.list(a.id))[0]!.revokedAt).toBeNull();
      expect(await store.keys.count(a.id)).toBe(1);
    });

    test("account names are validated and unique", async () => {
      const store = await kind.open();
      await store.accounts.create("ok-name");
      expect(store.accounts.create("ok-name")).rejects.toThrow(/already exists/);
      expect(store.accounts.create("Bad Name")).rejects.toThrow(/invalid account name/);
    });
  });

  describe("catalog", () => {
    test("sync adds, updates, and keeps operator settings", async () => {
      const store = await kind.open();
      const shared = kind.name === "postgres";
      // A shared store serves what live nodes register; this one registers everything it syncs.
      const register = (ids: string[]) =>
        shared ? store.nodes.heartbeat({ id: "n1", url: "http://n1", version: "t", startedAt: 1 }, ids.map((id) => ({ id, queueDepth: 0 })), 60_000) : Promise.resolve();
      expect((await store.catalog.sync([model("a/x"), model("b/y")])).added).toEqual(["a/x", "b/y"]);
      await register(["a/x", "b/y"]);
      await store.catalog.setStatus("a/x", "inactive");
      await store.catalog.setPrices("b/y", 1.5, 3);
      const change = await store.catalog.sync([model("a/x", { contextLength: 1024 }), model("c/z", { loadError: "bad" })]);
      await register(["a/x"]);
      // One node's store marks what it no longer finds as missing; a shared one leaves that to the nodes.
      expect(change).toEqual({ added: ["c/z"], updated: ["a/x"], missing: shared ? [] : ["b/y"] });
      expect(await store.catalog.get("a/x")).toMatchObject({ status: "inactive", contextLength: 1024 });
      expect((await store.catalog.listServed()).map((m) => m.id)).toEqual([]);
      await store.catalog.setStatus("a/x", "active");
      expect((await store.catalog.listServed()).map((m) => m.id)).toEqual(["a/x"]);
      await store.catalog.sync([model("a/x"), model("b/y")]);
      await register(["a/x", "b/y"]);
      expect(await store.catalog.get("b/y")).toMatchObject({ present: true, inputPricePerMTok: 1.5, outputPricePerMTok: 3 });
      expect((await store.catalog.listServed()).map((m) => m.id)).toEqual(["a/x", "b/y"]);
      expect(store.catalog.setPrices("b/y", -1, 0)).rejects.toThrow();
    });

    test("access: all served models until restricted; grants and revokes", async () => {
      const store = await kind.open();
      const register = (ids: string[]) =>
        kind.name === "postgres" ? store.nodes.heartbeat({ id: "n1", url: "http://n1", version: "t", startedAt: 1 }, ids.map((id) => ({ id, queueDepth: 0 })), 60_000) : Promise.resolve();
      await store.catalog.sync([model("a/x"), model("b/y")]);
      await register(["a/x", "b/y"]);
      const acct = await store.accounts.create("t");
      expect((await store.catalog.listForAccount(acct.id)).map((m) => m.id)).toEqual(["a/x", "b/y"]);
      await store.catalog.revoke(acct.id, "a/x");
      expect((await store.accounts.get("t"))!.modelAccess).toBe("listed");
      expect((await store.catalog.listForAccount(acct.id)).map((m) => m.id)).toEqual(["b/y"]);
      expect(await store.catalog.getForAccount(acct.id, "a/x")).toBeNull();
      await store.catalog.sync([model("a/x"), model("b/y"), model("c/new")]);
      await register(["a/x", "b/y", "c/new"]);
      // A restricted account does not gain new models by itself.
      expect((await store.catalog.listForAccount(acct.id)).map((m) => m.id)).toEqual(["b/y"]);
      await store.catalog.grant(acct.id, "c/new");
      expect((await store.catalog.listForAccount(acct.id)).map((m) => m.id)).toEqual(["b/y", "c/new"]);
      expect(store.catalog.grant(acct.id, "no/such")).rejects.toThrow(/no model/);
      await store.catalog.allowAll(acct.id);
      expect((await store.accounts.get("t"))!.modelAccess).toBe("all");
      expect((await store.catalog.listForAccount(acct.id)).map((m) => m.id)).toEqual(["a/x", "b/y", "c/new"]);
      expect(await store.catalog.grants(acct.id)).toEqual([]);
    });
  });

  describe("usage", () => {
    test("rows are recorded with metadata and listed per account, newest first", async () => {
      const store = await kind.open();
      const a = await store.accounts.create("a");
      const b = await store.accounts.create("b");
      const base = { keyId: null, modelId: "m", promptTokens: 3, completionTokens: 4, latencyMs: 10.4, status: "ok", finishReason: "stop", user: "u1" };
      await store.usage.record({ ...base, requestId: "r1", accountId: a.id, metadata: { k: "v" }, createdAt: 1000 });
      await store.usage.record({ ...base, requestId: "r2", accountId: a.id, metadata: null, createdAt: 2000 });
      await store.usage.record({ ...base, requestId: "r3", accountId: b.id, metadata: null, createdAt: 3000 });
      const rows = await store.usage.list(a.id);
      expect(rows.map((r) => r.requestId)).toEqual(["r2", "r1"]);
      expect(rows[1]).toMatchObject({ metadata: { k: "v" }, latencyMs: 10, user: "u1", createdAt: 1000 });
      expect((await store.usage.list(a.id, { since: 1500 })).map((r) => r.requestId)).toEqual(["r2"]);
      expect(await store.usage.countAll()).toBe(3);
    });
  });

  test("a transaction's writes land together or not at all", async () => {
    const store = await kind.open();
    await expect(
      store.atomically(async (tx) => {
        await tx.accounts.create("inside");
        throw new Error("changed my mind");
      }),
    ).rejects.toThrow(/changed my mind/);
    expect(await store.accounts.get("inside")).toBeNull();
    await store.atomically(async (tx) => {
      await tx.accounts.create("kept");
    });
    expect(await store.accounts.get("kept")).not.toBeNull();
    expect(await store.healthy()).toBe(true);
  });
});
