import type { Database } from "bun:sqlite";

/**
 * The number that migration 3's triggers bump whenever a key is revoked or a rate limit changes,
 * from any connection. A cache that remembers the number it was filled at is valid while the
 * number stays the same: one primary-key read per request instead of the lookups it saves.
 */
export function authGeneration(db: Database): () => number {
  const q = db.query<{ n: number }, []>("SELECT n FROM auth_generation WHERE id = 1");
  return () => q.get()?.n ?? 0;
}

/** A bounded map that forgets its least recently used entry first. */
export class Lru<K, V> {
  private readonly map = new Map<K, V>();
  constructor(private readonly capacity: number) {}

  get(k: K): V | undefined {
    const v = this.map.get(k);
    if (v !== undefined) {
      this.map.delete(k);
      this.map.set(k, v);
    }
    return v;
  }

  set(k: K, v: V): void {
    this.map.delete(k);
    this.map.set(k, v);
    if (this.map.size > this.capacity) this.map.delete(this.map.keys().next().value as K);
  }

  clear(): void {
    this.map.clear();
  }

  get size(): number {
    return this.map.size;
  }
}
