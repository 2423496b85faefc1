// JSON numbers as byte patterns, with numeric bounds compiled into digit-range patterns. Digit
// counts are bounded so that every produced number survives JSON.parse exactly (|n| < 1e15) and
// a model cannot extend a number forever.

import { alt, byteClass, lit, opt, type Re, rep, seq } from "./automaton.ts";

const D = byteClass([0x30, 0x39]);
const D19 = byteClass([0x31, 0x39]);
const digitRange = (a: number, b: number): Re => byteClass([0x30 + a, 0x30 + b]);

/** Largest magnitude of the integer part we produce: 15 digits. */
export const INT_LIMIT = 999_999_999_999_999;
const MAX_FRACTION_DIGITS = 12;

/** Non-negative integers a..b (decimal, no leading zeros). */
export function uintRange(a: number, b: number): Re {
  if (a > b) return { k: "set", seqs: [] };
  const la = String(a).length;
  const lb = String(b).length;
  if (la === lb) return sameLength(String(a), String(b));
  const parts: Re[] = [sameLength(String(a), "9".repeat(la))];
  for (let len = la + 1; len < lb; len++) parts.push(seq(D19, rep(D, len - 1, len - 1)));
  parts.push(sameLength(`1${"0".repeat(lb - 1)}`, String(b)));
  return alt(...parts);
}

function sameLength(a: string, b: string): Re {
  const n = a.length;
  if (n === 1) return digitRange(Number(a), Number(b));
  // Full ranges collapse; without this the split below is exponential in the digit count.
  if (/^0+$/.test(a) && /^9+$/.test(b)) return rep(D, n, n);
  if (a[0] === b[0]) return seq(lit(a[0]), sameLength(a.slice(1), b.slice(1)));
  const a0 = Number(a[0]);
  const b0 = Number(b[0]);
  const parts: Re[] = [seq(lit(a[0]), sameLength(a.slice(1), "9".repeat(n - 1)))];
  if (b0 - a0 > 1) parts.push(seq(digitRange(a0 + 1, b0 - 1), rep(D, n - 1, n - 1)));
  parts.push(seq(lit(b[0]), sameLength("0".repeat(n - 1), b.slice(1))));
  return alt(...parts);
}

/** Integers lo..hi (either side may be negative). */
export function intRange(lo: number, hi: number): Re {
  const parts: Re[] = [];
  if (hi >= 0) parts.push(uintRange(Math.max(lo, 0), hi));
  if (lo < 0) parts.push(seq(lit("-"), uintRange(Math.max(-hi, 1), -lo)));
  return parts.length ? alt(...parts) : { k: "set", seqs: [] };
}

export interface NumericBounds {
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  exclusiveMaximum?: number;
}

function integerBounds(b: NumericBounds): [number, number] {
  let lo = -INT_LIMIT;
  let hi = INT_LIMIT;
  if (b.minimum !== undefined) lo = Math.max(lo, Math.ceil(b.minimum));
  if (b.exclusiveMinimum !== undefined) lo = Math.max(lo, Math.floor(b.exclusiveMinimum) + 1);
  if (b.maximum !== undefined) hi = Math.min(hi, Math.floor(b.maximum));
  if (b.exclusiveMaximum !== undefined) hi = Math.min(hi, Math.ceil(b.exclusiveMaximum) - 1);
  return [lo, hi];
}

const hasBounds = (b: NumericBounds) =>
  b.minimum !== undefined || b.maximum !== undefined || b.exclusiveMinimum !== undefined || b.exclusiveMaximum !== undefined;

export function integerRe(b: NumericBounds): Re | null {
  const [lo, hi] = integerBounds(b);
  if (lo > hi) return null;
  return intRange(lo, hi);
}

const FRACTION = seq(lit("."), rep(D, 1, MAX_FRACTION_DIGITS));
const EXPONENT = seq(byteClass([0x45, 0x45], [0x65, 0x65]), opt(byteClass([0x2b, 0x2b], [0x2d, 0x2d])), rep(D, 1, 2));

/**
 * Numbers within the bounds. Unbounded numbers may carry a fraction and a small exponent. With
 * bounds, a value I.F lies in [I, I+1) (or (-(I+1), -I] when negative), so fractions are only
 * allowed on integer parts whose whole unit interval is inside the bounds; this is a subset of
 * the valid numbers, never a superset.
 */
export function numberRe(b: NumericBounds): Re | null {
  if (!hasBounds(b)) {
    return seq(opt(lit("-")), alt(lit("0"), seq(D19, rep(D, 0, 14))), opt(FRACTION), opt(EXPONENT));
  }
  const [lo, hi] = integerBounds(b);
  const parts: Re[] = [];
  if (lo <= hi) parts.push(intRange(lo, hi));
  // Non-negative fractional values I.F with I+1 <= upper limit, I >= lower limit.
  const upper = b.exclusiveMaximum !== undefined ? Math.min(b.exclusiveMaximum, b.maximum ?? Infinity) : (b.maximum ?? Infinity);
  const lower = b.exclusiveMinimum !== undefined ? Math.max(b.exclusiveMinimum, b.minimum ?? -Infinity) : (b.minimum ?? -Infinity);
  const strictLower = b.exclusiveMinimum !== undefined && (b.minimum === undefined || b.exclusiveMinimum >= b.minimum);
  const strictUpper = b.exclusiveMaximum !== undefined && (b.maximum === undefined || b.exclusiveMaximum <= b.maximum);
  // Positive side: I.F lies in [I, I+1) (F may be all zeros).
  const pLo = Math.max(0, strictLower ? Math.floor(lower) + 1 : Math.ceil(lower));
  const pHi = Math.min(INT_LIMIT, Math.floor(upper) - 1);
  if (pLo <= pHi) parts.push(seq(uintRange(pLo, pHi), FRACTION));
  // Negative side: -I.F in (-(I+1), -I]; need -(I+1) >= lower and -I <= upper.
  const nLo = Math.max(0, strictUpper ? Math.floor(-upper) + 1 : Math.ceil(-upper));
  const nHi = Math.min(INT_LIMIT, Math.floor(-lower) - 1);
  if (nLo <= nHi) parts.push(seq(lit("-"), uintRange(nLo, nHi), FRACTION));
  return parts.length ? alt(...parts) : null;
}

