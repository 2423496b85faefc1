// Fair sharing in a model's scheduler, driven in this process with a small synthetic model: one
// account floods the model, another sends one request; the second gets its first token within a
// bound counted in batch rounds (decode steps), in fair order, and only after the flood's queue
// in first-come order. With priorities, running requests are preempted and resumed by recomputing
// their tokens, and their greedy output is the output they give unpreempted.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { DEFAULT_SAMPLING } from "../../../src/engine/sampling/index.ts";
import type { GenerationEvent } from "../../../src/engine/types.ts";
import type { QueueOrder } from "../../../src/engine/worker/fair-queue.ts";
import { ModelRunner } from "../../../src/engine/worker/model-runner.ts";
import type { WireRequest } from "../../../src/engine/worker/protocol.ts";
import { Scheduler } from "../../../src/engine/worker/scheduler.ts";
import { syntheticModel, tinyModelsRoot } from "../../helpers/models.ts";

/** What B may wait, in decode steps after it is queued: the round running, its admission, its prefill. */
const BOUND_ROUNDS = 3;
const FLOOD = 64;
/** Sequences the KV budget holds at once. */
const SLOTS = 8;
const MAX_TOKENS = 40;

interface Run {
  text: string;
  error?: string;
  finished: boolean;
  /** Decode steps done when its first content arrived. */
  firstAtStep: number | null;
}

class Driver {
  readonly runs = new Map<number, Run>();
  private waiters = new Map<number, () => void>();
  private rid = 0;
  readonly scheduler: Scheduler;

  constructor(runner: ModelRunner, kvBudgetBytes: number, order: QueueOrder, start = true) {
    this.scheduler = new Scheduler(
      runner,
      {
        events: (rid, events: GenerationEvent[]) => {
          const run = this.runs.get(rid)!;
          for (const e of events) {
            if (e.type !== "content" || !e.text) continue;
            run.text += e.text;
            run.firstAtStep ??= this.scheduler.stats().decodeSteps;
          }
        },
        done: (rid, error) => {
          this.runs.get(rid)!.error = error;
          this.runs.get(rid)!.finished = true;
          this.waiters.get(rid)?.();
        },
      },
      // The flood must fit the queue: one account may hold three quarters of it.
      { kvBudgetBytes, maxQueue: 256, order, prefixMinTokens: 1_000_000 },
    );
    if (start) void this.scheduler.run();
  }

  /** Queues a greedy request; resolves once it is queued, with its id and a promise of its end. */
  async send(account: string, prompt: string, priority = 0, maxTokens = MAX_TOKENS): Promise<{ rid: number; done: Promise<void> }> {
    const rid = ++this.rid;
    this.runs.set(rid, { text: "", finished: false, firstAtStep: null });
    const done = new Promise<void>((resolve) => this.waiters.set(rid, resolve));
    try {
      await this.scheduler.admit(rid, { ...greedy(prompt, maxTokens), requestId: `r${rid}`, fairnessKey: account, priority });
    } catch (e) {
      this.runs.delete(rid);
      throw e;
    }
    return { rid, done };
  }
}

/** Token ids that end a generation: banned, so that every request runs to its max_tokens. */
let eos: readonly number[] = [];

function greedy(prompt: string, maxTokens = MAX_TOKENS): WireRequest {
  return {
    requestId: "r",
    modelId: "test/fair",
    messages: [{ role: "user", content: prompt }],
    sampling: { ...DEFAULT_SAMPLING, temperature: 0, logitBias: Object.fromEntries(eos.map((t) => [t, -100])) },
    maxTokens,
    stop: [],
    n: 1,
    logprobs: false,
    topLogprobs: 0,
  };
}

const prompts = Array.from({ length: FLOOD }, (_, i) => `story ${i}: once upon a time ${"abc".repeat(i % 5)}`);

