// The sampler's fast paths (heap top-k, head/tail split with per-bin tail sums, top-p's boundary
// from those sums, draws that land in the tail, table exp) against a plain sort-based reference: the same kept set and the same
// probabilities, on many kinds of logit rows.
import { describe, expect, test } from "bun:test";
import {
  LogitBiasProcessor,
  LogitsEdits,
  PenaltyProcessor,
  allowToken,
  computeLogprobs,
  createMask,
  createRandom,
  createSampler,
  DEFAULT_SAMPLING,
  isAllowed,
  type TokenMask,
} from "../../../src/engine/sampling/index.ts";
import { EXP_RELATIVE_ERROR, expNonPositive } from "../../../src/engine/sampling/fast-exp.ts";
import { RowSplit, TAIL_RELATIVE_ERROR, WEIGHT_RELATIVE_ERROR } from "../../../src/engine/sampling/row-split.ts";
import { AllowedRuns } from "../../../src/engine/sampling/runs.ts";
import { argmax } from "../../../src/engine/sampling/scan.ts";
import type { SamplingParams } from "../../../src/engine/types.ts";

interface Filters {
  t: number;
  topK: number;
  topP: number;
  minP: number;
}

interface Kept {
  id: number;
  w: number;
}

/**
 * The mathematically defined sampling distribution, by sorting: every allowed token within
 * e^-30 (and min_p) of the best, the k best, then the smallest prefix reaching p. Returns the
 * eligible tokens best first and the range of kept counts that rounding at an exact boundary
 * allows (usually one number).
 */
function reference(logits: Float32Array, f: Filters, mask: TokenMask | null = null): { order: Kept[]; keep: [number, number] } {
  const allowed: number[] = [];
  for (let i = 0; i < logits.length; i++) if ((!mask || isAllowed(mask, i)) && !Number.isNaN(logits[i]!)) allowed.push(i);
  const max = Math.max(...allowed.map((i) => logits[i]!));
  const limit = Math.min(30, f.minP > 0 ? -Math.log(f.minP) : 30);
  let order: Kept[];
  if (max === Infinity) order = allowed.filter((i) => logits[i] === Infinity).map((id) => ({ id, w: 1 }));
  else {
    order = allowed
      .filter((i) => (max - logits[i]!) / f.t <= limit)
      .map((id) => ({ id, w: Math.exp((logits[id]! - max) / f.t) }));
  }
  order.sort((a, b) => logits[b.id]! - logits[a.id]! || a.id - b.id);
  if (f.topK > 0) order = order.slice(0, f.topK);
  if (f.topP >= 1) return { order, keep: [order.length, order.length] };
  const total = order.reduce((s, k) => s + k.w, 0);
  const need = f.topP * total;
  let acc = 0;
  let lo = -1;
  let hi = -1;
  for (let i = 0; i < order.length; i++) {
    acc += order[i]!.w;
    if (lo < 0 && acc >= need * (1 - 1e-9)) lo = i + 1;
    if (acc >= need * (1 + 1e-9)) {
      hi = i + 1;
      break;
    }
  }
  return { order, keep: [Math.max(1, lo < 0 ? order.length : lo), Math.max(1, hi < 0 ? order.length : hi)] };
}

/** Checks a kept set against the reference: the right count, weights, and no token left out above the boundary. */
function expectKept(ids: ArrayLike<number>, weights: ArrayLike<number>, n: number, ref: { order: Kept[]; keep: [number, number] }, what: string): void {
  const [lo, hi] = ref.keep;
  if (n < lo || n > hi) throw new Error(`${what}: kept ${n}, reference ${lo}..${hi}`);
  const byId = new Map(ref.order.map((k, rank) => [k.id, { ...k, rank }]));
  const boundary = ref.order[n - 1]!.w;
  const seen = new Set<number>();
  for (let j = 0; j < n; j++) {
    const r = byId.get(ids[j]!);
    if (!r) throw new Error(`${what}: kept ineligible id ${ids[j]}`);
    if (r.w < boundary) throw new Error(`${what}: kept id ${ids[j]} below the boundary`);
    if (Math.abs(weights[j]! / r.w - 1) > 2 * WEIGHT_RELATIVE_ERROR) throw new Error(`${what}: weight ${weights[j]} for ${ids[j]}, reference ${r.w}`);
    seen.add(ids[j]!);
  }
  expect(seen.size).toBe(n);
  // Everything strictly above the boundary is in.
  for (const k of ref.order) if (k.w > boundary && !seen.has(k.id)) throw new Error(`${what}: left out ${k.id}`);
}

