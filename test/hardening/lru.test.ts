// The LRU behind the key and limit caches: bounded, least recently used out first, and the
// shortcut for the key asked last neither changes what is evicted nor outlives a clear.
import { expect, test } from "bun:test";
import { Lru } from "../../src/store/generation.ts";

test("evicts the least recently used entry; a get refreshes, also through the last-key shortcut", () => {
  const lru = new Lru<string, number>(3);
  lru.set("a", 1);
  lru.set("b", 2);
  lru.set("c", 3);
  expect(lru.get("a")).toBe(1); // a is now the most recent
  expect(lru.get("a")).toBe(1); // the shortcut: still the most recent
  lru.set("d", 4); // evicts b
  expect(lru.get("b")).toBeUndefined();
  expect(lru.get("c")).toBe(3);
  expect(lru.get("a")).toBe(1);
  expect(lru.get("d")).toBe(4);
  lru.set("e", 5); // evicts c (a and d were used after it)
  expect(lru.get("c")).toBeUndefined();
  expect(lru.size).toBe(3);
});

test("a value replaced or cleared is not served from the shortcut", () => {
  const lru = new Lru<string, number>(2);
  lru.set("k", 1);
  expect(lru.get("k")).toBe(1);
  lru.set("k", 2);
  expect(lru.get("k")).toBe(2);
  lru.clear();
  expect(lru.get("k")).toBeUndefined();
  expect(lru.size).toBe(0);
});

test("capacity 1: the newest entry is kept and served", () => {
  const lru = new Lru<string, number>(1);
  lru.set("x", 1);
  lru.set("y", 2);
  expect(lru.get("x")).toBeUndefined();
  expect(lru.get("y")).toBe(2);
});
