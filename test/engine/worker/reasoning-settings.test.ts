// reasoning_effort as each kind of template understands it: Qwen3's enable_thinking switch, a
// template that reads reasoning_effort itself (harmony's "Reasoning:" line), and the thinking
// budget the engine keeps.
import { describe, expect, test } from "bun:test";
import { DEFAULT_BUDGETS } from "../../../src/structured/reasoning/index.ts";
import { templateSettings, type ModelReasoning, type TemplateContext } from "../../../src/engine/worker/reasoning.ts";
import type { WireRequest } from "../../../src/engine/worker/protocol.ts";
import { EngineRequestError, type ReasoningEffort } from "../../../src/engine/types.ts";

const format = { tags: { start: "<think>", end: "</think>" }, budgets: DEFAULT_BUDGETS };
const HARMONY: ModelReasoning = {
  format: { tags: { start: "<|channel|>analysis<|message|>", end: "<|end|>" }, budgets: DEFAULT_BUDGETS },
  tokens: { start: [200005, 35644, 200008], end: [200007] },
  switch: null,
  harmony: {
    tokens: { start: 200006, end: 200007, message: 200008, channel: 200005, constrain: 200003, return: 200002, call: 200012 },
    openAnalysis: [200005, 35644, 200008],
    openFinal: [200005, 17196, 200008],
    nextFinal: [200006, 173781, 200005, 17196, 200008],
  },
};
const QWEN: ModelReasoning = { format, tokens: { start: [1], end: [2] }, switch: "enable_thinking", harmony: null };
const context = (...variables: string[]): TemplateContext => ({ variables: new Set(variables), reserved: new Set(["messages"]) });
const req = (reasoningEffort?: ReasoningEffort, chatTemplateKwargs?: Record<string, unknown>) => ({ reasoningEffort, chatTemplateKwargs }) as unknown as WireRequest;

describe("reasoning_effort", () => {
  test("harmony: the template's reasoning_effort gets the word, the engine the budget; none and minimal are low with no thinking", () => {
    const ctx = context("reasoning_effort");
    expect(templateSettings(req("high"), "m", ctx, HARMONY)).toEqual({ kwargs: { reasoning_effort: "high" }, budget: DEFAULT_BUDGETS.high });
    expect(templateSettings(req("low"), "m", ctx, HARMONY)).toEqual({ kwargs: { reasoning_effort: "low" }, budget: DEFAULT_BUDGETS.low });
    expect(templateSettings(req("none"), "m", ctx, HARMONY)).toEqual({ kwargs: { reasoning_effort: "low" }, budget: 0 });
    expect(templateSettings(req("minimal"), "m", ctx, HARMONY)).toEqual({ kwargs: { reasoning_effort: "low" }, budget: 0 });
    expect(templateSettings(req(), "m", ctx, HARMONY)).toEqual({ kwargs: {}, budget: Infinity });
  });

  test("Qwen3: enable_thinking follows it; a contradicting kwarg is refused", () => {
    const ctx = context("enable_thinking");
    expect(templateSettings(req("none"), "m", ctx, QWEN)).toEqual({ kwargs: { enable_thinking: false }, budget: 0 });
    expect(templateSettings(req("medium"), "m", ctx, QWEN)).toEqual({ kwargs: { enable_thinking: true }, budget: DEFAULT_BUDGETS.medium });
    expect(() => templateSettings(req("high", { enable_thinking: false }), "m", ctx, QWEN)).toThrow(EngineRequestError);
  });
});