const rnd = createRandom(20261122);
const gauss = () => Math.sqrt(-2 * Math.log(1 - rnd())) * Math.cos(2 * Math.PI * rnd());

/** Logit rows of many shapes: language-model-like, flat, tied, with infinities, NaN, huge values. */
function rows(v: number): [string, Float32Array][] {
  const lm = Float32Array.from({ length: v }, () => gauss() * 2);
  for (let j = 0; j < 30; j++) lm[Math.floor(rnd() * v)] = 8 + rnd() * 10;
  const tailHeavy = new Float32Array(v).fill(10.9);
  for (let j = 0; j < 6; j++) tailHeavy[j * 97] = 20 - j * 0.7;
  const tied = Float32Array.from({ length: v }, () => Math.floor(rnd() * 4));
  const withInf = Float32Array.from({ length: v }, () => (rnd() < 0.2 ? -Infinity : rnd() < 0.05 ? NaN : gauss() * 3));
  const huge = Float32Array.from({ length: v }, () => (rnd() < 0.01 ? 3e38 : rnd() < 0.5 ? -1e30 : gauss()));
  huge[5] = 3e38;
  const posInf = Float32Array.from({ length: v }, () => gauss());
  posInf[7] = Infinity;
  posInf[v - 1] = Infinity;
  return [
    ["language-model-like", lm],
    ["tail-heavy", tailHeavy],
    ["flat", new Float32Array(v).fill(0.5)],
    ["four tied levels", tied],
    ["-Infinity and NaN", withInf],
    ["huge values", huge],
    ["+Infinity", posInf],
    ["uniform 0..12", Float32Array.from({ length: v }, () => rnd() * 12)],
  ];
}

const FILTERS: Filters[] = [];
for (const t of [1e-4, 0.3, 0.7, 1, 2.5])
  for (const topP of [1, 0.999, 0.9, 0.5, 1e-9])
    for (const minP of [0, 0.05]) FILTERS.push({ t, topK: 0, topP, minP });
for (const topK of [2, 40, 1500]) for (const topP of [1, 0.9]) FILTERS.push({ t: 0.8, topK, topP, minP: 0 }, { t: 1.5, topK, topP, minP: 0.3 });
FILTERS.push({ t: 1, topK: 0, topP: 0.9, minP: 1 });

describe("fast exp", () => {
  test("relative error under the stated bound, decreasing, 0 at -Infinity", () => {
    let worst = 0;
    let prev = Infinity;
    for (let i = 0; i <= 800_000; i++) {
      const x = -i / 10_000;
      const e = expNonPositive(x);
      worst = Math.max(worst, Math.abs(e / Math.exp(x) - 1));
      expect(e <= prev).toBe(true);
      prev = e;
    }
    for (let i = 0; i < 100_000; i++) {
      const x = -rnd() * 700;
      worst = Math.max(worst, Math.abs(expNonPositive(x) / Math.exp(x) - 1));
    }
    expect(worst).toBeLessThan(EXP_RELATIVE_ERROR);
    expect(expNonPositive(0)).toBe(1);
    expect(expNonPositive(-Infinity)).toBe(0);
  });
});

