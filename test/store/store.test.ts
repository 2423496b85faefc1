import { Database } from "bun:sqlite";
import { afterEach, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { migrate, MIGRATIONS, SCHEMA_VERSION, schemaVersion } from "../../src/store/migrations.ts";
import { hashKey } from "../../src/store/keys.ts";
import { openSqliteStore, type DiscoveredModel } from "../../src/store/index.ts";
import { tempDir } from "../helpers/paths.ts";

const dirs: { remove: () => void }[] = [];
afterEach(() => dirs.splice(0).forEach((d) => d.remove()));
const dbPath = () => {
  const d = tempDir("sluice-store-");
  dirs.push(d);
  return join(d.path, "sluice.db");
};

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

describe("migrations", () => {
  test("an empty file is brought to the current version, in WAL mode", () => {
    const path = dbPath();
    const store = openSqliteStore(path);
    store.close();
    const db = new Database(path);
    expect(schemaVersion(db)).toBe(SCHEMA_VERSION);
    expect((db.query("PRAGMA journal_mode").get() as { journal_mode: string }).journal_mode).toBe("wal");
    db.close();
  });

  for (let from = 1; from < SCHEMA_VERSION; from++) {
    test(`a file at version ${from} is migrated forward with its data`, () => {
      const path = dbPath();
      const db = new Database(path);
      migrate(db, from);
      db.exec("INSERT INTO accounts (name, created_at) VALUES ('old', 1)");
      db.close();
      const store = openSqliteStore(path);
      expect(store.accounts.get("old")?.name).toBe("old");
      store.close();
    });
  }

  test("every migration applies in order and the data of version 1 survives to the end", () => {
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
    expect(store.accounts.list().map((a) => a.name)).toEqual(["early"]);
    store.close();
  });

  test("a file from a newer build is refused with a clear message", () => {
    const path = dbPath();
    const db = new Database(path);
    db.exec(`PRAGMA user_version = ${SCHEMA_VERSION + 1}`);
    db.close();
    expect(() => openSqliteStore(path)).toThrow(/newer than this build/);
  });
});

describe("keys", () => {
  test("format, hashing, display prefix, revocation", () => {
    const path = dbPath();
    const store = openSqliteStore(path);
    const acct = store.accounts.create("acme");
    const { key, info } = store.keys.create(acct.id, "ci");
    expect(key).toMatch(/^sk-sluice-[0-9A-Za-z]{32,}$/);
    expect(info.prefix).toBe(key.slice(0, 14));
    expect(store.keys.authenticate(key)?.id).toBe(info.id);
    expect(store.keys.authenticate(key + "x")).toBeNull();
    expect(store.keys.create(acct.id, null).key).not.toBe(key);
    expect(store.keys.revoke(info.id)).toBe(true);
    expect(store.keys.revoke(info.id)).toBe(false);
    expect(store.keys.authenticate(key)).toBeNull();
    store.close();
    // Only the hash is on disk.
    const raw = Bun.file(path).size > 0 ? new Database(path) : null;
    const rows = raw!.query("SELECT * FROM api_keys").all() as Record<string, unknown>[];
    const dump = JSON.stringify(rows);
    expect(dump).not.toContain(key);
    expect(dump).toContain(hashKey(key));
    raw!.close();
  });

  test("a key revoked through another account's scope is not touched", () => {
    const store = openSqliteStore(dbPath());
    const a = store.accounts.create("a");
    const b = store.accounts.create("b");
    const { info } = store.keys.create(a.id, null);
    expect(store.keys.revoke(info.id, b.id)).toBe(false);
    expect(store.keys.list(a.id)[0]!.revokedAt).toBeNull();
    store.close();
  });

  test("account names are validated and unique", () => {
    const store = openSqliteStore(dbPath());
    store.accounts.create("ok-name");
    expect(() => store.accounts.create("ok-name")).toThrow(/already exists/);
    expect(() => store.accounts.create("Bad Name")).toThrow(/invalid account name/);
    store.close();
  });
});

describe("catalog", () => {
  test("sync adds, updates, marks missing, and keeps operator settings", () => {
    const store = openSqliteStore(dbPath());
    expect(store.catalog.sync([model("a/x"), model("b/y")]).added).toEqual(["a/x", "b/y"]);
    store.catalog.setStatus("a/x", "inactive");
    store.catalog.setPrices("b/y", 1.5, 3);
    const change = store.catalog.sync([model("a/x", { contextLength: 1024 }), model("c/z", { loadError: "bad" })]);
    expect(change).toEqual({ added: ["c/z"], updated: ["a/x"], missing: ["b/y"] });
    expect(store.catalog.get("a/x")).toMatchObject({ status: "inactive", contextLength: 1024 });
    expect(store.catalog.listServed().map((m) => m.id)).toEqual([]);
    store.catalog.setStatus("a/x", "active");
    expect(store.catalog.listServed().map((m) => m.id)).toEqual(["a/x"]);
    store.catalog.sync([model("a/x"), model("b/y")]);
    expect(store.catalog.get("b/y")).toMatchObject({ present: true, inputPricePerMTok: 1.5, outputPricePerMTok: 3 });
    expect(() => store.catalog.setPrices("b/y", -1, 0)).toThrow();
    store.close();
  });

  test("access: all served models until restricted; grants and revokes", () => {
    const store = openSqliteStore(dbPath());
    store.catalog.sync([model("a/x"), model("b/y")]);
    const acct = store.accounts.create("t");
    expect(store.catalog.listForAccount(acct.id).map((m) => m.id)).toEqual(["a/x", "b/y"]);
    store.catalog.revoke(acct.id, "a/x");
    expect(store.accounts.get("t")!.modelAccess).toBe("listed");
    expect(store.catalog.listForAccount(acct.id).map((m) => m.id)).toEqual(["b/y"]);
    expect(store.catalog.getForAccount(acct.id, "a/x")).toBeNull();
    store.catalog.sync([model("a/x"), model("b/y"), model("c/new")]);
    // A restricted account does not gain new models by itself.
    expect(store.catalog.listForAccount(acct.id).map((m) => m.id)).toEqual(["b/y"]);
    store.catalog.grant(acct.id, "c/new");
    expect(store.catalog.listForAccount(acct.id).map((m) => m.id)).toEqual(["b/y", "c/new"]);
    expect(() => store.catalog.grant(acct.id, "no/such")).toThrow(/no model/);
    store.catalog.allowAll(acct.id);
    expect(store.accounts.get("t")!.modelAccess).toBe("all");
    expect(store.catalog.listForAccount(acct.id).map((m) => m.id)).toEqual(["a/x", "b/y", "c/new"]);
    expect(store.catalog.grants(acct.id)).toEqual([]);
    store.close();
  });
});

describe("usage", () => {
  test("rows are recorded with metadata and listed per account, newest first", () => {
    const store = openSqliteStore(dbPath());
    const a = store.accounts.create("a");
    const b = store.accounts.create("b");
    const base = { keyId: null, modelId: "m", promptTokens: 3, completionTokens: 4, latencyMs: 10.4, status: "ok", finishReason: "stop", user: "u1" };
    store.usage.record({ ...base, requestId: "r1", accountId: a.id, metadata: { k: "v" }, createdAt: 1000 });
    store.usage.record({ ...base, requestId: "r2", accountId: a.id, metadata: null, createdAt: 2000 });
    store.usage.record({ ...base, requestId: "r3", accountId: b.id, metadata: null, createdAt: 3000 });
    const rows = store.usage.list(a.id);
    expect(rows.map((r) => r.requestId)).toEqual(["r2", "r1"]);
    expect(rows[1]).toMatchObject({ metadata: { k: "v" }, latencyMs: 10, user: "u1" });
    expect(store.usage.list(a.id, { since: 1500 }).map((r) => r.requestId)).toEqual(["r2"]);
    expect(store.usage.countAll()).toBe(3);
    store.close();
  });
});