for (const variant of ["fused", "standard"] as const) {
  describe(`${variant} KV cache`, () => {
    let runner: ModelRunner;
    let budget = 0;

    beforeAll(async () => {
      const id = `test/fair-${variant}`;
      const dir = await syntheticModel(tinyModelsRoot(), `fair-${variant}`, { preset: "tiny-bytes", id, variant, seed: 11 });
      runner = await ModelRunner.load({ id, dir, device: "cpu", threads: 1, kvBudgetBytes: 0, maxQueue: 0 });
      eos = runner.tokenizer.eosTokenIds;
      // Room for exactly the first SLOTS requests of the flood (admitted first), and not a byte for more.
      const probe = new Scheduler(runner, { events: () => {}, done: () => {} });
      for (const p of prompts.slice(0, SLOTS)) {
        budget += probe.backend.sequenceBytes(probe.backend.capacityFor((await runner.prompt(greedy(p))).ids.length + MAX_TOKENS));
      }
    });

    afterAll(async () => {
      await runner?.decoder.release();
    });

    /** A floods; once its sequences fill the memory, B sends one request. B's wait in decode steps. */
    async function floodThenB(order: QueueOrder, bPriority: number): Promise<{ waited: number; driver: Driver; floods: number[] }> {
      // All queued in order before the loop starts: the first SLOTS admitted are the ones the budget was sized for.
      const driver = new Driver(runner, budget, order, false);
      const sent = [];
      for (const p of prompts) sent.push(await driver.send("A", p));
      void driver.scheduler.run();
      // Let the flood take every slot and start decoding.
      while (driver.scheduler.stats().decodeSteps < 3) await Bun.sleep(1);
      expect(driver.scheduler.stats().runningRequests).toBe(SLOTS);
      expect(driver.scheduler.stats().queuedRequests).toBe(FLOOD - SLOTS);
      const b = await driver.send("B", "hello there", bPriority);
      const queuedAt = driver.scheduler.stats().decodeSteps;
      await b.done;
      await Promise.all(sent.map((s) => s.done));
      driver.scheduler.stop();
      return { waited: driver.runs.get(b.rid)!.firstAtStep! - queuedAt, driver, floods: sent.map((s) => s.rid) };
    }

    test(`B's first token comes within ${BOUND_ROUNDS} rounds of A's flood in fair order, after A's queue in first-come order`, async () => {
      const fair = await floodThenB("fair", 0);
      const fifo = await floodThenB("fifo", 0);
      expect(fair.waited).toBeLessThanOrEqual(BOUND_ROUNDS);
      // First come: B waits for the 56 queued ahead of it to be admitted, 8 at a time.
      expect(fifo.waited).toBeGreaterThan(5 * MAX_TOKENS);
      // Fair sharing took one of A's slots for B (equal priorities: A held 8, B none).
      expect(fair.driver.scheduler.stats().preemptions).toBeGreaterThanOrEqual(1);
      expect(fifo.driver.scheduler.stats().preemptions).toBe(0);
      for (const d of [fair.driver, fifo.driver]) expect([...d.runs.values()].filter((r) => r.error || !r.finished)).toEqual([]);
      // Preempted or not, every request of A gives the text it gives in first-come order.
      for (const [i, rid] of fair.floods.entries()) expect(fair.driver.runs.get(rid)!.text).toBe(fifo.driver.runs.get(fifo.floods[i]!)!.text);
    }, 120_000);

    test("a higher priority preempts running requests; each preempted one gives its unpreempted greedy output", async () => {
      const driver = new Driver(runner, budget, "fair", false);
      const low = [];
      for (const p of prompts.slice(0, SLOTS)) low.push(await driver.send("A", p));
      void driver.scheduler.run();
      while (driver.scheduler.stats().decodeSteps < 5) await Bun.sleep(1);
      // Four high-priority requests of another account: each takes a slot from A at once.
      const high = await Promise.all(prompts.slice(SLOTS, SLOTS + 4).map((p) => driver.send("B", p, 10)));
      const queuedAt = driver.scheduler.stats().decodeSteps;
      await Promise.all([...low, ...high].map((s) => s.done));
      driver.scheduler.stop();
      const stats = driver.scheduler.stats();
      expect(stats.preemptions).toBeGreaterThanOrEqual(4);
      expect(stats.recomputedTokens).toBeGreaterThan(0);
      for (const h of high) expect(driver.runs.get(h.rid)!.firstAtStep! - queuedAt).toBeLessThanOrEqual(BOUND_ROUNDS);

      // The same requests alone, one at a time: nothing preempted.
      const alone = new Driver(runner, budget, "fifo");
      for (const [i, p] of prompts.slice(0, SLOTS + 4).entries()) {
        const s = await alone.send("A", p);
        await s.done;
        expect(alone.runs.get(s.rid)!.text).toBe(driver.runs.get([...low, ...high][i]!.rid)!.text);
      }
      alone.scheduler.stop();
    }, 120_000);

    test("an account over its share of the queue is refused (busy); a full queue refuses everyone (unavailable)", async () => {
      // Not running: nothing leaves the queue while it fills (maxQueue 256; one account may hold 192).
      const driver = new Driver(runner, budget, "fair", false);
      for (let i = 0; i < 192; i++) await driver.send("A", prompts[i % FLOOD]!, 0, 2);
      const over = await driver.send("A", "one more", 0, 2).catch((e: Error) => e);
      expect(over).toMatchObject({ name: "EngineBusyError" });
      expect((over as unknown as { retryAfterSeconds: number }).retryAfterSeconds).toBeGreaterThanOrEqual(1);
      // Other accounts fill the rest, then the queue is full for everyone.
      for (let i = 0; i < 64; i++) await driver.send(`k${i}`, "hi", 0, 2);
      const full = await driver.send("k-late", "hi", 0, 2).catch((e: Error) => e);
      expect(full).toMatchObject({ name: "EngineUnavailableError", code: "server_busy" });
      const stats = driver.scheduler.stats();
      expect([stats.queuedRequests, stats.rejectedBusy, stats.rejectedFull]).toEqual([256, 1, 1]);
      // Then it drains: every queued request ends.
      void driver.scheduler.run();
      while ([...driver.runs.values()].some((r) => !r.finished && r.error === undefined)) await Bun.sleep(5);
      driver.scheduler.stop();
      expect([...driver.runs.values()].filter((r) => r.finished && !r.error).length).toBe(256);
    }, 120_000);
  });
}