describe("allowed runs and argmax", () => {
  test("runs list exactly the allowed ids, for random, full, empty and ragged masks", () => {
    for (const size of [1, 31, 32, 33, 1000, 4099]) {
      for (const density of [0, 0.02, 0.5, 0.97, 1]) {
        const mask = createMask(size + 40);
        for (let i = 0; i < size + 40; i++) if (rnd() < density) allowToken(mask, i);
        if (density === 1) mask.fill(0xffffffff);
        const runs = new AllowedRuns(size);
        runs.fill(size, mask);
        const got: number[] = [];
        for (let r = 0; r < runs.count; r++) {
          const lo = runs.bounds[2 * r]!;
          const hi = runs.bounds[2 * r + 1]!;
          expect(hi).toBeGreaterThan(lo);
          if (r > 0) expect(lo).toBeGreaterThan(runs.bounds[2 * r - 1]!); // maximal runs
          for (let i = lo; i < hi; i++) got.push(i);
        }
        const want: number[] = [];
        for (let i = 0; i < size; i++) if (isAllowed(mask, i)) want.push(i);
        expect(got).toEqual(want);
      }
    }
  });

  test("argmax: the lowest id among equal maxima, ignoring NaN and disallowed ids", () => {
    for (let trial = 0; trial < 300; trial++) {
      const n = 1 + Math.floor(rnd() * 70);
      const row = Float32Array.from({ length: n }, () => (rnd() < 0.1 ? NaN : rnd() < 0.1 ? -Infinity : Math.floor(rnd() * 5)));
      const mask = rnd() < 0.5 ? null : createMask(n);
      if (mask) for (let i = 0; i < n; i++) if (rnd() < 0.6) allowToken(mask, i);
      let want = -1;
      for (let i = 0; i < n; i++) if ((!mask || isAllowed(mask, i)) && row[i]! > (want < 0 ? -Infinity : row[want]!)) want = i;
      const runs = new AllowedRuns(n);
      runs.fill(n, mask);
      expect(argmax(row, runs)).toBe(want);
    }
  });
});

/** A sampler for filters `f` whose every draw uses the next point of a uniform grid of G. */
function gridSampler(f: Filters, v: number, G: number) {
  let j = 0;
  return createSampler({ ...DEFAULT_SAMPLING, temperature: f.t, topK: f.topK, topP: f.topP, minP: f.minP }, v, { random: () => (j++ + 0.5) / G });
}

