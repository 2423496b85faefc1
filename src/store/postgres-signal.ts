// The change signal of a PostgreSQL store: the counter's triggers NOTIFY every listening node at
// commit, and a periodic read of the counter catches what a lost notification or a dropped
// listening connection missed. While the database cannot be read, the signal moves on every call,
// so no cache answers for it (requests then reach the database and fail with 503 while it is down).
import type { SQL } from "bun";
import type { ChangeSignal } from "./generation.ts";
import { CHANGE_CHANNEL } from "./schema.ts";

export interface PostgresSignalOptions {
  /** The backstop: how often the counter is read whatever the notifications say. */
  pollMs: number;
  onError?: (e: unknown) => void;
}

export async function postgresChangeSignal(sql: SQL, opts: PostgresSignalOptions): Promise<ChangeSignal> {
  const read = async () => {
    const rows = (await sql.unsafe("SELECT n FROM auth_generation WHERE id = 1")) as { n: string | number }[];
    return Number(rows[0]?.n ?? 0);
  };
  let counter = await read();
  // What caches compare with: moves whenever the counter did (or might have).
  let generation = 1;
  let reachable = true;
  const seen = (n: number) => {
    if (n !== counter) {
      counter = n;
      generation++;
    }
  };
  const subscription = await sql.listen(
    CHANGE_CHANNEL,
    (payload) => seen(Number(payload)),
    // Also after a reconnect: whatever changed while the connection was down is unknown.
    () => generation++,
  );
  let polling = false;
  const timer = setInterval(async () => {
    if (polling) return;
    polling = true;
    try {
      const n = await read();
      if (!reachable) {
        reachable = true;
        generation++;
      }
      seen(n);
    } catch (e) {
      if (reachable) opts.onError?.(e);
      reachable = false;
      generation++;
    } finally {
      polling = false;
    }
  }, opts.pollMs);
  timer.unref();
  return {
    generation: () => (reachable ? generation : ++generation),
    forget: () => void generation++,
    close() {
      clearInterval(timer);
      void subscription.unlisten().catch(() => {});
    },
  };
}

/** For processes that keep no cache (the CLI): every read is new. */
export function uncachedSignal(): ChangeSignal {
  let generation = 0;
  return { generation: () => ++generation, forget: () => {}, close: () => {} };
}
