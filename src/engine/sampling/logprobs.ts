// Log-probabilities as OpenAI reports them: log-softmax of the model's own logits, before any
// penalty, bias, mask or filter.

import { expNonPositive } from "./fast-exp.ts";

export interface TokenLogprobInfo {
  id: number;
  logprob: number;
}

export interface LogprobsResult extends TokenLogprobInfo {
  /** The most likely tokens, best first. */
  top: TokenLogprobInfo[];
}

export const MAX_TOP_LOGPROBS = 20;

/** Below max-40 a term adds under 4e-18 per token to the normaliser: below float64 resolution. */
const NEGLIGIBLE = 40;

/** Log-probability of `tokenId` and of the `topN` (≤ 20) most likely tokens under `logits`. */
export function computeLogprobs(logits: Float32Array, tokenId: number, topN = 0, size = logits.length): LogprobsResult {
  const k = Math.max(0, Math.min(MAX_TOP_LOGPROBS, Math.floor(topN)));

  // Top-k by insertion into a short sorted list; most tokens fail the first comparison.
  const topIds = new Int32Array(k);
  const topVals = new Float64Array(k).fill(-Infinity);
  let floor = k > 0 ? -Infinity : Infinity;
  const insert = (v: number, id: number): number => {
    let j = k - 1;
    while (j > 0 && topVals[j - 1]! < v) {
      topVals[j] = topVals[j - 1]!;
      topIds[j] = topIds[j - 1]!;
      j--;
    }
    topVals[j] = v;
    topIds[j] = id;
    return topVals[k - 1]!;
  };
  // One pass (online softmax): the sum is kept relative to the largest logit seen so far and
  // rescaled on the rare new maximum. expNonPositive's relative error (< 1e-12) moves the
  // log-sum by less than that; terms below max - 40 (under 4e-18 each) are left out.
  let max = -Infinity;
  let cutoff = -Infinity;
  let sum = 0;
  for (let i = 0; i < size; i++) {
    const v = logits[i]!;
    if (v >= cutoff) {
      if (v > max) {
        sum = max === -Infinity ? 1 : sum * expNonPositive(max - v) + 1;
        max = v;
        cutoff = max - NEGLIGIBLE;
      } else sum += expNonPositive(v - max);
    }
    // The alternatives are the most likely tokens however unlikely: also below the cutoff.
    if (v > floor) floor = insert(v, i);
  }
  const lse = max + Math.log(sum);
  const top: TokenLogprobInfo[] = [];
  for (let j = 0; j < k; j++) if (topVals[j]! > -Infinity) top.push({ id: topIds[j]!, logprob: topVals[j]! - lse });
  const own = tokenId >= 0 && tokenId < size ? logits[tokenId]! - lse : -Infinity;
  return { id: tokenId, logprob: own, top };
}