describe("kept sets against the reference", () => {
  const V = 3000;
  const cases = rows(V);
  const small = rows(400);

  test("top-p with p exactly at a prefix's share keeps exactly that prefix", () => {
    const runs = new AllowedRuns(500);
    const split = new RowSplit(500);
    for (let trial = 0; trial < 300; trial++) {
      const row = Float32Array.from({ length: 500 }, () => gauss() * (trial % 2 ? 1 : 4));
      const ref = reference(row, { t: 1, topK: 0, topP: 1, minP: 0 });
      const total = ref.order.reduce((a, k) => a + k.w, 0);
      const m = 1 + Math.floor(rnd() * Math.min(40, ref.order.length - 1));
      const share = ref.order.slice(0, m).reduce((a, k) => a + k.w, 0) / total;
      for (const [p, want] of [[share * (1 - 1e-7), m], [share * (1 + 1e-7), m + 1]] as const) {
        if (p >= 1) continue;
        runs.fill(500, null);
        split.split(row, runs, ref.order.length ? row[ref.order[0]!.id]! : 0, 1, 30);
        split.nucleus(p, row, runs);
        expect(split.head.n).toBe(want);
      }
    }
  });

  test("top-p with the kernel's tail sum: exact unless p·total is within the sum's error of a boundary", () => {
    // A tail with a fifth of the mass or more, summed in float32 by the kernel (no mask).
    const n = 20_000;
    const runs = new AllowedRuns(n);
    const split = new RowSplit(n);
    let checked = 0;
    for (let trial = 0; trial < 50; trial++) {
      const row = Float32Array.from({ length: n }, () => -7.2 - rnd() * 1.5);
      for (let j = 0; j < 12; j++) row[Math.floor(rnd() * n)] = rnd();
      const ref = reference(row, { t: 1, topK: 0, topP: 1, minP: 0 });
      const total = ref.order.reduce((a, k) => a + k.w, 0);
      const m = 1 + Math.floor(rnd() * 8);
      const share = ref.order.slice(0, m).reduce((a, k) => a + k.w, 0) / total;
      const tail = ref.order.filter((k) => k.w < Math.exp(-8)).reduce((a, k) => a + k.w, 0);
      expect(tail / total).toBeGreaterThan(0.2);
      // Past the sum's error, exactly the prefix or one more; within it, either.
      const margin = (2 * TAIL_RELATIVE_ERROR * tail) / total;
      for (const [p, want] of [[share * (1 - margin), [m]], [share * (1 + margin), [m + 1]], [share * (1 - 1e-12), [m, m + 1]], [share * (1 + 1e-12), [m, m + 1]]] as const) {
        runs.fill(n, null);
        split.split(row, runs, row[ref.order[0]!.id]!, 1, 30);
        split.nucleus(p, row, runs);
        expect(want).toContain(split.head.n);
        checked++;
      }
    }
    expect(checked).toBe(200);
  });

  test("top-p nucleus, min-p and e^-30 cutoff on the head/tail split", () => {
    const runs = new AllowedRuns(V);
    const split = new RowSplit(V);
    for (const [name, row] of cases) {
      for (const mask of [null, (() => { const m = createMask(V); for (let i = 0; i < V; i++) if (rnd() < 0.7) allowToken(m, i); return m; })()]) {
        runs.fill(V, mask);
        const best = argmax(row, runs);
        for (const f of FILTERS) {
          if (f.topK > 0) continue;
          const what = `${name}, mask ${mask !== null}, ${JSON.stringify(f)}`;
          const ref = reference(row, f, mask);
          split.split(row, runs, row[best]!, f.t, f.minP > 0 ? Math.min(30, -Math.log(f.minP)) : 30);
          // Head and tail hold the eligible tokens' mass: the kernel's tail sum (whole rows) within
          // its bound, the bins' exactly.
          const refMass = ref.order.reduce((s, k) => s + k.w, 0);
          const head = split.head.sum();
          const tailError = mask ? 0 : TAIL_RELATIVE_ERROR * split.tailMass();
          expect(Math.abs(head + split.tailMass() - refMass)).toBeLessThanOrEqual(2 * WEIGHT_RELATIVE_ERROR * refMass + tailError);
          expect(Math.abs((head + split.exactTailMass(row, runs)) / refMass - 1)).toBeLessThan(2 * WEIGHT_RELATIVE_ERROR);
          split.split(row, runs, row[best]!, f.t, f.minP > 0 ? Math.min(30, -Math.log(f.minP)) : 30);
          if (f.topP < 1) {
            split.nucleus(f.topP, row, runs);
            expectKept(split.head.ids, split.head.weights, split.head.n, ref, what);
          } else {
            // Without top-p, the head is the eligible tokens within e^-8 of the best.
            const head = new Set(split.head.ids.subarray(0, split.head.n));
            const weightOf = new Map(ref.order.map((k) => [k.id, k.w]));
            for (const k of ref.order) if (k.w > Math.exp(-8) * (1 + 1e-9) || k.w === 1) expect(head.has(k.id)).toBe(true);
            for (const id of head) expect(weightOf.get(id)! >= Math.exp(-8) * (1 - 1e-9)).toBe(true);
          }
        }
      }
    }
  });

  test("top-k (heap and split paths) keeps the k best, ties at the boundary included only as needed", () => {
    // Every id a grid of uniforms draws must be kept by the reference, and its share of the
    // grid is its probability (to 1/G).
    for (const [rowsOf, G] of [[small, 2000], [cases, 300]] as const) {
      for (const [name, row] of rowsOf) {
        for (const f of FILTERS) {
          if (f.topK === 0 || (rowsOf === cases && f.topK < 1000)) continue;
          const s = gridSampler(f, row.length, G);
          checkGrid(() => s.sample(row), G, reference(row, f), `${name} ${JSON.stringify(f)}`);
        }
      }
    }
  });

  test("the sampler's top-p draws follow the reference nucleus exactly (uniform grid)", () => {
    for (const [name, row] of small) {
      for (const f of FILTERS) {
        if (f.topK > 0 || f.topP >= 1) continue;
        const G = 1000;
        const s = gridSampler(f, row.length, G);
        checkGrid(() => s.sample(row), G, reference(row, f), `${name} ${JSON.stringify(f)}`);
      }
    }
  });

  test("the bench's shape at Qwen3's vocabulary: top_p 0.9 and 0.999, top_k 5000", () => {
    const v = 151_936;
    const row = Float32Array.from({ length: v }, () => gauss() * 2);
    for (let j = 0; j < 40; j++) row[Math.floor(rnd() * v)] = 8 + rnd() * 10;
    for (const f of [{ t: 0.7, topK: 0, topP: 0.9, minP: 0 }, { t: 1, topK: 0, topP: 0.999, minP: 0 }, { t: 1, topK: 5000, topP: 1, minP: 0 }]) {
      const G = 300;
      const s = gridSampler(f, v, G);
      checkGrid(() => s.sample(row), G, reference(row, f), JSON.stringify(f));
    }
  }, 30_000);
});

