// The per-request sampler: logits processors (bias, penalties), the allowed-token mask, then
// greedy argmax or temperature sampling with top-k / top-p / min-p.

import type { SamplingParams } from "../types.ts";
import { completeSampling } from "./defaults.ts";
import { Candidates, NEGLIGIBLE } from "./candidates.ts";
import { computeLogprobs, type LogprobsResult } from "./logprobs.ts";
import type { TokenMask } from "./mask.ts";
import { LogitsEdits, buildProcessors, type LogitsProcessor, type TokenCounts } from "./processors.ts";
import { createRandom, type Random } from "./rng.ts";
import { RowSplit } from "./row-split.ts";
import { AllowedRuns } from "./runs.ts";
import { argmax } from "./scan.ts";
import { isPlaced, placeRow, rowMax } from "./simd/sum-exp.ts";

/** Up to this k, top-k selects with a heap in one pass over the logits. */
const HEAP_TOP_K = 1024;

/** The OpenAI API's defaults: every processor and filter off, temperature 1, no seed. */
export const DEFAULT_SAMPLING: Readonly<SamplingParams> = {
  temperature: 1,
  topP: 1,
  topK: 0,
  minP: 0,
  presencePenalty: 0,
  frequencyPenalty: 0,
  logitBias: {},
};

export class NoAllowedTokenError extends Error {
  constructor() {
    super("no token is allowed: the mask and logit_bias exclude every token");
    this.name = "NoAllowedTokenError";
  }
}

export interface SamplerOptions {
  /** Separate random stream per choice, so n>1 choices differ under one seed. */
  stream?: number;
  /** Overrides the seeded generator (tests). */
  random?: Random;
}

export interface Sampler {
  /**
   * Picks the next token from one row of logits. The row is left as given (edits are undone).
   * `counts` are the generated tokens so far (for penalties); `mask` the allowed ids, if any.
   */
  sample(logits: Float32Array, counts?: TokenCounts | null, mask?: TokenMask | null): number;
  /** OpenAI logprobs for a chosen token, from the model's raw logits. */
  logprobs(logits: Float32Array, tokenId: number, topN: number): LogprobsResult;
}

class LogitsSampler implements Sampler {
  private readonly processors: LogitsProcessor[];
  private readonly runs: AllowedRuns;
  /** Top-k by heap (k ≤ HEAP_TOP_K). */
  private readonly heap: Candidates | null;
  /** Every other temperature setting. */
  private readonly split: RowSplit | null;
  private readonly random: Random;
  /** Every parameter set (what the request and the model left out: the API's defaults). */
  private readonly params: ReturnType<typeof completeSampling>;
  private readonly greedy: boolean;
  /** The logits of the last sample() when the SIMD kernels hold them unedited (see logprobs()). */
  private placed: Float32Array | null = null;
  /** min-p as a bound on (max - logit) / T, capped where tokens stop mattering. */
  private readonly limitUnits: number;

  constructor(
    given: SamplingParams,
    private readonly vocabSize: number,
    options: SamplerOptions,
  ) {
    const params = completeSampling(given);
    this.params = params;
    this.processors = buildProcessors(params, vocabSize);
    this.greedy = params.temperature <= 0 || params.topK === 1;
    this.runs = new AllowedRuns(vocabSize);
    const heap = !this.greedy && params.topK > 0 && params.topK <= HEAP_TOP_K;
    this.heap = heap ? new Candidates(params.topK) : null;
    this.split = this.greedy || heap ? null : new RowSplit(vocabSize);
    this.limitUnits = params.minP > 0 ? Math.min(NEGLIGIBLE, Math.max(0, -Math.log(params.minP))) : NEGLIGIBLE;
    this.random = options.random ?? createRandom(params.seed, options.stream ?? 0);
  }

  sample(logits: Float32Array, counts: TokenCounts | null = null, mask: TokenMask | null = null): number {
    const size = Math.min(this.vocabSize, logits.length);
    const edits = this.processors.length > 0 ? new LogitsEdits(logits) : null;
    this.placed = null;
    try {
      if (edits) for (const p of this.processors) p.apply(edits, counts);
      this.runs.fill(size, mask);
      return this.pick(logits);
    } finally {
      edits?.undo();
      // The kernels' copy holds the edited logits: not the row logprobs() reads.
      if (edits) this.placed = null;
    }
  }

  private pick(logits: Float32Array): number {
    const runs = this.runs;
    const { temperature: t, topK, topP } = this.params;
    // Order as vLLM: min-p (a bound on the logits), then top-k, then top-p.
    if (this.heap) {
      const c = this.heap;
      c.collectTopK(logits, runs, topK);
      let max = -Infinity;
      for (let j = 0; j < c.n; j++) if (c.weights[j]! > max) max = c.weights[j]!;
      if (max === -Infinity) throw new NoAllowedTokenError();
      c.weighLogits(max, 1 / t, this.limitUnits);
      c.topP(topP);
      return c.draw(this.random());
    }
    if (this.greedy) {
      const best = argmax(logits, runs);
      if (best < 0) throw new NoAllowedTokenError();
      return best;
    }
    const max = this.largestAllowed(logits, runs);
    if (max === -Infinity) throw new NoAllowedTokenError();
    const split = this.split!;
    split.split(logits, runs, max, t, this.limitUnits, this.placed === logits);
    if (topK > 0) {
      split.topK(topK, logits, runs);
      split.head.topP(topP);
      return split.head.draw(this.random());
    }
    if (topP < 1) {
      split.nucleus(topP, logits, runs);
      return split.head.draw(this.random());
    }
    return split.draw(logits, runs, this.random);
  }

  /**
   * The largest allowed logit (-Infinity when there is none; NaN never counts). With no mask, by
   * the SIMD kernel (a copy and a vector pass cost about half of the scalar pass); the id is not
   * needed here, only the value.
   */
  private largestAllowed(logits: Float32Array, runs: AllowedRuns): number {
    const b = runs.bounds;
    const size = Math.min(this.vocabSize, logits.length);
    if (runs.count === 1 && b[0] === 0 && b[1] === size) {
      placeRow(size === logits.length ? logits : logits.subarray(0, size));
      this.placed = logits;
      return rowMax();
    }
    const best = argmax(logits, runs);
    return best < 0 ? -Infinity : logits[best]!;
  }

  logprobs(logits: Float32Array, tokenId: number, topN: number): LogprobsResult {
    const size = Math.min(this.vocabSize, logits.length);
    // The row sample() put in the SIMD kernels' memory, unedited, unless another went there since.
    const placed = this.placed === logits && isPlaced(size === logits.length ? logits : logits.subarray(0, size));
    return computeLogprobs(logits, tokenId, topN, size, placed);
  }
}

export function createSampler(params: SamplingParams, vocabSize: number, options: SamplerOptions = {}): Sampler {
  return new LogitsSampler(params, vocabSize, options);
}

/** Adds one generated token to the counts the penalties read. */
export function countToken(counts: Map<number, number>, id: number): void {
  counts.set(id, (counts.get(id) ?? 0) + 1);
}
