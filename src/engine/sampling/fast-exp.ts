// exp(x) for x <= 0, with a relative error below 3e-12, faster than Math.exp under
// JavaScriptCore for x >= -66 (below that it defers to Math.exp). Sampling calls it for every
// head token and logprobs for every vocabulary entry.
//
// exp(x) = 2^-(y/256) with y = -x·256·log2(e): the integer part k of y picks a table entry
// 2^-(k/256); the remainder r in [0, 1) contributes e^-f with f = r·ln2/256 < 0.0028, whose
// Taylor series cut after f³ errs by under f⁴/24 < 2.3e-12 (table entries and arithmetic add a
// few units of 1e-16). That truncation errs low, so the value at the top of one table step stays
// below the next step's entry and the function keeps decreasing across steps.

const STEPS = 256;
/** 2^(-k/256) down to 2^-96 (x ≈ -66.5): 192 KiB, of which sampling touches the first 24. */
const TABLE = Float64Array.from({ length: 96 * STEPS }, (_, k) => 2 ** (-k / STEPS));
const Y_PER_X = -Math.LOG2E * STEPS;
const F_PER_Y = Math.LN2 / STEPS;

/** Bound on |expNonPositive(x) / Math.exp(x) - 1| for x <= 0 (above the denormal range). */
export const EXP_RELATIVE_ERROR = 3e-12;

export function expNonPositive(x: number): number {
  const y = x * Y_PER_X;
  if (!(y >= 0 && y < TABLE.length)) return Math.exp(x);
  const k = y | 0;
  const f = (y - k) * F_PER_Y;
  return TABLE[k]! * (1 - f * (1 - f * (0.5 - f * 0.16666666666666666)));
}