/** Samples G times on a uniform grid and compares each id's share with the reference. */
function checkGrid(draw: () => number, G: number, ref: { order: Kept[]; keep: [number, number] }, what: string): void {
  const counts = new Map<number, number>();
  for (let i = 0; i < G; i++) {
    const id = draw();
    counts.set(id, (counts.get(id) ?? 0) + 1);
  }
  const [lo, hi] = ref.keep;
  const rank = new Map(ref.order.map((k, r) => [k.id, r]));
  const boundaryLo = ref.order[hi - 1]!.w;
  for (const id of counts.keys()) {
    const r = rank.get(id);
    if (r === undefined || ref.order[r]!.w < boundaryLo) throw new Error(`${what}: drew ${id}, outside the reference set`);
  }
  if (lo !== hi) return; // an exact tie with p: either count is right
  const kept = ref.order.slice(0, lo);
  const boundary = kept.at(-1)!.w;
  const sum = kept.reduce((a, k) => a + k.w, 0);
  const tied = kept.filter((k) => k.w === boundary).length;
  let tiedSeen = 0;
  for (const k of ref.order) {
    const share = (counts.get(k.id) ?? 0) / G;
    if (k.w > boundary) {
      if (Math.abs(share - k.w / sum) > 1.01 / G) throw new Error(`${what}: id ${k.id} share ${share}, reference ${k.w / sum}`);
    } else if (k.w === boundary && share > 0) {
      tiedSeen++;
      if (Math.abs(share - k.w / sum) > 1.01 / G) throw new Error(`${what}: tied id ${k.id} share ${share}, reference ${k.w / sum}`);
    }
  }
  expect(tiedSeen).toBeLessThanOrEqual(tied);
}

