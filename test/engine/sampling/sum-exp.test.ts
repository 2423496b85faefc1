// The SIMD normaliser of log-probabilities: its committed bytes are its source assembled, and
// each term is within the stated (1 + d)·2e-7 of e^(v - max), d = max - v, wherever max lies.
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { assemble, moduleSource, OUTPUT, SOURCE } from "../../../src/engine/sampling/simd/assemble.ts";
import { maxAndSumExp, sumExp } from "../../../src/engine/sampling/simd/sum-exp.ts";

describe("SIMD sum of exponentials", () => {
  test("sum-exp.wasm.ts is sum-exp.wat assembled (run `make wasm` after editing the .wat)", async () => {
    expect(readFileSync(OUTPUT, "utf8")).toBe(moduleSource(await assemble(SOURCE)));
  });

  test("each term within (1 + d)·2e-7 of e^(v - max), for gaps d from 0 to 87 and maxima from -30 to 30", () => {
    let worst = 0;
    let seed = 7;
    const random = () => (seed = (seed * 16807) % 2147483647) / 2147483647;
    for (let i = 0; i <= 87_000; i++) {
      const max = i % 2 === 0 ? 0 : Math.fround((random() - 0.5) * 60);
      const v = Math.fround(max - i / 1000);
      // Four lanes of the same value: one SIMD step, no scalar tail.
      const sum = sumExp(new Float32Array(4).fill(v), max);
      worst = Math.max(worst, Math.abs(sum / 4 / Math.exp(v - max) - 1) / (1 + max - v));
    }
    expect(worst).toBeLessThan(2e-7);
    expect(worst).toBeGreaterThan(0);
  });

  test("the maximum skips NaN; -Infinity terms add nothing measurable; an empty or all -Infinity row sums to 0", () => {
    const row = Float32Array.from([1, Number.NaN, -Infinity, 2.5, 0.5, -Infinity, Number.NaN, 2]);
    const { max, sum } = maxAndSumExp(row.filter((v) => !Number.isNaN(v)));
    expect(max).toBe(2.5);
    const expected = [1, 2.5, 0.5, 2].reduce((a, v) => a + Math.exp(v - 2.5), 0);
    expect(Math.abs(sum / expected - 1)).toBeLessThan(1e-6);
    expect(maxAndSumExp(row).max).toBe(2.5);
    expect(maxAndSumExp(new Float32Array(0))).toEqual({ max: -Infinity, sum: 0 });
    expect(maxAndSumExp(new Float32Array(9).fill(-Infinity))).toEqual({ max: -Infinity, sum: 0 });
  });

  test("a vocabulary larger than the module's memory grows it; a smaller one after it still sums only its own values", () => {
    const big = new Float32Array(300_000).fill(-1);
    expect(Math.abs(maxAndSumExp(big).sum / 300_000 - 1)).toBeLessThan(4e-7);
    const small = new Float32Array(10).fill(0);
    expect(Math.abs(maxAndSumExp(small).sum - 10)).toBeLessThan(1e-5);
  });
});
