// A freshly started model worker runs its per-token code in JavaScriptCore's lower tiers: the
// first thousands of tokens of a small model came at a fraction of the speed it reaches once the
// JIT has compiled the scheduler, the KV cache's bookkeeping, the sampler and the detokeniser
// into its optimising tiers. So at load the worker runs synthetic requests through that same code
// (a scheduler of its own over the model's sessions: plain decode steps, speculative
// verification, greedy and temperature sampling, stop strings, batches) for a bounded time,
// before it reports the model loaded. Nothing of it reaches the model's real scheduler: not its
// counters, its prefix cache nor its speculation measurements.
//
// What needs compiling is the code around the model's runs, which tiers up by how often it runs,
// not for how long: so only one decode step or verification in REAL_RUN_EVERY actually runs the
// model, and the others hand back the last logits it returned (the sequences' bookkeeping
// advances as if it had run). Requests are short, so that sequences stay within their first
// capacity class, where a skipped step needs no move. A small model thus gets through several
// times as many tokens in the same time.
import type { KvBackend, PrefixKv, Sequence } from "../batching/kv.ts";
import { DEFAULT_SAMPLING } from "../sampling/index.ts";
import type { SamplingParams, SpeculateMode } from "../types.ts";
import type { ModelRunner } from "./model-runner.ts";
import type { WireRequest } from "./protocol.ts";
import { RoundBatcher } from "./round-batcher.ts";
import { Scheduler, type JobSink } from "./scheduler.ts";

export interface WarmUpOptions {
  /** Wall time to spend, at most (requests under way then are cancelled). */
  budgetMs: number;
  /** Generated tokens after which warming stops even with time left. */
  maxTokens?: number;
  speculate: SpeculateMode;
}

export interface WarmUpReport {
  ms: number;
  tokens: number;
  requests: number;
}

const PROMPTS = [
  "Once upon a time",
  "Tell me a story about a cat and a dog. The cat and the dog played in the park. The cat and the dog",
  "Write a short list of colors.",
  "Repeat after me: the quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog.",
  "What is two plus two?",
];

/** The sampling settings requests mostly use, in turn. */
const SETTINGS: Partial<SamplingParams>[] = [
  { temperature: 0 },
  { temperature: 0.8, topP: 0.95, seed: 1 },
  { temperature: 0 },
  { temperature: 0.7, topK: 40, seed: 2 },
  { temperature: 1, seed: 3 },
];

const MAX_TOKENS_PER_REQUEST = 40;
/**
 * The requests that run every step are longer: their sequences move up the KV cache's capacity
 * classes, so that ONNX Runtime has run the larger shapes and the cache holds their buffers
 * before real requests of a few hundred tokens need them.
 */
const MAX_TOKENS_UNWRAPPED = 240;

/** Decode steps and verifications: one in this many runs the model. */
const REAL_RUN_EVERY = 16;

/** The scheduler's KV cache, but most decode steps and verifications reuse the last real logits. */
class SkippingBackend implements KvBackend {
  private calls = 0;
  private last: Float32Array | null = null;

  constructor(private readonly real: KvBackend) {}

  get canVerify(): boolean {
    return this.real.canVerify;
  }

  capacityFor(needed: number): number {
    return this.real.capacityFor(needed);
  }

  sequenceBytes(capacity: number): number {
    return this.real.sequenceBytes(capacity);
  }

  open(capacity: number): Sequence {
    return this.real.open(capacity);
  }

  close(seq: Sequence): void {
    this.real.close(seq);
  }

  prefill(seq: Sequence, tokens: number[], embeds?: Float32Array): Promise<Float32Array> {
    return this.real.prefill(seq, tokens, embeds);
  }

  /**
   * Whether this call may skip the model: each sequence must stay within its reservation and
   * within the capacity class its last real run gave it room in (the in-place cache keeps a
   * sequence in a pool of its class, and a skipped step does not move it; the padded cache's
   * classes are exact lengths, so there nothing is skipped).
   */
  private skip(seqs: Sequence[], added: number[]): boolean {
    if (++this.calls % REAL_RUN_EVERY === 0 || !this.last) return false;
    return seqs.every((s, i) => {
      const len = s.tokens.length;
      return len + added[i]! < s.capacity && this.real.capacityFor(len + added[i]!) === this.real.capacityFor(len);
    });
  }

  async decode(seqs: Sequence[], tokens: number[]): Promise<Float32Array[]> {
    if (!this.skip(seqs, tokens.map(() => 1))) {
      const out = await this.real.decode(seqs, tokens);
      this.last = out[0]!;
      return out;
    }
    seqs.forEach((s, i) => s.tokens.push(tokens[i]!));
    return seqs.map(() => this.last!);
  }