describe("draws from head and tail (no top-p, no top-k)", () => {
  /** Frequencies of the heads and of the tail, grouped, within 5 standard errors. */
  function checkFrequencies(row: Float32Array, p: Partial<SamplingParams>, draws: number, seed: number): void {
    const f: Filters = { t: p.temperature ?? 1, topK: 0, topP: 1, minP: p.minP ?? 0 };
    const ref = reference(row, f);
    const total = ref.order.reduce((s, k) => s + k.w, 0);
    const rank = new Map(ref.order.map((k, r) => [k.id, r]));
    const group = (id: number) => {
      const r = rank.get(id);
      if (r === undefined) throw new Error(`drew ${id}, outside the eligible set`);
      return r < 6 ? r : 6 + Math.min(3, Math.floor(((r - 6) / (ref.order.length - 6)) * 4));
    };
    const expected = new Array(10).fill(0);
    ref.order.forEach((k) => (expected[group(k.id)] += k.w / total));
    const seen = new Array(10).fill(0);
    const s = createSampler({ ...DEFAULT_SAMPLING, ...p, seed }, row.length);
    for (let i = 0; i < draws; i++) seen[group(s.sample(row))]++;
    for (let g = 0; g < 10; g++) {
      const sd = Math.sqrt((expected[g] * (1 - expected[g])) / draws);
      expect(Math.abs(seen[g] / draws - expected[g])).toBeLessThanOrEqual(5 * sd + 1e-9);
    }
  }

  test("a tail that holds about 5% of the mass", () => {
    const row = Float32Array.from({ length: 3000 }, () => -2 + rnd() * 3);
    [10, 9.5, 9, 8, 7, 6.5].forEach((l, i) => (row[i * 11] = l));
    checkFrequencies(row, { temperature: 1 }, 20_000, 1);
    checkFrequencies(row, { temperature: 1, minP: 1e-4 }, 10_000, 2);
  });

  test("a tail that holds a quarter of the mass", () => {
    const row = Float32Array.from({ length: 5000 }, () => 1.2 + rnd() * 0.6);
    [10, 9.8, 9.5, 9, 8.5, 8.2].forEach((l, i) => (row[i * 13] = l));
    checkFrequencies(row, { temperature: 1 }, 6000, 3);
    checkFrequencies(row, { temperature: 0.9 }, 6000, 4);
  });

  test("within one tail bin, tokens are drawn in proportion to their weights (not uniformly)", () => {
    // One head token; 2000 tail tokens at d = 8.485 and 2000 at d = 8.515, all in bin round(d·32) = 272.
    const row = new Float32Array(4001);
    row[0] = 10;
    row.fill(1.515, 1, 2001);
    row.fill(1.485, 2001, 4001);
    const runs = new AllowedRuns(row.length);
    runs.fill(row.length, null);
    const split = new RowSplit(row.length);
    split.split(row, runs, 10, 1, 30);
    // Each draw takes one uniform: on a grid of G, a group of tokens drawn from one interval of
    // [0, 1) gets its probability's share of the grid, to 1/G.
    const G = 20_000;
    let j = 0;
    const random = () => (j++ + 0.5) / G;
    let a = 0;
    let b = 0;
    for (let i = 0; i < G; i++) {
      const id = split.draw(row, runs, random);
      if (id > 2000) b++;
      else if (id > 0) a++;
    }
    const wa = 2000 * Math.exp(Math.fround(1.515) - 10);
    const wb = 2000 * Math.exp(Math.fround(1.485) - 10);
    const total = 1 + wa + wb;
    expect(Math.abs(a / G - wa / total)).toBeLessThanOrEqual(2 / G);
    expect(Math.abs(b / G - wb / total)).toBeLessThanOrEqual(2 / G);
    // Uniform within the bin would give both groups the same share.
    expect(Math.abs(a - b) / G).toBeGreaterThan(0.003);
  });

  test("same seed, same draws, on every path", () => {
    const row = Float32Array.from({ length: 5000 }, () => gauss() * 2);
    for (let j = 0; j < 30; j++) row[Math.floor(rnd() * 5000)] = 6 + rnd() * 5;
    for (const p of [{}, { topP: 0.9 }, { topK: 40 }, { topK: 2000 }, { minP: 0.01 }, { temperature: 3 }]) {
      const run = (seed: number) => {
        const s = createSampler({ ...DEFAULT_SAMPLING, ...p, seed }, 5000);
        return Array.from({ length: 40 }, () => s.sample(row));
      };
      expect(run(9)).toEqual(run(9));
      expect(run(9)).not.toEqual(run(10));
    }
  });
});

