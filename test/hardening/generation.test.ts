// The cache generation is re-read only when SQLite's wal-index header moved: these tests make the
// changes from other processes (as `sluice keys revoke` does) and check that every one is seen by
// the very next read, including after checkpoints that restart the WAL.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { join } from "node:path";
import { openSqliteStore, type Store } from "../../src/store/index.ts";
import { watchWalIndex } from "../../src/store/wal-index.ts";
import { Database } from "bun:sqlite";
import { BUN, REPO, tempDir } from "../helpers/paths.ts";

const dir = tempDir("sluice-generation-");
const file = join(dir.path, "sluice.db");
let store: Store;
beforeAll(() => {
  store = openSqliteStore(file);
});
afterAll(() => {
  store.close();
  dir.remove();
});

/** Runs a script against the same database file in a separate process. */
function inOtherProcess(script: string): string {
  const p = Bun.spawnSync(
    [BUN, "-e", `import { openSqliteStore } from "${join(REPO, "src/store/index.ts")}"; const s = openSqliteStore(${JSON.stringify(file)}); ${script}; await s.close();`],
    { stdout: "pipe", stderr: "pipe" },
  );
  if (p.exitCode !== 0) throw new Error(p.stderr.toString());
  return p.stdout.toString().trim();
}

test("the WAL index is watched on a file database (else every read would be a SQLite read)", async () => {
  store.cacheGeneration();
  const db = new Database(file);
  try {
    const w = watchWalIndex(db);
    expect(w).not.toBeNull();
    expect(w!.moved()).toBe(true); // nothing marked yet
    w!.mark();
    expect(w!.moved()).toBe(false);
    db.exec("UPDATE auth_generation SET n = n + 1 WHERE id = 1");
    expect(w!.moved()).toBe(true);
    w!.close();
    expect(w!.moved()).toBe(true);
  } finally {
    db.close();
  }
  expect(watchWalIndex(new Database(":memory:"))).toBeNull();
});

test("a key revoked by another process fails on the next authentication", async () => {
  const account = (await store.accounts.get("acme")) ?? (await store.accounts.create("acme"));
  const { key, info } = await store.keys.create(account.id, "other process");
  expect((await store.keys.authenticate(key))?.id).toBe(info.id);
  expect((await store.keys.authenticate(key))?.id).toBe(info.id); // from the cache now
  const before = store.cacheGeneration();
  expect(inOtherProcess(`console.log(await s.keys.revoke(${JSON.stringify(info.id)}))`)).toBe("true");
  expect(store.cacheGeneration()).not.toBe(before);
  expect((await store.keys.authenticate(key))).toBeNull();
});

test("changes stay visible across WAL checkpoints and restarts", async () => {
  const account = (await store.accounts.get("acme")) ?? (await store.accounts.create("acme"));
  for (let round = 0; round < 4; round++) {
    const { key, info } = await store.keys.create(account.id, `round ${round}`);
    expect((await store.keys.authenticate(key))).not.toBeNull();
    // A truncating checkpoint empties the WAL; the next commit restarts it from the first frame.
    inOtherProcess(`await s.atomically(async () => {}); new (require("bun:sqlite").Database)(${JSON.stringify(file)}).exec("PRAGMA wal_checkpoint(TRUNCATE)")`);
    expect((await store.keys.authenticate(key))).not.toBeNull();
    inOtherProcess(`(await s.keys.revoke(${JSON.stringify(info.id)}))`);
    expect((await store.keys.authenticate(key))).toBeNull();
  }
});

test("a rate limit set by another process is seen by the next lookup", async () => {
  const account = (await store.accounts.get("acme")) ?? (await store.accounts.create("acme"));
  expect((await store.limits.effective(account.id, "key_none")).account).toBeNull();
  inOtherProcess(`(await s.limits.set(${account.id}, null, { requestsPerMinute: 7, tokensPerMinute: null, maxConcurrent: null }))`);
  expect((await store.limits.effective(account.id, "key_none")).account?.requestsPerMinute).toBe(7);
});

test("without a WAL index (in memory) the generation is still exact for this connection", async () => {
  const mem = openSqliteStore(":memory:");
  try {
    const account = await mem.accounts.create("m");
    const { key, info } = await mem.keys.create(account.id, "k");
    expect((await mem.keys.authenticate(key))).not.toBeNull();
    expect((await mem.keys.revoke(info.id))).toBe(true);
    expect((await mem.keys.authenticate(key))).toBeNull();
  } finally {
    mem.close();
  }
});
