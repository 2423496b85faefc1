// The prefix cache serves each account only its own prompts: a hit shows in the response
// (cached_tokens, an earlier first token), so a cache shared between accounts would tell one what
// another had sent.
import { afterAll, beforeAll, expect, test } from "bun:test";
import type { GenerationEvent } from "../../../src/engine/types.ts";
import { syntheticModel, tinyModelsRoot } from "../../helpers/models.ts";
import { SchedulerHarness } from "../speculation/harness.ts";

let h: SchedulerHarness;
beforeAll(async () => {
  const dir = await syntheticModel(tinyModelsRoot(), "prefix-owner", { preset: "tiny-bytes", id: "prefix-owner", variant: "fused", seed: 3 });
  h = new SchedulerHarness(await SchedulerHarness.load(dir, "prefix-owner"), { prefixMinTokens: 8 });
}, 60_000);
afterAll(async () => {
  h.stop();
  await h.runner.decoder.release();
});

const cached = (events: GenerationEvent[]) => events.find((e): e is Extract<GenerationEvent, { type: "prompt" }> => e.type === "prompt")!.cachedTokens;

test("an account's prompt is cached for that account alone", async () => {
  const content = "A long system prompt that several accounts might send, followed by a question.";
  const ask = async (fairnessKey: string) => cached((await h.run({ content, maxTokens: 4, fairnessKey })).events);
  expect(await ask("a")).toBe(0);
  const again = await ask("a");
  expect(again).toBeGreaterThan(40);
  // Another account sending the same prompt reads nothing of a's: it computes it, then has its own.
  expect(await ask("b")).toBe(0);
  expect(await ask("b")).toBe(again);
  expect(await ask("a")).toBe(again);
});
