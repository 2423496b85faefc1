import type { Database } from "bun:sqlite";
import { watchWalIndex, type WalIndexWatch } from "./wal-index.ts";

/**
 * What a cache of keys, limits or model lists checks to stay exact: a number that moves whenever
 * the change counter of migration 3 moves (a key revoked, a limit set, the catalog or access
 * changed), from any connection, process or node.
 */
export interface ChangeSignal {
  /** The current number; cheap enough to read on every request. */
  generation(): number;
  /** After a write of this process that moved the counter: the next generation() reads again. */
  forget(): void;
  close(): void;
}

/**
 * SQLite: the change counter is read again only when the wal-index header says some connection
 * committed since the last read (see wal-index.ts): a memory compare per request instead of a
 * SQLite read transaction, and still exact, so a key revoked by another process fails on its next
 * request. Without a wal-index to watch (in-memory database), it is read once per synchronous
 * turn: the key, limit and model-list caches of one request share that read.
 */
export function sqliteChangeSignal(db: Database): ChangeSignal {
  const q = db.query<{ n: number }, []>("SELECT n FROM auth_generation WHERE id = 1");
  let memo = -1;
  let watch: WalIndexWatch | null = null;
  let tried = false;
  const forget = () => (memo = -1);
  return {
    generation() {
      if (memo >= 0 && (watch ? !watch.moved() : true)) return memo;
      // Marked before the read: a commit landing in between makes the next call read again.
      watch?.mark();
      memo = q.get()?.n ?? 0;
      if (!watch && !tried) {
        // After the first read, so that the -shm file exists; marked now, so this read is the one
        // the mark stands for (a commit since then moves the header).
        tried = true;
        watch = watchWalIndex(db);
        watch?.mark();
        if (watch) memo = q.get()?.n ?? 0;
      }
      if (!watch) queueMicrotask(forget);
      return memo;
    },
    forget,
    close() {
      watch?.close();
      watch = null;
      forget();
      q.finalize();
    },
  };
}

/** Wraps the named methods of a store part so that each call forgets the signal's memo once it settles. */
export function forgettingAfter<T extends object>(signal: ChangeSignal, part: T, methods: (keyof T)[]): T {
  const out = { ...part };
  for (const m of methods) {
    const f = part[m] as unknown as (...a: unknown[]) => unknown;
    (out as Record<keyof T, unknown>)[m] = (...a: unknown[]) => {
      let r: unknown;
      try {
        r = f.apply(part, a);
      } catch (e) {
        signal.forget();
        throw e;
      }
      if (r instanceof Promise) return r.finally(() => signal.forget());
      signal.forget();
      return r;
    };
  }
  return out;
}

/** A bounded map that forgets its least recently used entry first. */
export class Lru<K, V> {
  private readonly map = new Map<K, V>();
  // The entry used last: asked again (one hot key), it is already the most recent, so the map is
  // not touched. `hasLast` because undefined may be neither a key nor a value here.
  private lastKey: K | undefined;
  private lastValue: V | undefined;
  private hasLast = false;
  constructor(private readonly capacity: number) {}

  get(k: K): V | undefined {
    if (this.hasLast && this.lastKey === k) return this.lastValue;
    const v = this.map.get(k);
    if (v !== undefined) {
      this.map.delete(k);
      this.map.set(k, v);
      this.remember(k, v);
    }
    return v;
  }

  set(k: K, v: V): void {
    this.map.delete(k);
    this.map.set(k, v);
    this.remember(k, v);
    if (this.map.size > this.capacity) {
      const oldest = this.map.keys().next().value as K;
      this.map.delete(oldest);
      if (oldest === this.lastKey) this.hasLast = false;
    }
  }

  clear(): void {
    this.map.clear();
    this.hasLast = false;
    this.lastKey = undefined;
    this.lastValue = undefined;
  }

  get size(): number {
    return this.map.size;
  }

  private remember(k: K, v: V): void {
    this.lastKey = k;
    this.lastValue = v;
    this.hasLast = true;
  }
}

/** An LRU emptied whenever the change signal moves: the caches of the hot path (keys, limits). */
export class SignalledLru<K, V> {
  private readonly lru: Lru<K, V>;
  private seen = -1;

  constructor(
    private readonly signal: ChangeSignal,
    capacity: number,
  ) {
    this.lru = new Lru(capacity);
  }

  private sync(): void {
    const now = this.signal.generation();
    if (now !== this.seen) {
      this.lru.clear();
      this.seen = now;
    }
  }

  /** The entry, as of the current generation. */
  get(k: K): V | undefined {
    this.sync();
    return this.lru.get(k);
  }

  /** Call before reading what will be cached; hand the answer to `setFrom`. */
  mark(): number {
    this.sync();
    return this.seen;
  }

  /** Keeps v unless a change was signalled since `mark`: a read that raced a change is not kept. */
  setFrom(at: number, k: K, v: V): void {
    this.sync();
    if (this.seen === at) this.lru.set(k, v);
  }
}
