import { accountStore } from "./accounts.ts";
import { catalogStore } from "./catalog.ts";
import { openDatabase } from "./db.ts";
import { keyStore } from "./keys.ts";
import type { Store } from "./types.ts";
import { usageStore } from "./usage.ts";

export type * from "./types.ts";
export { KEY_PREFIX } from "./keys.ts";

/** The SQLite-backed store: one file, WAL mode, migrated on open. */
export function openSqliteStore(path: string): Store {
  const db = openDatabase(path);
  const ping = db.query("SELECT 1");
  let closed = false;
  return {
    accounts: accountStore(db),
    keys: keyStore(db),
    catalog: catalogStore(db),
    usage: usageStore(db),
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
      db.close();
    },
  };
}
