// The warm-up at load stays within its time budget however long its requests are: requests under
// way when the budget runs out are cancelled, not finished.
import { afterAll, expect, test } from "bun:test";
import { ModelRunner } from "../../../src/engine/worker/model-runner.ts";
import { warmUp } from "../../../src/engine/worker/warm-up.ts";
import { syntheticModel, tinyModelsRoot } from "../../helpers/models.ts";

let runner: ModelRunner | null = null;
afterAll(async () => {
  await runner?.decoder.release();
});

test("a budget shorter than one request: the request is cancelled at the budget, with few of its 40 tokens made", async () => {
  const id = "warm/tiny";
  const dir = await syntheticModel(tinyModelsRoot(), "warm-tiny", { preset: "tiny-bytes", id, variant: "fused", seed: 5 });
  runner = await ModelRunner.load({ id, dir, device: "cpu", threads: 1, kvBudgetBytes: 0, maxQueue: 0 });
  // A budget of 0 runs nothing.
  expect(await warmUp(runner, { budgetMs: 0, speculate: "off" })).toEqual({ ms: 0, tokens: 0, requests: 0 });
  const report = await warmUp(runner, { budgetMs: 1, speculate: "off" });
  // The first request runs whatever the setup took, and is cut off once the budget has passed: it
  // would make 40 tokens uncut (the scheduler's rounds let the timer in between them).
  expect(report.requests).toBe(1);
  expect(report.tokens).toBeLessThan(40);
  // With time for several requests, each ends within the budget too.
  const longer = await warmUp(runner, { budgetMs: 300, speculate: "ngram" });
  expect(longer.requests).toBeGreaterThan(1);
  expect(longer.tokens).toBeGreaterThan(40);
});
