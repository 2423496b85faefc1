import { describe, expect, test } from "bun:test";
import {
  Candidates,
  NoAllowedTokenError,
  allowToken,
  computeLogprobs,
  countToken,
  createMask,
  createRandom,
  createSampler,
  DEFAULT_SAMPLING,
} from "../../../src/engine/sampling/index.ts";
import type { SamplingParams } from "../../../src/engine/types.ts";

const base: SamplingParams = { ...DEFAULT_SAMPLING, seed: 1234 };
const params = (p: Partial<SamplingParams>): SamplingParams => ({ ...base, ...p });

function softmax(logits: number[], t = 1): number[] {
  const m = Math.max(...logits);
  const e = logits.map((l) => Math.exp((l - m) / t));
  const s = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / s);
}

function frequencies(p: SamplingParams, logits: number[], draws: number, counts?: Map<number, number>): number[] {
  const s = createSampler(p, logits.length);
  const row = Float32Array.from(logits);
  const f = new Array(logits.length).fill(0);
  for (let i = 0; i < draws; i++) f[s.sample(row, counts)]++;
  return f.map((x) => x / draws);
}

/** Empirical frequencies within 5 standard errors of the expected probabilities. */
function expectClose(freq: number[], probs: number[], draws: number): void {
  for (let i = 0; i < probs.length; i++) {
    const sd = Math.sqrt((probs[i]! * (1 - probs[i]!)) / draws);
    expect(Math.abs(freq[i]! - probs[i]!)).toBeLessThanOrEqual(5 * sd + 1e-9);
  }
}

/** Candidates holding every weight of `w`, by id. */
function candidatesOf(w: number[]): Candidates {
  const c = new Candidates(w.length);
  c.ids.set(w.map((_, i) => i));
  c.weights.set(w);
  c.n = w.length;
  return c;
}

const LOGITS = [2.0, 1.5, 1.0, 0.2, -0.5, -1.0, 0.7, 1.2];
const N = 20000;

describe("temperature sampling", () => {
  test("frequencies follow softmax(logits / T)", () => {
    for (const t of [1, 0.5, 2]) {
      expectClose(frequencies(params({ temperature: t, seed: t * 100 }), LOGITS, N), softmax(LOGITS, t), N);
    }
  });

  test("temperature 0 is argmax, also after penalties", () => {
    const s = createSampler(params({ temperature: 0 }), LOGITS.length);
    expect(s.sample(Float32Array.from(LOGITS))).toBe(0);
  });
});

describe("filters", () => {
  const probs = [0.5, 0.3, 0.15, 0.05];
  const logits = probs.map(Math.log);

  test("top_k never returns outside the k best and renormalises among them", () => {
    const f = frequencies(params({ topK: 3, seed: 5 }), LOGITS, N);
    expect(f[3]! + f[4]! + f[5]! + f[6]!).toBe(0);
    const p = softmax([LOGITS[0]!, LOGITS[1]!, LOGITS[7]!]);
    expectClose([f[0]!, f[1]!, f[7]!], p, N);
  });

  test("top_p keeps the minimal nucleus", () => {
    let f = frequencies(params({ topP: 0.75 }), logits, N);
    expect(f[2]! + f[3]!).toBe(0);
    expectClose(f.slice(0, 2), [0.5 / 0.8, 0.3 / 0.8], N);
    f = frequencies(params({ topP: 0.81 }), logits, N);
    expect(f[3]).toBe(0);
    expect(f[2]).toBeGreaterThan(0.1);
    f = frequencies(params({ topP: 0.4 }), logits, 2000);
    expect(f[0]).toBe(1);
  });

  test("min_p drops tokens below min_p times the best probability", () => {
    const f = frequencies(params({ minP: 0.2 }), logits, N);
    expect(f[3]).toBe(0);
    expectClose(f.slice(0, 3), [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95], N);
    const g = frequencies(params({ minP: 0.7 }), logits, 2000);
    expect(g[0]).toBe(1);
  });

  test("top_p / top_k selection matches a sort-based reference on random rows with ties", () => {
    const rnd = createRandom(99);
    for (let trial = 0; trial < 300; trial++) {
      const n = 1 + Math.floor(rnd() * 60);
      const w = Array.from({ length: n }, () => (rnd() < 0.3 ? 0.25 : rnd()));
      const sorted = [...w].sort((a, b) => b - a);
      const total = w.reduce((a, b) => a + b, 0);
      const p = rnd();
      let acc = 0;
      let nucleus = 0;
      while (nucleus < n && acc < p * total) acc += sorted[nucleus++]!;
      nucleus = Math.max(1, nucleus);

      const c = candidatesOf(w);
      c.topP(p);
      expect(c.n).toBe(nucleus);
      const kept = Array.from(c.weights.subarray(0, c.n)).sort((a, b) => b - a);
      expect(kept).toEqual(sorted.slice(0, nucleus));

      const k = 1 + Math.floor(rnd() * n);
      const d = candidatesOf(w);
      d.topK(k);
      expect(d.n).toBe(k);
      expect(Array.from(d.weights.subarray(0, k)).sort((a, b) => b - a)).toEqual(sorted.slice(0, k));
      for (let i = 0; i < k; i++) expect(w[d.ids[i]!]).toBe(d.weights[i]!);
    }
  });
});

