import type { Database } from "bun:sqlite";

/**
 * The number that migration 3's triggers bump whenever a key is revoked or a rate limit changes,
 * from any connection. A cache that remembers the number it was filled at is valid while the
 * number stays the same: one primary-key read per request instead of the lookups it saves.
 */
export function authGeneration(db: Database): () => number {
  let read = readers.get(db);
  if (!read) {
    const q = db.query<{ n: number }, []>("SELECT n FROM auth_generation WHERE id = 1");
    // Read once per synchronous turn: the key, limit and model-list caches of one request share
    // the read. A change committed meanwhile is seen by the next request, as without the memo.
    // This process's own writes forget the memo at once (see forgetGeneration).
    let memo = -1;
    const forget = () => (memo = -1);
    read = () => {
      if (memo < 0) {
        memo = q.get()?.n ?? 0;
        queueMicrotask(forget);
      }
      return memo;
    };
    readers.set(db, read);
    forgetters.set(db, forget);
  }
  return read;
}

const readers = new WeakMap<Database, () => number>();
const forgetters = new WeakMap<Database, () => void>();

/** After a write that moves the generation: the next read in this turn goes to the database. */
export function forgetGeneration(db: Database): void {
  forgetters.get(db)?.();
}

/** Wraps the named methods of a store part so that each call forgets the memo afterwards. */
export function forgettingAfter<T extends object>(db: Database, part: T, methods: (keyof T)[]): T {
  const out = { ...part };
  for (const m of methods) {
    const f = part[m] as unknown as (...a: unknown[]) => unknown;
    (out as Record<keyof T, unknown>)[m] = (...a: unknown[]) => {
      try {
        return f.apply(part, a);
      } finally {
        forgetGeneration(db);
      }
    };
  }
  return out;
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
