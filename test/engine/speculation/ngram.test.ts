// Prompt lookup: the draft continues the longest earlier match of the text's ending.
import { expect, test } from "bun:test";
import { MAX_MATCH, NgramDrafter } from "../../../src/engine/speculation/ngram.ts";

test("the draft continues the longest match of the ending, the most recent among equals", () => {
  // Ending "2 3": matched at 1-2 (then 4 5) and at 8-9 (then 7 7); "1 2 3" only at 0-2.
  const d = new NgramDrafter([1, 2, 3, 4, 5, 6, 0, 2, 3, 7, 7, 9, 1, 2, 3]);
  expect(d.propose(3)).toEqual({ tokens: [4, 5, 6], match: 3 });
  const e = new NgramDrafter([5, 2, 3, 4, 0, 2, 3, 8, 9, 2, 3]);
  expect(e.propose(2)).toEqual({ tokens: [8, 9], match: 2 });
});

test("generated tokens are searched with the prompt, and a repeating pattern runs on through the draft", () => {
  const d = new NgramDrafter([10, 11], [12, 13, 12, 13]);
  expect(d.propose(5)).toEqual({ tokens: [12, 13, 12, 13, 12], match: 2 });
  d.push(99);
  expect(d.propose(4)).toEqual({ tokens: [], match: 0 });
  d.push(12);
  expect(d.propose(2)).toEqual({ tokens: [13, 99], match: 1 });
  expect(d.length).toBe(8);
});

test("matches are capped at MAX_MATCH tokens, drafts at the asked length", () => {
  const run = Array.from({ length: 40 }, (_, i) => i % 5);
  const d = new NgramDrafter(run);
  const p = d.propose(3);
  expect(p.match).toBe(MAX_MATCH);
  expect(p.tokens).toEqual([0, 1, 2]);
  expect(d.propose(0).tokens).toEqual([]);
  expect(new NgramDrafter([7]).propose(4).tokens).toEqual([]);
});

test("choices of one request share the prompt's index but not their own tokens", () => {
  const prompt = [1, 2, 3, 1, 2];
  const a = new NgramDrafter(prompt, [8]);
  const b = new NgramDrafter(prompt, [3]);
  expect(a.propose(2).tokens).toEqual([]);
  expect(b.propose(2)).toEqual({ tokens: [1, 2], match: 3 });
});