describe("large vocabularies", () => {
  const v = 20_000;
  const r = createRandom(5);
  const row = Float32Array.from({ length: v }, () => r() * 12);
  const order = Array.from(row, (l, id) => ({ id, l })).sort((a, b) => b.l - a.l);

  test("top_p over the whole vocabulary samples only from the exact nucleus", () => {
    const m = order[0]!.l;
    const w = order.map((o) => Math.exp(o.l - m));
    const total = w.reduce((a, b) => a + b, 0);
    let acc = 0;
    let k = 0;
    while (acc < 0.3 * total) acc += w[k++]!;
    const nucleus = new Set(order.slice(0, k).map((o) => o.id));
    const s = createSampler(params({ topP: 0.3, seed: 8 }), v);
    const seen = new Set<number>();
    for (let i = 0; i < 3000; i++) {
      const id = s.sample(row);
      expect(nucleus.has(id)).toBe(true);
      seen.add(id);
    }
    // The boundary token is reachable too (it has a sizeable share of the nucleus).
    expect(seen.size).toBeGreaterThan(k * 0.8);
  });

  test("top_k beyond the heap limit partitions instead, never leaving the k best", () => {
    const k = 5000;
    const best = new Set(order.slice(0, k).map((o) => o.id));
    const s = createSampler(params({ topK: k, temperature: 3, seed: 9 }), v);
    for (let i = 0; i < 500; i++) expect(best.has(s.sample(row))).toBe(true);
  });

  test("pure temperature sampling over the whole vocabulary follows softmax", () => {
    const small = Float32Array.from({ length: v }, (_, i) => (i < 4 ? 10 - i : -5));
    const probs = softmax(Array.from(small));
    const s = createSampler(params({ seed: 10 }), v);
    const f = new Array(5).fill(0);
    const draws = 3000;
    for (let i = 0; i < draws; i++) {
      const id = s.sample(small);
      f[Math.min(id, 4)]++;
    }
    const tail = probs.slice(4).reduce((a, b) => a + b, 0);
    expectClose(f.map((x) => x / draws), [...probs.slice(0, 4), tail], draws);
  });
});

