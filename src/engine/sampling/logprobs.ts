// Log-probabilities as OpenAI reports them: log-softmax of the model's own logits, before any
// penalty, bias, mask or filter. The normaliser is summed by a SIMD kernel (simd/sum-exp.wat) in
// float32 arithmetic, as vLLM's log_softmax: a log-probability is within 2e-7·(1 + H) of exact,
// H the distribution's entropy (at most 2.6e-6 at a 151,936-token vocabulary), and never above 0
// (the largest logit's own term is exactly 1).
import { MAX_TOP, placeRow, rowMax, rowSumExp, rowTop } from "./simd/sum-exp.ts";

export interface TokenLogprobInfo {
  id: number;
  logprob: number;
}

export interface LogprobsResult extends TokenLogprobInfo {
  /** The most likely tokens, best first. */
  top: TokenLogprobInfo[];
}

export const MAX_TOP_LOGPROBS = MAX_TOP;

/**
 * Log-probability of `tokenId` and of the `topN` (≤ 20) most likely tokens under `logits`.
 * `placed`: the SIMD kernels hold these logits already, unchanged (the sampler's row), so they
 * are not copied again.
 */
export function computeLogprobs(logits: Float32Array, tokenId: number, topN = 0, size = logits.length, placed = false): LogprobsResult {
  const k = Math.max(0, Math.min(MAX_TOP_LOGPROBS, Math.floor(topN)));
  const topIds = new Int32Array(k);
  const topVals = new Float64Array(k);
  const values = size === logits.length ? logits : logits.subarray(0, size);
  if (!placed) placeRow(values);
  const max = rowMax();
  const lse = max === -Infinity ? -Infinity : max + Math.log(rowSumExp(max));
  rowTop(topIds, topVals);
  const top: TokenLogprobInfo[] = [];
  for (let j = 0; j < k; j++) if (topVals[j]! > -Infinity) top.push({ id: topIds[j]!, logprob: topVals[j]! - lse });
  const own = tokenId >= 0 && tokenId < size ? logits[tokenId]! - lse : -Infinity;
  return { id: tokenId, logprob: own, top };
}
