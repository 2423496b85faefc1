// The per-request sampler: logits processors (bias, penalties), the allowed-token mask, then
// greedy argmax or temperature sampling with top-k / top-p / min-p.

import type { SamplingParams } from "../types.ts";
import { Candidates, NEGLIGIBLE, maxLogit } from "./candidates.ts";
import { computeLogprobs, type LogprobsResult } from "./logprobs.ts";
import type { TokenMask } from "./mask.ts";
import { LogitsEdits, buildProcessors, type LogitsProcessor, type TokenCounts } from "./processors.ts";
import { createRandom, type Random } from "./rng.ts";
import { VocabWeights } from "./vocab-weights.ts";

/** Up to this k, top-k selects with a heap in one pass over the logits. */
const HEAP_TOP_K = 4096;

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
  private readonly candidates: Candidates;
  private readonly vocabWeights: VocabWeights | null;
  private readonly random: Random;
  private readonly greedy: boolean;

  constructor(
    private readonly params: SamplingParams,
    private readonly vocabSize: number,
    options: SamplerOptions,
  ) {
    this.processors = buildProcessors(params, vocabSize);
    this.greedy = params.temperature <= 0 || params.topK === 1;
    this.candidates = new Candidates(this.greedy ? 0 : vocabSize);
    this.vocabWeights = this.greedy || (params.topK > 0 && params.topK <= HEAP_TOP_K) ? null : new VocabWeights(vocabSize);
    this.random = options.random ?? createRandom(params.seed, options.stream ?? 0);
  }

  sample(logits: Float32Array, counts: TokenCounts | null = null, mask: TokenMask | null = null): number {
    const size = Math.min(this.vocabSize, logits.length);
    const edits = new LogitsEdits(logits);
    try {
      for (const p of this.processors) p.apply(edits, counts);
      const best = maxLogit(logits, size, mask);
      if (best.id < 0 || best.value === -Infinity) throw new NoAllowedTokenError();
      if (this.greedy) return best.id;

      // Order as vLLM: min-p (a logit threshold, which also spares work), then top-k, then top-p.
      const { temperature: t, topK, topP, minP } = this.params;
      const max = best.value;
      let cutoff = max - NEGLIGIBLE * t;
      if (minP > 0) cutoff = Math.max(cutoff, max + t * Math.log(minP));
      const c = this.candidates;
      const vw = this.vocabWeights;
      if (vw === null) {
        c.collectTopK(logits, size, mask, max, t, cutoff, topK);
      } else if (topK > 0) {
        c.collect(logits, size, mask, max, t, cutoff);
        c.topK(topK);
      } else {
        vw.weigh(logits, size, mask, max, t, cutoff, topP < 1);
        if (topP >= 1) return vw.draw(this.random(), size);
        vw.nucleus(topP, c, logits, size, max, t);
        return c.draw(this.random());
      }
      if (topP < 1) c.topP(topP);
      return c.draw(this.random());
    } finally {
      edits.undo();
    }
  }

  logprobs(logits: Float32Array, tokenId: number, topN: number): LogprobsResult {
    return computeLogprobs(logits, tokenId, topN, Math.min(this.vocabSize, logits.length));
  }
}

export function createSampler(params: SamplingParams, vocabSize: number, options: SamplerOptions = {}): Sampler {
  return new LogitsSampler(params, vocabSize, options);
}

/** Adds one generated token to the counts the penalties read. */
export function countToken(counts: Map<number, number>, id: number): void {
  counts.set(id, (counts.get(id) ?? 0) + 1);
}