  async verify(seqs: Sequence[], tokens: number[][]): Promise<Float32Array[][]> {
    if (!this.skip(seqs, tokens.map((t) => t.length))) {
      const out = await this.real.verify(seqs, tokens);
      this.last = out[0]![0]!;
      return out;
    }
    seqs.forEach((s, i) => s.tokens.push(...tokens[i]!));
    return tokens.map((t) => t.map(() => this.last!));
  }

  truncate(seq: Sequence, length: number): void {
    this.real.truncate(seq, length);
  }

  snapshot(seq: Sequence, length: number): PrefixKv {
    return this.real.snapshot(seq, length);
  }

  restore(seq: Sequence, prefix: PrefixKv, length: number): void {
    this.real.restore(seq, prefix, length);
  }
}

export async function warmUp(runner: ModelRunner, opts: WarmUpOptions): Promise<WarmUpReport> {
  const start = performance.now();
  const report: WarmUpReport = { ms: 0, tokens: 0, requests: 0 };
  if (opts.budgetMs <= 0) return report;
  const maxTokens = opts.maxTokens ?? 20_000;
  const waiting = new Map<number, () => void>();
  // The rounds go through the worker's own batching and joining of events too, to be posted to
  // nobody.
  const rounds = new RoundBatcher(() => {});
  const sink: JobSink = {
    events: (rid, events) => {
      for (const e of events) if (e.type === "finish") report.tokens += e.completionTokens;
      rounds.add({ type: "events", rid, events });
    },
    done: (rid) => {
      rounds.add({ type: "done", rid });
      waiting.get(rid)?.();
    },
    endRound: (urgent) => rounds.endRound(urgent),
    // The model worker's sink has these four members in this order: the scheduler's calls of
    // them then see one shape, and the first real request does not undo their compiled code.
    stats: () => {},
  };
  // Both ways a round can run: plain decode steps, and (unless speculation is off) verification;
  // and, for some requests, the model's own KV cache unwrapped, as real requests use it, so that
  // the scheduler's calls of the cache have seen its class before the first of them.
  const wrapBackend = (b: KvBackend) => new SkippingBackend(b);
  const unwrapped = new Scheduler(runner, sink, { speculate: "off" });
  const schedulers = [new Scheduler(runner, sink, { speculate: "off", wrapBackend })];
  if (opts.speculate !== "off") schedulers.push(new Scheduler(runner, sink, { speculate: opts.speculate, speculatePolicy: "always", wrapBackend }));
  const all = [...schedulers, unwrapped];
  for (const s of all) void s.run();
  let rid = 0;
  const request = (i: number, maxTokens: number): WireRequest => ({
    requestId: `warm-up-${i}`,
    modelId: runner.info.id,
    messages: [{ role: "user", content: PROMPTS[i % PROMPTS.length]! }],
    sampling: { ...DEFAULT_SAMPLING, ...SETTINGS[i % SETTINGS.length] },
    maxTokens,
    stop: i % 3 === 2 ? ["\n\n\n"] : [],
    n: 1,
    logprobs: false,
    topLogprobs: 0,
  });
  const run = async (scheduler: Scheduler, i: number) => {
    const id = ++rid;
    const done = new Promise<void>((resolve) => waiting.set(id, resolve));
    await scheduler.admit(id, request(i, scheduler === unwrapped ? MAX_TOKENS_UNWRAPPED : MAX_TOKENS_PER_REQUEST));
    // A large model's step can take tens of milliseconds: the budget holds however long a request is.
    const deadline = setTimeout(() => scheduler.cancel(id), Math.max(0, start + opts.budgetMs - performance.now()));
    await done;
    clearTimeout(deadline);
    waiting.delete(id);
    report.requests++;
  };
  try {
    // The first request runs whatever the setup took (it warms the most); the budget cuts it short.
    for (let i = 0; (i === 0 || performance.now() - start < opts.budgetMs) && report.tokens < maxTokens; i++) {
      // One request in eight verifies drafts (a verification is dearer than a step), one runs every
      // step of the model, the others decode plainly.
      const scheduler = i % 8 === 3 ? unwrapped : schedulers[i % 8 === 5 ? schedulers.length - 1 : 0]!;
      // Mostly one stream (the case whose speed a fresh server is judged by), now and then four.
      if (i % 8 === 7) await Promise.all([0, 1, 2, 3].map((j) => run(scheduler, i + j)));
      else await run(scheduler, i);
    }
  } finally {
    for (const s of all) s.stop();
  }
  report.ms = performance.now() - start;
  return report;
}
