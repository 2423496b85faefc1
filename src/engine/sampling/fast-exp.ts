// exp(x) for x <= 0, with a relative error below 1e-12, about three times faster than Math.exp
// under JavaScriptCore for x >= -66 (below that it defers to Math.exp). Sampling candidates call
// it once per kept token.
//
// exp(x) = 2^-(y/256) with y = -x·256·log2(e): the integer k nearest y picks a table entry
// 2^-(k/256); the rest r = y - k in [-1/2, 1/2] contributes e^-f with f = r·ln2/256, |f| < 0.00136,
// whose Taylor series cut after f³ errs by under f⁴/24 < 1.5e-13 (table entries and arithmetic
// add a few units of 1e-16). The error has the same sign on both sides of each table step, so the
// function keeps decreasing across steps (to rounding).

const STEPS = 256;
/** 2^(-k/256) down to 2^-96 (x ≈ -66.5): 192 KiB. */
const TABLE = Float64Array.from({ length: 96 * STEPS }, (_, k) => 2 ** (-k / STEPS));
const Y_PER_X = -Math.LOG2E * STEPS;
const F_PER_Y = Math.LN2 / STEPS;
/**
 * Adding and subtracting 1.5·2^52 rounds y to the nearest integer in double arithmetic. `y | 0`
 * would be an integer that x86's cvtsi2sd must turn back into a double for y - k, and that
 * instruction waits on the previous call's result (it merges into its destination register): in a
 * loop over the vocabulary that serialised every exp.
 */
const ROUND = 6755399441055744;

/** Bound on |expNonPositive(x) / Math.exp(x) - 1| for x <= 0 (above the denormal range). */
export const EXP_RELATIVE_ERROR = 1e-12;

export function expNonPositive(x: number): number {
  const y = x * Y_PER_X;
  if (!(y >= 0 && y < TABLE.length - 1)) return Math.exp(x);
  const k = y + ROUND - ROUND;
  const f = (y - k) * F_PER_Y;
  // `| 0` truncates the integral double; as a bare index JSC would also check the conversion is
  // exact, converting back with the same cvtsi2sd.
  return TABLE[k | 0]! * (1 - f * (1 - f * (0.5 - f * 0.16666666666666666)));
}
