// The admission order of a model's waiting requests (fair-queue.ts), without a model.
import { expect, test } from "bun:test";
import { FairQueue, type Waiting } from "../../../src/engine/worker/fair-queue.ts";

interface Item extends Waiting {
  name: string;
}

function queue(order: "fair" | "fifo" = "fair") {
  const q = new FairQueue<Item>(order);
  const add = (name: string, fairKey: string, priority = 0) => {
    const item: Item = { name, fairKey, priority, arrival: q.stamp() };
    q.push(item);
    return item;
  };
  /** Admits the next one (it starts running) and returns its name. */
  const next = () => {
    const item = q.peek()!;
    q.take(item);
    q.started(item.fairKey);
    return item;
  };
  return { q, add, next };
}

test("keys take turns by tokens served, not by requests; each key keeps its own arrival order", () => {
  const { q, add, next } = queue();
  for (let i = 0; i < 4; i++) add(`a${i}`, "A");
  add("b0", "B");
  add("b1", "B");
  // Both keys start even: the earlier arrival breaks the tie, then B (fewer running) goes.
  const first = next();
  expect(first.name).toBe("a0");
  expect(next().name).toBe("b0");
  // A is charged a long answer, B a short one: B goes again before A's next request.
  q.charge("A", 500);
  q.charge("B", 10);
  expect(next().name).toBe("b1");
  expect(next().name).toBe("a1");
  expect(q.length).toBe(2);
  expect(q.waitingFor("A")).toBe(2);
});

test("a higher priority goes first whatever it was served; fifo ignores keys and priorities", () => {
  const fair = queue();
  fair.add("a0", "A");
  fair.add("a1", "A");
  fair.add("v0", "VIP", 5);
  fair.q.charge("VIP", 10_000);
  expect(fair.next().name).toBe("v0");
  expect(fair.next().name).toBe("a0");

  const fifo = queue("fifo");
  fifo.add("a0", "A");
  fifo.add("v0", "VIP", 5);
  fifo.add("a1", "A");
  expect([fifo.next().name, fifo.next().name, fifo.next().name]).toEqual(["a0", "v0", "a1"]);
});

test("a key that comes back after a pause is lifted to the others' counters: no banked credit", () => {
  const { q, add, next } = queue();
  add("b0", "B");
  q.charge("B", 5); // B was served a little long ago, then left
  const b0 = next();
  q.ended(b0.fairKey);
  // A has been served a lot since.
  add("a0", "A");
  const a0 = next();
  q.charge("A", 10_000);
  add("a1", "A");
  // B returns: it is lifted to A's counter, not left 10,000 tokens behind.
  add("b1", "B");
  expect(q.servedTo("B")).toBe(q.servedTo("A"));
  // Tied: B, with nothing running, goes first; then they alternate as charged.
  expect(next().name).toBe("b1");
  q.ended(a0.fairKey);
  expect(next().name).toBe("a1");
});

test("a preempted request goes back in front of its key's later arrivals", () => {
  const { q, add, next } = queue();
  add("a0", "A");
  add("a1", "A");
  const a0 = next();
  q.ended(a0.fairKey);
  q.requeue(a0);
  expect(next().name).toBe("a0");
  expect(next().name).toBe("a1");
});
