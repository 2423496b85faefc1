// A request's bookkeeping (its usage row, the end of its registration in flight) must land even
// when the database is away at the moment it is written: a write that finds the database
// unreachable is tried again in the background until it lands, so a node that keeps running
// records everything once the database is back. (A node that dies meanwhile leaves the request
// in flight; the sweep of a live node records it as interrupted.)
import type { Logger } from "../log.ts";
import { StoreUnavailableError } from "../store/index.ts";

const RETRY_MS = 1000;
const GIVE_UP_MS = 3600_000;

/**
 * Runs `write` now; the result of the first attempt, or undefined when the database was
 * unreachable and the write was left to the retries. Other errors are logged, not thrown.
 */
export async function eventually<T>(log: Logger, what: string, fields: Record<string, unknown>, write: () => Promise<T>): Promise<T | undefined> {
  try {
    return await write();
  } catch (e) {
    if (!(e instanceof StoreUnavailableError)) {
      log.error(`could not ${what}`, { ...fields, error: (e as Error).message });
      return undefined;
    }
    log.warn(`database unavailable: will ${what} when it is back`, { ...fields, error: e.message });
  }
  const until = Date.now() + GIVE_UP_MS;
  const retry = async () => {
    try {
      await write();
      log.info(`database back: did ${what}`, fields);
    } catch (e) {
      if (e instanceof StoreUnavailableError && Date.now() < until) setTimeout(retry, RETRY_MS).unref();
      else log.error(`could not ${what}`, { ...fields, error: (e as Error).message });
    }
  };
  setTimeout(retry, RETRY_MS).unref();
  return undefined;
}
