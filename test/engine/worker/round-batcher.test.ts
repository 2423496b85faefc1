// The worker's rounds reach the HTTP thread at once when urgent, else at most one post per
// interval, in order, with nothing lost.
import { expect, test } from "bun:test";
import type { RoundMessage } from "../../../src/engine/worker/protocol.ts";
import { joinRounds, RoundBatcher } from "../../../src/engine/worker/round-batcher.ts";

const events = (rid: number, text: string): RoundMessage => ({ type: "events", rid, events: [{ type: "content", index: 0, text }] });

test("rounds within the interval wait for the next post; urgent ones and later ones go at once, in order", () => {
  let clock = 0;
  const posts: RoundMessage[][] = [];
  const b = new RoundBatcher((m) => posts.push(m), 1, () => clock);
  b.endRound(false); // nothing pending: no post
  expect(posts).toHaveLength(0);
  b.add(events(1, "a"));
  b.endRound(false); // first post ever
  expect(posts).toHaveLength(1);
  clock = 0.4;
  b.add(events(1, "b"));
  b.endRound(false); // held
  clock = 0.8;
  b.add(events(1, "c"));
  b.endRound(false); // still within 1 ms of the last post
  expect(posts).toHaveLength(1);
  clock = 1.1;
  b.add(events(1, "d"));
  b.endRound(false);
  expect(posts).toHaveLength(2);
  expect(posts[1]!.map((m) => (m.type === "events" && m.events[0]!.type === "content" ? m.events[0]!.text : "")).join("")).toBe("bcd");
  clock = 1.2;
  b.add(events(1, "e"));
  b.add({ type: "done", rid: 1 });
  b.endRound(true); // urgent: at once
  expect(posts).toHaveLength(3);
  expect(posts[2]!.map((m) => m.type)).toEqual(["events", "done"]);
});

test("the interval is the one the model was loaded with: 0 posts every round, a longer one holds more", () => {
  let clock = 0;
  const posts: RoundMessage[][] = [];
  const b = new RoundBatcher((m) => posts.push(m), 10, () => clock);
  b.add(events(1, "a"));
  b.endRound(false);
  for (const t of [1, 4, 9.9]) {
    clock = t;
    b.add(events(1, "x"));
    b.endRound(false);
  }
  expect(posts).toHaveLength(1); // all within 10 ms of the first post
  b.intervalMs = 0; // --stream-interval-ms 0
  clock = 10;
  b.endRound(false); // the held rounds go with the next round's end
  expect(posts).toHaveLength(2);
  // The three held rounds of the request as one message, their text joined.
  expect(posts[1]!).toEqual([{ type: "events", rid: 1, events: [{ type: "content", index: 0, text: "xxx" }] }]);
  for (const t of [10, 10, 10.1]) {
    clock = t;
    b.add(events(1, "y"));
    b.endRound(false);
  }
  expect(posts).toHaveLength(5);
});

test("held rounds join per request: each request's events once, where they began, its end after them", () => {
  const rounds: RoundMessage[] = [
    events(1, "a"),
    events(2, "p"),
    events(1, "b"),
    { type: "events", rid: 2, events: [{ type: "finish", index: 0, reason: "stop", completionTokens: 2, reasoningTokens: 0 }] },
    { type: "done", rid: 2 },
    events(1, "c"),
    { type: "events", rid: 3, events: [{ type: "prompt", cachedTokens: 0 }] },
    events(3, "x"),
  ];
  expect(joinRounds(rounds)).toEqual([
    { type: "events", rid: 1, events: [{ type: "content", index: 0, text: "abc" }] },
    { type: "events", rid: 2, events: [{ type: "content", index: 0, text: "p" }, { type: "finish", index: 0, reason: "stop", completionTokens: 2, reasoningTokens: 0 }] },
    { type: "done", rid: 2 },
    { type: "events", rid: 3, events: [{ type: "prompt", cachedTokens: 0 }, { type: "content", index: 0, text: "x" }] },
  ]);
  // The messages posted are new: the rounds given are left as they were.
  expect(rounds[0]).toEqual(events(1, "a"));
});
