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
  const max = maxOf(logits, size);

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
  // Two tokens per step into two sums, so that consecutive additions do not wait on each other.
  // expNonPositive's relative error (< 1e-12) moves the log-sum by less than that.
  let sum0 = 0;
  let sum1 = 0;
  const cutoff = max - NEGLIGIBLE;
  let i = 0;
  for (const end = size - 1; i < end; i += 2) {
    const v0 = logits[i]!;
    const v1 = logits[i + 1]!;
    if (v0 >= cutoff) sum0 += expNonPositive(v0 - max);
    if (v1 >= cutoff) sum1 += expNonPositive(v1 - max);
    // The alternatives are the most likely tokens however unlikely: also below the cutoff.
    if (v0 > floor) floor = insert(v0, i);
    if (v1 > floor) floor = insert(v1, i + 1);
  }
  if (i < size) {
    const v = logits[i]!;
    if (v >= cutoff) sum0 += expNonPositive(v - max);
    if (v > floor) floor = insert(v, i);
  }
  const lse = max + Math.log(sum0 + sum1);
  const top: TokenLogprobInfo[] = [];
  for (let j = 0; j < k; j++) if (topVals[j]! > -Infinity) top.push({ id: topIds[j]!, logprob: topVals[j]! - lse });
  const own = tokenId >= 0 && tokenId < size ? logits[tokenId]! - lse : -Infinity;
  return { id: tokenId, logprob: own, top };
}

/** Largest logit of the first `size`, in four independent lanes. */
function maxOf(logits: Float32Array, size: number): number {
  let a0 = -Infinity;
  let a1 = -Infinity;
  let a2 = -Infinity;
  let a3 = -Infinity;
  let i = 0;
  for (const end = size - 3; i < end; i += 4) {
    const x0 = logits[i]!;
    const x1 = logits[i + 1]!;
    const x2 = logits[i + 2]!;
    const x3 = logits[i + 3]!;
    if (x0 > a0) a0 = x0;
    if (x1 > a1) a1 = x1;
    if (x2 > a2) a2 = x2;
    if (x3 > a3) a3 = x3;
  }
  for (; i < size; i++) if (logits[i]! > a0) a0 = logits[i]!;
  return Math.max(a0, a1, a2, a3);
}
