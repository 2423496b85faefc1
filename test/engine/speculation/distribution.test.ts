// Sampling with speculation follows the model's distribution: a scripted model whose next token
// after x, y, z (and the prompt's last token) has known probabilities is sampled many times with
// verification at every round, and the transitions it made are tested against those
// probabilities (chi-square). The prompt repeats "xyz", so nearly every round verifies a draft
// that the sample then accepts or refuses: a verification that leaned towards the draft, or
// away from it, would show. Seeds are fixed, so the outcome does not vary between runs.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { syntheticModel, tinyModelsRoot } from "../../helpers/models.ts";
import { SchedulerHarness } from "./harness.ts";
import type { GenerationEvent } from "../../../src/engine/types.ts";

const TOKENS = ["x", "y", "z"] as const;
/** Relative logits of the next token after each token ("\n" ends the prompt). */
const LOGITS: Record<string, [number, number, number]> = {
  "\n": [0, -0.5, -1.2],
  x: [0.3, 0, -0.7],
  y: [-0.4, 0.5, 0],
  z: [0, -1, 0.2],
};

function probabilities(logits: number[], temperature: number): number[] {
  const w = logits.map((l) => Math.exp(l / temperature));
  const sum = w.reduce((a, b) => a + b, 0);
  return w.map((x) => x / sum);
}

/** The chi-square statistic of transition counts against the model's probabilities. */
function chiSquare(counts: Map<string, number[]>, temperature: number): { statistic: number; cells: number } {
  let statistic = 0;
  let cells = 0;
  for (const [from, row] of counts) {
    const n = row.reduce((a, b) => a + b, 0);
    probabilities(LOGITS[from]!, temperature).forEach((p, j) => {
      const expected = n * p;
      statistic += (row[j]! - expected) ** 2 / expected;
      cells++;
    });
  }
  return { statistic, cells };
}

/** Upper 0.1% points of the chi-square distribution by degrees of freedom. */
const CRITICAL: Record<number, number> = { 6: 22.46, 8: 26.12 };

describe("sampled outputs under speculation follow the model's distribution", () => {
  let on: SchedulerHarness;
  let off: SchedulerHarness;
  beforeAll(async () => {
    const dir = await syntheticModel(tinyModelsRoot(), "spec-bigram", {
      preset: "tiny-bytes",
      id: "spec-bigram",
      variant: "fused",
      script: { chains: [], distributions: Object.entries(LOGITS).map(([after, l]) => ({ after, next: TOKENS.map((t, j) => [t, l[j]!] as [string, number]) })) },
    });
    const runner = await SchedulerHarness.load(dir, "spec-bigram");
    on = new SchedulerHarness(runner, { speculate: "ngram", speculatePolicy: "always" });
    off = new SchedulerHarness(runner, { speculate: "off" });
  }, 120_000);
  afterAll(async () => {
    on?.stop();
    off?.stop();
    await on?.runner.decoder.release();
  });

  const text = (events: GenerationEvent[]) =>
    events
      .filter((e) => e.type === "content")
      .map((e) => (e as { text: string }).text)
      .join("");

  for (const temperature of [1, 0.6]) {
    test(`temperature ${temperature}: transitions within the 0.1% chi-square bound; seeded runs as without speculation`, async () => {
      const N = 360;
      const L = 8;
      const statsBefore = on.scheduler.stats();
      const outputs: string[] = [];
      // Forty requests at a time: batched verification runs, rows of different draft lengths.
      for (let from = 0; from < N; from += 40) {
        const started = await Promise.all(
          Array.from({ length: 40 }, (_, i) => on.start({ content: "xyzxyzxyzxyzxyz", maxTokens: L, sampling: { temperature, seed: 1000 * temperature + from + i } })),
        );
        for (const s of started) outputs.push(text((await s.done).events));
      }
      const counts = new Map<string, number[]>();
      for (const out of outputs) {
        expect(out).toMatch(new RegExp(`^[xyz]{${L}}$`));
        let prev = "\n";
        for (const t of out) {
          const row = counts.get(prev) ?? [0, 0, 0];
          row[TOKENS.indexOf(t as (typeof TOKENS)[number])]!++;
          counts.set(prev, row);
          prev = t;
        }
      }
      const { statistic, cells } = chiSquare(counts, temperature);
      const dof = cells - counts.size;
      expect(statistic).toBeLessThan(CRITICAL[dof]!);
      // Verification happened, with drafts both kept and refused.
      const stats = on.scheduler.stats();
      const drafted = stats.draftTokens - statsBefore.draftTokens;
      const accepted = stats.acceptedDraftTokens - statsBefore.acceptedDraftTokens;
      expect(accepted).toBeGreaterThan(N);
      expect(drafted - accepted).toBeGreaterThan(N);
      // The same seeds without speculation give the same outputs.
      for (let i = 0; i < 40; i++) {
        const r = await off.run({ content: "xyzxyzxyzxyzxyz", maxTokens: L, sampling: { temperature, seed: 1000 * temperature + i } });
        expect(text(r.events)).toBe(outputs[i]!);
      }
    }, 120_000);
  }
});
