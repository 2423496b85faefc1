import { accountStore } from "./accounts.ts";
import { billingStore } from "./billing.ts";
import { catalogStore } from "./catalog.ts";
import { openDatabase } from "./db.ts";
import { keyStore } from "./keys.ts";
import { cachedKeyStore } from "./key-cache.ts";
import { limitStore } from "./limits.ts";
import { authGeneration, closeGeneration, forgettingAfter } from "./generation.ts";
import type { Store } from "./types.ts";
import { usageStore } from "./usage.ts";
import { sessionStore, signInThrottleStore } from "./sessions.ts";
import { usageReportStore } from "./usage-reports.ts";
import { userStore } from "./users.ts";

export type * from "./types.ts";
export { KEY_PREFIX } from "./keys.ts";
export { EMAIL, MIN_PASSWORD_LENGTH } from "./users.ts";

/** The SQLite-backed store: one file, WAL mode, migrated on open. */
export function openSqliteStore(path: string): Store {
  const db = openDatabase(path);
  const ping = db.query("SELECT 1");
  let closed = false;
  return {
    accounts: forgettingAfter(db, accountStore(db), ["setPriority"]),
    keys: forgettingAfter(db, cachedKeyStore(keyStore(db), db), ["revoke"]),
    limits: forgettingAfter(db, limitStore(db), ["set"]),
    catalog: forgettingAfter(db, catalogStore(db), ["sync", "setStatus", "setPrices", "setKeepAlive", "grant", "revoke"]),
    usage: usageStore(db),
    billing: forgettingAfter(db, billingStore(db), ["setPlan"]),
    users: userStore(db),
    sessions: sessionStore(db),
    signIns: signInThrottleStore(db),
    usageReports: usageReportStore(db),
    atomically: <T>(fn: () => T): T => db.transaction(fn)(),
    cacheGeneration: authGeneration(db),
    healthy() {
      if (closed) return false;
      try {
        ping.get();
        return true;
      } catch {
        return false;
      }
    },
    close() {
      if (closed) return;
      closed = true;
      closeGeneration(db);
      db.close();
    },
  };
}
