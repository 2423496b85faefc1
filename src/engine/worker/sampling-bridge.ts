// A choice's sampler together with the generated-token counts its penalties read.
import { countToken, createSampler, type Sampler } from "../sampling/index.ts";
import type { TextTokenizer } from "../text/tokenizer.ts";
import type { SamplingParams, TokenLogprob } from "../types.ts";

export interface ChoiceSampler {
  sample(logits: Float32Array, mask?: Uint32Array | null): number;
  accept(token: number): void;
  readonly sampler: Sampler;
}

/**
 * `vocabSize` is the tokenizer's: embedding rows past it (padding, as in Qwen3's 151,936) are
 * never sampled. Each choice gets its own random stream, so n > 1 choices differ under one seed.
 */
export function createChoiceSampler(params: SamplingParams, vocabSize: number, choice: number): ChoiceSampler {
  const sampler = createSampler(params, vocabSize, { stream: choice });
  const counts = new Map<number, number>();
  return {
    sampler,
    sample: (logits, mask = null) => sampler.sample(logits, counts, mask),
    accept: (token) => countToken(counts, token),
  };
}

const decoder = new TextDecoder();

/** The OpenAI logprobs entry for a chosen token. */
export function tokenLogprob(
  s: ChoiceSampler,
  logits: Float32Array,
  token: number,
  topN: number,
  tokenizer: TextTokenizer,
): TokenLogprob {
  const r = s.sampler.logprobs(logits, token, topN);
  const entry = (id: number, logprob: number) => {
    const bytes = tokenizer.tokenBytes(id);
    return {
      token: bytes ? decoder.decode(bytes) : (tokenizer.idToToken(id) ?? ""),
      logprob,
      bytes: bytes ? [...bytes] : null,
    };
  };
  return { ...entry(r.id, r.logprob), top_logprobs: r.top.map((t) => entry(t.id, t.logprob)) };
}
