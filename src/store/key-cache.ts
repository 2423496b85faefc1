// Authentication without SQL on the hot path: a small LRU of key hash → key info, emptied whenever
// the auth generation moves (a revocation anywhere), so a revoked key fails on its next request.
import type { Database } from "bun:sqlite";
import { authGeneration, Lru } from "./generation.ts";
import { hashKey, KEY_PREFIX } from "./keys.ts";
import type { ApiKeyInfo, KeyStore } from "./types.ts";

// Same interval as keys.ts: last_used_at is advisory, so most requests need not reach SQLite at all.
const TOUCH_INTERVAL_MS = 30_000;

export function cachedKeyStore(inner: KeyStore, db: Database, capacity = 4096): KeyStore {
  const generation = authGeneration(db);
  const cache = new Lru<string, ApiKeyInfo>(capacity);
  const touched = new Map<string, number>();
  let seen = -1;
  return {
    ...inner,
    authenticate(plainKey) {
      if (!plainKey.startsWith(KEY_PREFIX)) return null;
      const now = generation();
      if (now !== seen) {
        cache.clear();
        seen = now;
      }
      // Keyed by the hash, so the cache holds no plain key either.
      const hash = hashKey(plainKey);
      const hit = cache.get(hash);
      if (hit) return hit;
      const info = inner.authenticate(plainKey);
      if (!info) return null;
      // Unknown keys are not cached: a flood of random keys cannot evict the real ones. Frozen, so
      // the one object every request gets back cannot be changed by any of them.
      const frozen = Object.freeze(info);
      cache.set(hash, frozen);
      return frozen;
    },
    touch(keyId, at = Date.now()) {
      const last = touched.get(keyId);
      if (last !== undefined && at - last < TOUCH_INTERVAL_MS) return;
      if (touched.size >= capacity) touched.clear();
      touched.set(keyId, at);
      inner.touch(keyId, at);
    },
  };
}
