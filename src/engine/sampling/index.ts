export { createSampler, countToken, DEFAULT_SAMPLING, NoAllowedTokenError, type Sampler, type SamplerOptions } from "./sampler.ts";
export { computeLogprobs, MAX_TOP_LOGPROBS, type LogprobsResult, type TokenLogprobInfo } from "./logprobs.ts";
export { createMask, allowToken, isAllowed, type TokenMask } from "./mask.ts";
export { createRandom, type Random } from "./rng.ts";
export {
  LogitsEdits,
  LogitBiasProcessor,
  PenaltyProcessor,
  buildProcessors,
  type LogitsProcessor,
  type TokenCounts,
} from "./processors.ts";
export { Candidates, maxLogit } from "./candidates.ts";