describe("penalties and logit_bias", () => {
  test("presence and frequency penalties change the argmax when they should", () => {
    const row = Float32Array.from([2.0, 1.9, 0.5]);
    const counts = new Map<number, number>();
    countToken(counts, 0);
    expect(createSampler(params({ temperature: 0, presencePenalty: 0.05 }), 3).sample(row, counts)).toBe(0);
    expect(createSampler(params({ temperature: 0, presencePenalty: 0.2 }), 3).sample(row, counts)).toBe(1);
    expect(createSampler(params({ temperature: 0, frequencyPenalty: 0.05 }), 3).sample(row, counts)).toBe(0);
    countToken(counts, 0);
    countToken(counts, 0);
    expect(createSampler(params({ temperature: 0, frequencyPenalty: 0.05 }), 3).sample(row, counts)).toBe(1);
    // Negative penalties encourage repetition.
    expect(createSampler(params({ temperature: 0, presencePenalty: -2 }), 3).sample(row, new Map([[2, 1]]))).toBe(2);
    // The caller's logits are restored.
    expect(Array.from(row)).toEqual(Array.from(Float32Array.from([2.0, 1.9, 0.5])));
  });

  test("penalties shift the sampling distribution by exactly the OpenAI formula", () => {
    const counts = new Map([[0, 2], [1, 1]]);
    const p = params({ presencePenalty: 0.3, frequencyPenalty: 0.2, seed: 77 });
    const adjusted = LOGITS.map((l, i) => l - (i === 0 ? 0.3 + 0.4 : i === 1 ? 0.3 + 0.2 : 0));
    expectClose(frequencies(p, LOGITS, N, counts), softmax(adjusted), N);
  });

  test("logit_bias -100 bans, +100 forces", () => {
    const banned = frequencies(params({ temperature: 2, logitBias: { 0: -100 } }), LOGITS, 5000);
    expect(banned[0]).toBe(0);
    const forced = frequencies(params({ temperature: 1.5, logitBias: { 5: 100 } }), LOGITS, 5000);
    expect(forced[5]).toBe(1);
    expect(createSampler(params({ temperature: 0, logitBias: { 0: -100 } }), 8).sample(Float32Array.from(LOGITS))).toBe(1);
    const shifted = frequencies(params({ logitBias: { 3: 1.5 }, seed: 3 }), LOGITS, N);
    expectClose(shifted, softmax(LOGITS.map((l, i) => (i === 3 ? l + 1.5 : l))), N);
  });
});

describe("seeds", () => {
  const draw = (p: SamplingParams, stream = 0) => {
    const s = createSampler(p, LOGITS.length, { stream });
    const row = Float32Array.from(LOGITS.map((l) => l / 4));
    return Array.from({ length: 64 }, () => s.sample(row));
  };

  test("same seed, same sequence; other seed or stream, another", () => {
    expect(draw(params({ seed: 42 }))).toEqual(draw(params({ seed: 42 })));
    expect(draw(params({ seed: 42 }))).not.toEqual(draw(params({ seed: 43 })));
    expect(draw(params({ seed: 42 }), 1)).not.toEqual(draw(params({ seed: 42 }), 0));
    expect(draw(params({ seed: 2 ** 40 + 5 }))).not.toEqual(draw(params({ seed: 5 })));
  });

  test("without a seed, samplers differ", () => {
    expect(draw(params({ seed: undefined }))).not.toEqual(draw(params({ seed: undefined })));
  });

  test("the generator is uniform enough", () => {
    const r = createRandom(7);
    const bins = new Array(10).fill(0);
    for (let i = 0; i < 100000; i++) {
      const u = r();
      expect(u >= 0 && u < 1).toBe(true);
      bins[Math.floor(u * 10)]++;
    }
    for (const b of bins) expect(Math.abs(b - 10000)).toBeLessThan(500);
  });
});

