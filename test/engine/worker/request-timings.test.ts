// The timing points the scheduler reports with a request's end (queue, prefill, decode, the gaps
// between tokens), under a clock the test moves: each prompt read takes 50 ms of it and each
// decode step 10 ms, so every timing is known exactly however fast the machine is. Two requests
// and memory for one: the second waits in the queue for exactly the first's whole run.
import { expect, test } from "bun:test";
import type { KvBackend } from "../../../src/engine/batching/kv.ts";
import { DEFAULT_SAMPLING } from "../../../src/engine/sampling/index.ts";
import type { GenerationEvent } from "../../../src/engine/types.ts";
import { ModelRunner } from "../../../src/engine/worker/model-runner.ts";
import type { WorkerTimings } from "../../../src/engine/worker/request-clock.ts";
import { Scheduler } from "../../../src/engine/worker/scheduler.ts";
import type { WireRequest } from "../../../src/engine/worker/protocol.ts";
import { syntheticModel, tinyModelsRoot } from "../../helpers/models.ts";

const PREFILL_MS = 50;
const STEP_MS = 10;

function request(id: string, maxTokens: number): WireRequest {
  return {
    requestId: id,
    modelId: "test/request-timings",
    messages: [{ role: "user", content: `hello ${id}` }],
    sampling: { ...DEFAULT_SAMPLING, temperature: 0 },
    maxTokens,
    stop: [],
    n: 1,
    logprobs: false,
    topLogprobs: 0,
  };
}

/** The backend with the test's clock moved by each run: prompts PREFILL_MS, decode steps STEP_MS. */
function timed(backend: KvBackend, clock: { t: number }): KvBackend {
  return new Proxy(backend, {
    get(target, key) {
      const v = Reflect.get(target, key);
      if (typeof v !== "function") return v;
      const cost = key === "prefill" ? PREFILL_MS : key === "decode" || key === "verify" ? STEP_MS : 0;
      if (cost === 0) return v.bind(target);
      return async (...args: unknown[]) => {
        const out = await v.apply(target, args);
        clock.t += cost;
        return out;
      };
    },
  });
}

test("queue, prefill, decode and inter-token gaps follow the clock exactly; a request waiting for memory waits the other's whole run", async () => {
  const dir = await syntheticModel(tinyModelsRoot(), "request-timings", { preset: "tiny-bytes", id: "test/request-timings" });
  const runner = await ModelRunner.load({ id: "test/request-timings", dir, device: "cpu", threads: 1, kvBudgetBytes: 0, maxQueue: 0 });
  const clock = { t: 1_000_000 };
  const ended = new Map<number, { tokens: number; timings: WorkerTimings }>();
  const tokens = new Map<number, number>();
  let wake: () => void = () => {};
  const sink = {
    events: (rid: number, events: GenerationEvent[]) => {
      for (const e of events) if (e.type === "finish") tokens.set(rid, e.completionTokens);
    },
    done: (rid: number, _error?: string, _code?: string, timings?: WorkerTimings) => {
      ended.set(rid, { tokens: tokens.get(rid) ?? 0, timings: timings! });
      wake();
    },
  };
  // Memory for either request but not both (the prefix cache gives its room back when asked):
  // what each reserves, from its prompt's length as a scheduler that never runs reads it.
  const probe = new Scheduler(runner, sink, { speculate: "off" });
  const need = async (rid: number, r: WireRequest) => probe.backend.sequenceBytes(probe.backend.capacityFor((await probe.admit(rid, r)) + r.maxTokens!));
  const budget = (await need(1, request("a", 6))) + (await need(2, request("b", 4))) - 1;
  const scheduler = new Scheduler(runner, sink, { speculate: "off", kvBudgetBytes: budget, clock: () => clock.t, wrapBackend: (b) => timed(b, clock) });
  try {
    // Both queued before the loop runs, at the same instant of the test's clock.
    await scheduler.admit(1, request("a", 6));
    await scheduler.admit(2, request("b", 4));
    const both = new Promise<void>((r) => (wake = () => ended.size === 2 && r()));
    void scheduler.run();
    await both;
  } finally {
    scheduler.stop();
    await runner.decoder.release();
  }
  const a = ended.get(1)!;
  const b = ended.get(2)!;
  expect(a.tokens).toBeGreaterThan(1);
  expect(b.tokens).toBeGreaterThan(1);
  const t0 = 1_000_000;
  // A: admitted at once, its first token after one prompt read, then one token per step.
  expect(a.timings.queue).toEqual({ start: t0, end: t0 });
  expect(a.timings.prefill).toEqual({ start: t0, end: t0 + PREFILL_MS });
  expect(a.timings.decode).toEqual({ start: t0 + PREFILL_MS, end: t0 + PREFILL_MS + (a.tokens - 1) * STEP_MS });
  expect(a.timings.interTokenSeconds).toEqual(new Array(a.tokens - 1).fill(STEP_MS / 1000));
  expect(a.timings.timePerOutputTokenSeconds).toEqual([STEP_MS / 1000]);
  expect(a.timings.compile).toBeUndefined();
  // B: queued until A's last token freed its memory, then the same.
  const aEnd = a.timings.decode!.end;
  expect(b.timings.queue).toEqual({ start: t0, end: aEnd });
  expect(b.timings.prefill).toEqual({ start: aEnd, end: aEnd + PREFILL_MS });
  expect(b.timings.interTokenSeconds).toEqual(new Array(b.tokens - 1).fill(STEP_MS / 1000));
  expect(b.timings.preemptions).toBe(0);
});
