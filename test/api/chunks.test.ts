// A stream's events that arrive together become one chunk per choice and kind: the text joined,
// the logprobs kept one per token, each choice's order kept, nothing else merged.
import { expect, test } from "bun:test";
import { ChoiceAccumulator } from "../../src/api/chat/response.ts";
import { coalesceEvents } from "../../src/engine/events.ts";
import type { GenerationEvent, TokenLogprob } from "../../src/engine/types.ts";

const lp = (token: string): TokenLogprob => ({ token, logprob: -1, bytes: [...Buffer.from(token)], top_logprobs: [] });

test("consecutive text of a choice joins; its logprobs stay one per token, in order", () => {
  const events: GenerationEvent[] = [
    { type: "prompt", cachedTokens: 3 },
    { type: "reasoning", index: 0, text: "hm" },
    { type: "reasoning", index: 0, text: "m" },
    { type: "content", index: 0, text: "Once", logprobs: [lp("Once")] },
    { type: "content", index: 1, text: "The", logprobs: [lp("The")] },
    { type: "content", index: 0, text: " upon", logprobs: [lp(" upon")] },
    { type: "content", index: 1, text: " end", logprobs: [lp(" end")] },
    { type: "finish", index: 1, reason: "stop", completionTokens: 2, reasoningTokens: 0 },
    { type: "content", index: 0, text: " a", logprobs: [lp(" a")] },
  ];
  expect(coalesceEvents(events)).toEqual([
    { type: "prompt", cachedTokens: 3 },
    { type: "reasoning", index: 0, text: "hmm" },
    { type: "content", index: 0, text: "Once upon a", logprobs: [lp("Once"), lp(" upon"), lp(" a")] },
    { type: "content", index: 1, text: "The end", logprobs: [lp("The"), lp(" end")] },
    { type: "finish", index: 1, reason: "stop", completionTokens: 2, reasoningTokens: 0 },
  ]);
});

test("a choice's events of other kinds are never passed: text after a tool call or a finish starts a new event", () => {
  const events: GenerationEvent[] = [
    { type: "content", index: 0, text: "a" },
    { type: "tool_call", index: 0, toolIndex: 0, id: "call_1", name: "f", argumentsDelta: "{" },
    { type: "tool_call", index: 0, toolIndex: 0, argumentsDelta: "}" },
    { type: "content", index: 0, text: "b" },
    { type: "reasoning", index: 0, text: "c" },
    { type: "content", index: 0, text: "d" },
  ];
  // Nothing to join here: no two text events of one kind are next to each other in the choice.
  expect(coalesceEvents(events)).toEqual(events);
  // Without logprobs none appear.
  expect(coalesceEvents([{ type: "content", index: 0, text: "a" }, { type: "content", index: 0, text: "b" }])).toEqual([{ type: "content", index: 0, text: "ab" }]);
});

test("what the choices add up to is the same joined or not", () => {
  const events: GenerationEvent[] = [];
  for (let i = 0; i < 30; i++) events.push({ type: "content", index: i % 3, text: `t${i} `, logprobs: [lp(`t${i}`)] });
  for (let c = 0; c < 3; c++) events.push({ type: "finish", index: c, reason: "length", completionTokens: 10, reasoningTokens: 0 });
  const apart = new ChoiceAccumulator(3, true);
  const joined = new ChoiceAccumulator(3, true);
  for (const e of events) apart.add(e);
  const merged = coalesceEvents(events);
  expect(merged.length).toBe(6);
  for (const e of merged) joined.add(e);
  expect(joined.choices).toEqual(apart.choices);
});
