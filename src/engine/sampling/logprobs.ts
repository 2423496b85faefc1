// Log-probabilities as OpenAI reports them: log-softmax of the model's own logits, before any
// penalty, bias, mask or filter.


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
const BINS_PER_UNIT = 32;
const LAST_BIN = NEGLIGIBLE * BINS_PER_UNIT;
/** e^(-b/32) for each bin b. */
const EDGE = Float64Array.from({ length: LAST_BIN + 2 }, (_, b) => Math.exp(-b / BINS_PER_UNIT));
/** Adding and subtracting 1.5·2^52 rounds to the nearest integer in double arithmetic (see row-split.ts). */
const ROUND = 6755399441055744;
const C1 = 1 / BINS_PER_UNIT;
const C2 = C1 / 2 / BINS_PER_UNIT;
const C3 = C2 / 3 / BINS_PER_UNIT;
const C4 = C3 / 4 / BINS_PER_UNIT;

/** Log-probability of `tokenId` and of the `topN` (≤ 20) most likely tokens under `logits`. */
export function computeLogprobs(logits: Float32Array, tokenId: number, topN = 0, size = logits.length): LogprobsResult {
  const k = Math.max(0, Math.min(MAX_TOP_LOGPROBS, Math.floor(topN)));
  const topIds = new Int32Array(k);
  const topVals = new Float64Array(k).fill(-Infinity);
  const max = maxAndTop(logits, size, k, topIds, topVals);
  const lse = max + Math.log(normaliser(logits, size, max));
  const top: TokenLogprobInfo[] = [];
  for (let j = 0; j < k; j++) if (topVals[j]! > -Infinity) top.push({ id: topIds[j]!, logprob: topVals[j]! - lse });
  const own = tokenId >= 0 && tokenId < size ? logits[tokenId]! - lse : -Infinity;
  return { id: tokenId, logprob: own, top };
}

/**
 * The largest logit, and the k largest (best first) by insertion into a short sorted list: most
 * tokens fail the first comparison. The alternatives are the most likely tokens however unlikely.
 */
function maxAndTop(logits: Float32Array, size: number, k: number, topIds: Int32Array, topVals: Float64Array): number {
  let floor = k > 0 ? -Infinity : Infinity;
  let max = -Infinity;
  for (let i = 0; i < size; i++) {
    const v = logits[i]!;
    if (v > max) max = v;
    if (v > floor) {
      let j = k - 1;
      while (j > 0 && topVals[j - 1]! < v) {
        topVals[j] = topVals[j - 1]!;
        topIds[j] = topIds[j - 1]!;
        j--;
      }
      topVals[j] = v;
      topIds[j] = i;
      floor = topVals[k - 1]!;
    }
  }
  return max;
}

/**
 * Σ e^(v - max), summed per bin of width 1/32 in max - v: a term is e^(-b/32) · e^(-x/32) with
 * b = round(32·(max - v)) and |x| <= 1/2, and e^(-x/32) is its Taylor series to the 4th power
 * (relative error under (1/64)⁵/120 < 1e-11). About twice as fast as an exp per token under
 * JavaScriptCore (kept in its own small function: inlined into the caller, it ran slower).
 */
function normaliser(logits: Float32Array, size: number, max: number): number {
  const mass = new Float64Array(LAST_BIN + 2);
  for (let i = 0; i < size; i++) {
    const d = (max - logits[i]!) * BINS_PER_UNIT;
    if (d <= LAST_BIN) {
      const bin = d + ROUND - ROUND;
      const x = d - bin;
      mass[bin | 0]! += 1 - x * (C1 - x * (C2 - x * (C3 - x * C4)));
    }
  }
  let sum = 0;
  for (let b = 0; b <= LAST_BIN; b++) sum += EDGE[b]! * mass[b]!;
  return sum;
}
