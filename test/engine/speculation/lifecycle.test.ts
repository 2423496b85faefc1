// A request cancelled while its draft is being verified: the verification's tokens are never
// emitted, its KV cache is freed, and a request verified in the same run carries on unchanged.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { FusedKvBackend } from "../../../src/engine/batching/fused-kv.ts";
import type { GenerationEvent } from "../../../src/engine/types.ts";
import { syntheticModel, tinyModelsRoot } from "../../helpers/models.ts";
import { comparable, SchedulerHarness } from "./harness.ts";

const REPEATING = "Lily and Tom went to the park. Lily and Tom went to the park. Lily and Tom";

for (const variant of ["fused", "standard"] as const) {
  describe(`cancelling mid-verification (${variant} cache)`, () => {
    let on: SchedulerHarness;
    let off: SchedulerHarness;
    beforeAll(async () => {
      const dir = await syntheticModel(tinyModelsRoot(), `spec-tiny-${variant}`, { preset: "tiny-bytes", id: `spec-tiny-${variant}`, variant, seed: 11 });
      const runner = await SchedulerHarness.load(dir, `spec-tiny-${variant}`);
      on = new SchedulerHarness(runner, { speculate: "ngram", speculatePolicy: "always", prefixMinTokens: 1_000_000 });
      off = new SchedulerHarness(runner, { speculate: "off", prefixMinTokens: 1_000_000 });
    }, 120_000);
    afterAll(async () => {
      on?.stop();
      off?.stop();
      await on?.runner.decoder.release();
    });

    /** Makes the `at`-th verification run (from now) cancel `rid()` while it is in flight; returns the undo. */
    function cancelAt(at: number, rid: () => number, then: () => void): () => void {
      const { scheduler } = on;
      const backend = scheduler.backend;
      const verify = backend.verify.bind(backend);
      let calls = 0;
      (backend as { verify: typeof verify }).verify = async (seqs, tokens) => {
        const pending = verify(seqs, tokens);
        if (++calls === at) {
          scheduler.cancel(rid());
          then();
        }
        return pending;
      };
      return () => ((backend as { verify: typeof verify }).verify = verify);
    }

    function expectAllFreed() {
      const stats = on.scheduler.stats();
      expect(stats.runningRequests).toBe(0);
      expect(stats.runningSequences).toBe(0);
      // Nothing is reserved (prefixes are not kept in these tests).
      expect(stats.kvUsedBytes).toBe(0);
      if (on.scheduler.backend instanceof FusedKvBackend) expect(on.scheduler.backend.poolCapacities()).toEqual([]);
    }

    test("the tokens of the verification in flight are never sampled or emitted, and the cache is freed", async () => {
      let rid = -1;
      let generatedAtCancel = -1;
      const before = on.scheduler.stats().generatedTokens;
      const undo = cancelAt(5, () => rid, () => (generatedAtCancel = on.scheduler.stats().generatedTokens - before));
      try {
        const started = await on.start({ content: REPEATING, maxTokens: 200, logprobs: true });
        rid = started.rid;
        const { events } = await started.done;
        const finish = events.filter((e): e is Extract<GenerationEvent, { type: "finish" }> => e.type === "finish");
        expect(finish).toHaveLength(1);
        expect(generatedAtCancel).toBeGreaterThan(0);
        // What the choice had sampled when the run started is all it reports; nothing after.
        expect(finish[0]!.completionTokens).toBe(generatedAtCancel);
        expect(on.scheduler.stats().generatedTokens - before).toBe(generatedAtCancel);
        const logprobs = events.flatMap((e) => (e.type === "content" ? (e.logprobs ?? []) : []));
        expect(logprobs.length).toBeLessThanOrEqual(generatedAtCancel);
      } finally {
        undo();
      }
      expectAllFreed();
    }, 60_000);

    test("a request verified in the same run as a cancelled one carries on unchanged", async () => {
      const other = { content: "One day", maxTokens: 60 };
      const expected = (await off.run(other)).events;
      let rid = -1;
      const undo = cancelAt(5, () => rid, () => {});
      try {
        const first = await on.start({ content: REPEATING, maxTokens: 200 });
        rid = first.rid;
        const second = await on.start(other);
        const [cancelled, kept] = await Promise.all([first.done, second.done]);
        expect((cancelled.events.find((e) => e.type === "finish") as { completionTokens: number }).completionTokens).toBeLessThan(200);
        expect(comparable(kept.events)).toEqual(comparable(expected));
      } finally {
        undo();
      }
      expectAllFreed();
    }, 60_000);
  });
}