describe("processors", () => {
  test("penalties subtract presence once and frequency per occurrence; undo restores the row", () => {
    const row = Float32Array.from([1, 2, 3, 4, 5, 6]);
    const before = Array.from(row);
    const edits = new LogitsEdits(row);
    new PenaltyProcessor(0.5, 0.25).apply(edits, new Map([[1, 1], [3, 4], [4, 0], [9, 2]]));
    expect(Array.from(row)).toEqual([1, Math.fround(2 - 0.5 - 0.25), 3, Math.fround(4 - 0.5 - 1), 5, 6]);
    new LogitBiasProcessor({ 0: 2, 2: -100, 5: -0.5, 77: 3 }, 6).apply(edits);
    expect(Array.from(row)).toEqual([3, 1.25, -Infinity, 2.5, 5, 5.5]);
    edits.undo();
    expect(Array.from(row)).toEqual(before);
  });

  test("penalised sampling matches the reference on the penalised logits", () => {
    const row = Float32Array.from({ length: 500 }, () => gauss());
    const counts = new Map([[3, 2], [10, 1], [400, 5]]);
    const penalised = Float32Array.from(row, (l, i) => (counts.has(i) ? l - 0.7 - 0.3 * counts.get(i)! : l));
    penalised[3] = -Infinity; // banned by bias below
    const f: Filters = { t: 0.9, topK: 0, topP: 0.8, minP: 0 };
    const ref = reference(penalised, f);
    const G = 3000;
    let j = 0;
    const s = createSampler({ ...DEFAULT_SAMPLING, temperature: 0.9, topP: 0.8, presencePenalty: 0.7, frequencyPenalty: 0.3, logitBias: { 3: -100 } }, 500, {
      random: () => (j++ + 0.5) / G,
    });
    checkGrid(() => s.sample(row, counts), G, ref, "penalties");
  });
});

describe("logprobs", () => {
  // The normaliser is summed in float32 arithmetic (simd/sum-exp.wat): within 2e-7·(1 + H), H the
  // entropy, at most ln(n).
  const bound = (n: number) => 2e-7 * (1 + Math.log(n));
  const TOLERANCE = bound(2010);
  test("log-softmax within 2e-7·(1 + ln n) on rows with infinities and wide ranges, of any length, with and without alternatives", () => {
    for (let trial = 0; trial < 40; trial++) {
      const n = 2000 + (trial % 7);
      const topN = trial % 2 === 0 ? 20 : 0;
      const row = Float32Array.from({ length: n }, () => (rnd() < 0.05 ? -Infinity : gauss() * (1 + trial / 2)));
      const finite = Array.from(row).filter((l) => l > -Infinity);
      const m = Math.max(...finite);
      const lse = m + Math.log(finite.reduce((a, l) => a + Math.exp(l - m), 0));
      const id = Math.floor(rnd() * n);
      const r = computeLogprobs(row, id, topN);
      expect(r.logprob).toBeLessThanOrEqual(0);
      if (row[id] === -Infinity) expect(r.logprob).toBe(-Infinity);
      else expect(Math.abs(r.logprob - (row[id]! - lse))).toBeLessThan(TOLERANCE);
      const best = Array.from(row, (l, i) => ({ l, i })).sort((a, b) => b.l - a.l || a.i - b.i).slice(0, topN);
      expect(r.top.map((t) => row[t.id])).toEqual(best.map((b) => b.l));
      r.top.forEach((t) => expect(Math.abs(t.logprob - (row[t.id]! - lse))).toBeLessThan(TOLERANCE));
    }
  });

  test("the maximum's own term and the tail past the SIMD lanes count; a row of one finite logit gives it 0", () => {
    for (const n of [1, 2, 3, 4, 5, 7, 8, 9]) {
      for (const at of [0, n - 1]) {
        const row = new Float32Array(n).fill(-Infinity);
        row[at] = 3.25;
        for (const topN of [0, 3]) expect(computeLogprobs(row, at, topN).logprob).toBe(0);
        // Equal logits: each has log(1/n), wherever the lanes end.
        const flat = new Float32Array(n).fill(-2);
        for (const topN of [0, 3]) expect(Math.abs(computeLogprobs(flat, at, topN).logprob + Math.log(n))).toBeLessThan(bound(n));
      }
    }
  });
});
