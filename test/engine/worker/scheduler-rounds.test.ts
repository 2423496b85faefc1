// The scheduler tells its sink which rounds must go to the HTTP thread at once (a request's first
// token, its end) and which may wait to be sent with the next (see RoundBatcher).
import { expect, test } from "bun:test";
import { DEFAULT_SAMPLING } from "../../../src/engine/sampling/index.ts";
import type { GenerationEvent } from "../../../src/engine/types.ts";
import { ModelRunner } from "../../../src/engine/worker/model-runner.ts";
import { Scheduler } from "../../../src/engine/worker/scheduler.ts";
import { syntheticModel, tinyModelsRoot } from "../../helpers/models.ts";

test("the round with a request's first token and the one with its end are urgent; those between are not", async () => {
  const dir = await syntheticModel(tinyModelsRoot(), "sched-rounds", { preset: "tiny-bytes", id: "test/sched-rounds" });
  const runner = await ModelRunner.load({ id: "test/sched-rounds", dir, device: "cpu", threads: 1, kvBudgetBytes: 0, maxQueue: 0 });
  // One entry per round that reported something: its content tokens, whether it ended the request, its urgency.
  const rounds: { content: number; done: boolean; urgent: boolean }[] = [];
  let pending = { content: 0, done: false };
  let finished: () => void = () => {};
  const ended = new Promise<void>((r) => (finished = r));
  const scheduler = new Scheduler(runner, {
    events: (_rid, events: GenerationEvent[]) => void (pending.content += events.filter((e) => e.type === "content").length),
    done: () => {
      pending.done = true;
      finished();
    },
    endRound: (urgent) => {
      if (pending.content > 0 || pending.done) rounds.push({ ...pending, urgent });
      pending = { content: 0, done: false };
    },
  });
  void scheduler.run();
  try {
    await scheduler.admit(1, {
      requestId: "r",
      modelId: "test/sched-rounds",
      messages: [{ role: "user", content: "hello" }],
      sampling: { ...DEFAULT_SAMPLING, temperature: 0 },
      maxTokens: 12,
      stop: [],
      n: 1,
      logprobs: false,
      topLogprobs: 0,
    });
    await ended;
    await Bun.sleep(10);
  } finally {
    scheduler.stop();
    await runner.decoder.release();
  }
  expect(rounds.length).toBeGreaterThan(2);
  expect(rounds[0]!.content).toBeGreaterThan(0);
  expect(rounds[0]!.urgent).toBe(true);
  expect(rounds.at(-1)!.done).toBe(true);
  expect(rounds.at(-1)!.urgent).toBe(true);
  const between = rounds.slice(1, -1);
  expect(between.length).toBeGreaterThan(0);
  expect(between.every((r) => !r.urgent && !r.done)).toBe(true);
});