describe("masks", () => {
  test("only allowed tokens are sampled, greedy takes the best allowed", () => {
    const mask = createMask(8);
    allowToken(mask, 4);
    allowToken(mask, 6);
    const s = createSampler(params({ temperature: 1 }), 8);
    const row = Float32Array.from(LOGITS);
    const seen = new Set<number>();
    for (let i = 0; i < 2000; i++) seen.add(s.sample(row, null, mask));
    expect([...seen].sort()).toEqual([4, 6]);
    expect(createSampler(params({ temperature: 0 }), 8).sample(row, null, mask)).toBe(6);
  });

  test("a large vocabulary with a sparse mask", () => {
    const v = 151_936;
    const row = new Float32Array(v);
    const r = createRandom(1);
    for (let i = 0; i < v; i++) row[i] = r() * 10;
    row[100] = 50;
    const mask = createMask(v);
    for (const id of [70_000, 70_001, 151_935]) allowToken(mask, id);
    const s = createSampler(params({ topP: 0.9, topK: 50 }), v);
    for (let i = 0; i < 50; i++) expect([70_000, 70_001, 151_935]).toContain(s.sample(row, null, mask));
    expect(createSampler(params({ temperature: 0 }), v).sample(row)).toBe(100);
    expect(createSampler(params({ temperature: 0 }), v).sample(row, null, createMask(v, true))).toBe(100);
  });

  test("nothing allowed is an error", () => {
    const s = createSampler(params({ logitBias: { 4: -100 } }), 8);
    const mask = createMask(8);
    allowToken(mask, 4);
    expect(() => s.sample(Float32Array.from(LOGITS), null, mask)).toThrow(NoAllowedTokenError);
  });
});

describe("logprobs", () => {
  test("log-softmax of the raw logits with the top alternatives, best first", () => {
    const r = createRandom(11);
    const row = Float32Array.from({ length: 1000 }, () => r() * 8 - 4);
    const exact = (() => {
      const m = Math.max(...row);
      const lse = m + Math.log(row.reduce((a, l) => a + Math.exp(l - m), 0));
      return Array.from(row, (l) => l - lse);
    })();
    const res = computeLogprobs(row, 17, 5);
    // Within the float32 normaliser's 3e-7 (see logprobs.ts).
    expect(res.logprob).toBeCloseTo(exact[17]!, 6);
    const best = exact.map((lp, id) => ({ id, lp })).sort((a, b) => b.lp - a.lp).slice(0, 5);
    expect(res.top.map((t) => t.id)).toEqual(best.map((b) => b.id));
    res.top.forEach((t, i) => expect(t.logprob).toBeCloseTo(best[i]!.lp, 6));
    expect(computeLogprobs(row, 0, 50).top.length).toBe(20);
    expect(computeLogprobs(row, 0, 0).top).toEqual([]);
  });

  test("sampler.logprobs after sample() equals them computed afresh: the row the sampler left in the SIMD kernels is reused only when it is the same, unedited", () => {
    const r = createRandom(5);
    // A vocabulary past the sampler's size (padding rows), as Qwen3's: the row is a subarray.
    const row = Float32Array.from({ length: 1003 }, () => r() * 10 - 5);
    const other = Float32Array.from({ length: 1000 }, () => r() * 10 - 5);
    const fresh = (id: number) => computeLogprobs(row.slice(), id, 5, 1000);
    for (const p of [params({}), params({ logitBias: { 7: 100, 8: -100 } }), params({ presencePenalty: 2 })]) {
      const s = createSampler(p, 1000);
      const t = createSampler(params({}), 1000);
      const counts = new Map([[7, 3], [9, 1]]);
      for (let step = 0; step < 3; step++) {
        const id = s.sample(row, counts);
        // Another row sampled in between (another choice of the batch) must not be read instead.
        if (step === 1) t.sample(other);
        expect(s.logprobs(row, id, 5)).toEqual(fresh(id));
      }
    }
  });

  test("sampler.logprobs ignores bias and penalties (reports the model's distribution)", () => {
    const s = createSampler(params({ logitBias: { 0: -100 } }), LOGITS.length);
    const row = Float32Array.from(LOGITS);
    s.sample(row);
    const lp = s.logprobs(row, 0, 2);
    expect(lp.logprob).toBeCloseTo(Math.log(softmax(LOGITS)[0]!), 6);
    expect(lp.top[0]!.id).toBe(0);
  });
});
