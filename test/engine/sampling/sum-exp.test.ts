// The SIMD kernels of log-probabilities and of the temperature sampler's split: their committed
// bytes are their source assembled; each term of the sum is within the stated (1 + d)·2e-7 of
// e^(v - max), d = max - v, wherever max lies; the alternatives are exactly the k largest, ties by
// index, wherever the SIMD lanes end; the split's lists and tail are those of its float32 rule.
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { assemble, moduleSource, OUTPUT, SOURCE } from "../../../src/engine/sampling/simd/assemble.ts";
import { placeRow, rowMax, rowSplit, rowSumExp, rowTop, splitDistance, TAIL_TERM_ERROR } from "../../../src/engine/sampling/simd/sum-exp.ts";

let seed = 7;
const random = () => (seed = (seed * 16807) % 2147483647) / 2147483647;

describe("SIMD sum of exponentials and alternatives", () => {
  test("sum-exp.wasm.ts is sum-exp.wat assembled (run `make wasm` after editing the .wat)", async () => {
    expect(readFileSync(OUTPUT, "utf8")).toBe(moduleSource(await assemble(SOURCE)));
  });

  test("each term within (1 + d)·2e-7 of e^(v - max), for gaps d from 0 to 87 and maxima from -30 to 30", () => {
    let worst = 0;
    for (let i = 0; i <= 87_000; i++) {
      const max = i % 2 === 0 ? 0 : Math.fround((random() - 0.5) * 60);
      const v = Math.fround(max - i / 1000);
      // Four lanes of the same value: one SIMD step, no scalar tail.
      placeRow(new Float32Array(4).fill(v));
      worst = Math.max(worst, Math.abs(rowSumExp(max) / 4 / Math.exp(v - max) - 1) / (1 + max - v));
    }
    expect(worst).toBeLessThan(2e-7);
    expect(worst).toBeGreaterThan(0);
  });

  test("the maximum skips NaN; -Infinity terms add nothing measurable; an empty or all -Infinity row has -Infinity", () => {
    placeRow(Float32Array.from([1, Number.NaN, -Infinity, 2.5, 0.5, -Infinity, Number.NaN, 2]));
    expect(rowMax()).toBe(2.5);
    placeRow(Float32Array.from([1, -Infinity, 2.5, 0.5, -Infinity, 2]));
    const expected = [1, 2.5, 0.5, 2].reduce((a, v) => a + Math.exp(v - 2.5), 0);
    expect(Math.abs(rowSumExp(2.5) / expected - 1)).toBeLessThan(1e-6);
    placeRow(new Float32Array(0));
    expect(rowMax()).toBe(-Infinity);
    placeRow(new Float32Array(9).fill(-Infinity));
    expect(rowMax()).toBe(-Infinity);
  });

  test("the k largest, best first and the earlier index first among equals, for rows of every length mod 4", () => {
    for (let trial = 0; trial < 60; trial++) {
      const n = 1 + Math.floor(random() * 3000);
      // Few distinct values, so ties are everywhere; some NaN and -Infinity.
      const row = Float32Array.from({ length: n }, () => {
        const u = random();
        return u < 0.02 ? Number.NaN : u < 0.05 ? -Infinity : Math.floor(random() * 40) / 4;
      });
      for (const k of [1, 5, 20]) {
        placeRow(row);
        const ids = new Int32Array(k);
        const vals = new Float64Array(k);
        rowTop(ids, vals);
        const best = Array.from(row, (v, i) => ({ v, i }))
          .filter((x) => x.v > -Infinity)
          .sort((a, b) => b.v - a.v || a.i - b.i)
          .slice(0, k);
        expect(Array.from(ids).slice(0, best.length)).toEqual(best.map((b) => b.i));
        expect(Array.from(vals).slice(0, best.length)).toEqual(best.map((b) => b.v));
        expect(Array.from(ids).slice(best.length)).toEqual(new Array(k - best.length).fill(-1));
      }
    }
  });

  test("a row larger than the module's memory grows it; a smaller one after it sums only its own values", () => {
    placeRow(new Float32Array(300_000).fill(-1));
    expect(Math.abs(rowSumExp(-1) / 300_000 - 1)).toBeLessThan(4e-7);
    placeRow(new Float32Array(10).fill(0));
    expect(Math.abs(rowSumExp(0) - 10)).toBeLessThan(1e-5);
  });

  test("split: the head and near lists are exactly the float32 rule's, in index order, for rows of every length mod 4", () => {
    for (let trial = 0; trial < 40; trial++) {
      const n = 1 + Math.floor(random() * 5000);
      const row = Float32Array.from({ length: n }, () => {
        const u = random();
        return u < 0.02 ? Number.NaN : u < 0.04 ? -Infinity : Math.fround((random() - 0.5) * 24);
      });
      let max = -Infinity;
      for (const v of row) if (v > max) max = v;
      const scale = Math.fround(32 / (0.3 + random() * 2));
      const head = trial % 3 === 0 ? Math.fround(32 * random() * 8) : 256;
      const limit = Math.fround(Math.max(head, 32 * (head / 32 + random() * 22)));
      const listEnd = Math.fround(Math.min(head + 64, limit + 1));
      placeRow(row);
      const got = rowSplit(max, scale, head, limit, listEnd);
      const wantHead: number[] = [];
      const wantNear: number[] = [];
      let tail = 0;
      for (let i = 0; i < n; i++) {
        const d = splitDistance(max, row[i]!, scale);
        if (d < head) wantHead.push(i);
        else if (d <= limit) {
          tail += Math.exp(-((max - row[i]!) * scale) / 32);
          if (d < listEnd) wantNear.push(i);
        }
      }
      expect(Array.from(got.head)).toEqual(wantHead);
      expect(Array.from(got.near)).toEqual(wantNear);
      expect(Math.abs(got.tail - tail)).toBeLessThanOrEqual(TAIL_TERM_ERROR * (1 + limit / 32) * tail);
    }
  });

  test("split: each tail term within (1 + d/32)·TAIL_TERM_ERROR of e^(-d/32) for the float64 d", () => {
    let worst = 0;
    for (let i = 0; i < 40_000; i++) {
      const max = Math.fround((random() - 0.5) * 60);
      const v = Math.fround(max - random() * 31);
      const t = 0.2 + random() * 2;
      const scale = Math.fround(32 / t);
      const d = (max - v) * (32 / t);
      if (splitDistance(max, v, scale) > 960 || d < 1e-3) continue;
      // Four lanes of the same value: one SIMD step, no scalar tail.
      placeRow(new Float32Array(4).fill(v));
      const got = rowSplit(max, scale, 0, 960, 0).tail / 4;
      worst = Math.max(worst, Math.abs(got / Math.exp(-d / 32) - 1) / (1 + d / 32));
    }
    expect(worst).toBeLessThan(TAIL_TERM_ERROR);
    expect(worst).toBeGreaterThan(0);
  });
});
