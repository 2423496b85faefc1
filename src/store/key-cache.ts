// Authentication without SQL on the hot path: a small LRU of key hash → key info, emptied whenever
// the change signal moves (a revocation anywhere), so a revoked key fails on its next request
// (SQLite) or within the signal's bound (PostgreSQL: a notification, or the periodic check).
import { SignalledLru, type ChangeSignal } from "./generation.ts";
import { hashKey, KEY_PREFIX, TOUCH_INTERVAL_MS } from "./keys.ts";
import type { ApiKeyInfo, KeyStore } from "./types.ts";

const DONE = Promise.resolve();

export function cachedKeyStore(inner: KeyStore, signal: ChangeSignal, capacity = 4096): KeyStore {
  const cache = new SignalledLru<string, ApiKeyInfo>(signal, capacity);
  const touched = new Map<string, number>();
  return {
    ...inner,
    peek(plainKey) {
      if (!plainKey.startsWith(KEY_PREFIX)) return null;
      // Keyed by the hash, so the cache holds no plain key either.
      return cache.get(hashKey(plainKey));
    },
    async authenticate(plainKey) {
      if (!plainKey.startsWith(KEY_PREFIX)) return null;
      const hash = hashKey(plainKey);
      const hit = cache.get(hash);
      if (hit) return hit;
      const at = cache.mark();
      const info = await inner.authenticate(plainKey);
      if (!info) return null;
      // Unknown keys are not cached: a flood of random keys cannot evict the real ones. Frozen, so
      // the one object every request gets back cannot be changed by any of them.
      const frozen = Object.freeze(info);
      cache.setFrom(at, hash, frozen);
      return frozen;
    },
    touch(keyId, at = Date.now()) {
      const last = touched.get(keyId);
      // Most requests: nothing to write, and no promise made for it.
      if (last !== undefined && at - last < TOUCH_INTERVAL_MS) return DONE;
      if (touched.size >= capacity) touched.clear();
      touched.set(keyId, at);
      // last_used_at is advisory: a failed write (the database away) is not the request's failure.
      return inner.touch(keyId, at).catch(() => {});
    },
  };
}
