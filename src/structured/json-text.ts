// The byte-level shapes of JSON text: whitespace, string characters (as they appear encoded inside
// a JSON string), and sets of code points rendered in their JSON encoding.

import { alt, byteClass, charSet, lit, type Re, rep, seq } from "./automaton.ts";
import { type ByteSeq, MAX_CODE_POINT, utf8Sequences } from "./utf8.ts";

export type CpRange = [number, number];

export const WS_BYTES = byteClass([0x20, 0x20], [0x0a, 0x0a], [0x0d, 0x0d], [0x09, 0x09]);

/** Up to `max` JSON whitespace bytes: bounded so a model cannot loop in whitespace forever. */
export const ws = (max: number): Re => rep(WS_BYTES, 0, max);

const HEX = byteClass([0x30, 0x39], [0x41, 0x46], [0x61, 0x66]);
const HEX_NOT_D = byteClass([0x30, 0x39], [0x41, 0x43], [0x45, 0x46], [0x61, 0x63], [0x65, 0x66]);
const DD = byteClass([0x44, 0x44], [0x64, 0x64]);
const OCT_LOW = byteClass([0x30, 0x37]);

/**
 * `\uXXXX` outside the surrogate range: a lone surrogate escape would decode to a string whose
 * length and validity differ between JSON.parse and the validators, so they are not produced.
 */
const UNICODE_ESCAPE = seq(lit("\\u"), alt(seq(HEX_NOT_D, HEX, HEX, HEX), seq(DD, OCT_LOW, HEX, HEX)));

/** Any one character of JSON string content, in any of its valid encodings. */
export const JSON_CHAR: Re = alt(
  charSet([...utf8Sequences(0x20, 0x21), ...utf8Sequences(0x23, 0x5b), ...utf8Sequences(0x5d, MAX_CODE_POINT)]),
  seq(lit("\\"), byteClass([0x22, 0x22], [0x5c, 0x5c], [0x2f, 0x2f], [0x62, 0x62], [0x66, 0x66], [0x6e, 0x6e], [0x72, 0x72], [0x74, 0x74])),
  UNICODE_ESCAPE,
);

/** One character, escaped only in the short forms (where characters are counted). */
export const COUNTED_CHAR: Re = alt(
  charSet([...utf8Sequences(0x20, 0x21), ...utf8Sequences(0x23, 0x5b), ...utf8Sequences(0x5d, MAX_CODE_POINT)]),
  seq(lit("\\"), byteClass([0x22, 0x22], [0x5c, 0x5c], [0x2f, 0x2f], [0x62, 0x62], [0x66, 0x66], [0x6e, 0x6e], [0x72, 0x72], [0x74, 0x74])),
);

/** JSON string content characters without backslash escapes (used for keys that must differ from declared names). */
export const PLAIN_JSON_CHAR: Re = charSet([...utf8Sequences(0x20, 0x21), ...utf8Sequences(0x23, 0x5b), ...utf8Sequences(0x5d, MAX_CODE_POINT)]);

const SHORT_ESCAPES: Record<number, string> = { 0x08: "\\b", 0x09: "\\t", 0x0a: "\\n", 0x0c: "\\f", 0x0d: "\\r" };

/** The code points in `ranges`, each in one canonical JSON encoding. */
export function cpSetToJson(ranges: readonly CpRange[]): Re {
  const seqs: ByteSeq[] = [];
  const escapes: Re[] = [];
  for (const [lo, hi] of normalizeRanges(ranges)) {
    let a = lo;
    if (a < 0x20) {
      const top = Math.min(hi, 0x1f);
      for (let c = a; c <= top; c++) escapes.push(lit(SHORT_ESCAPES[c] ?? `\\u${c.toString(16).padStart(4, "0")}`));
      a = 0x20;
    }
    if (a > hi) continue;
    // Quote and backslash must be escaped; split them out of the range.
    for (const special of [0x22, 0x5c]) {
      if (a <= special && special <= hi) {
        if (a < special) seqs.push(...utf8Sequences(a, special - 1));
        escapes.push(lit(special === 0x22 ? '\\"' : "\\\\"));
        a = special + 1;
      }
    }
    if (a <= hi) seqs.push(...utf8Sequences(a, hi));
  }
  const parts: Re[] = [];
  if (seqs.length) parts.push(charSet(seqs));
  parts.push(...escapes);
  if (parts.length === 0) return charSet([]);
  return alt(...parts);
}

export function normalizeRanges(ranges: readonly CpRange[]): CpRange[] {
  const sorted = [...ranges].sort((x, y) => x[0] - y[0]);
  const out: CpRange[] = [];
  for (const [lo, hi] of sorted) {
    const last = out[out.length - 1];
    if (last && lo <= last[1] + 1) last[1] = Math.max(last[1], hi);
    else out.push([lo, hi]);
  }
  return out;
}

export function complementRanges(ranges: readonly CpRange[]): CpRange[] {
  const out: CpRange[] = [];
  let next = 0;
  for (const [lo, hi] of normalizeRanges(ranges)) {
    if (lo > next) out.push([next, lo - 1]);
    next = hi + 1;
  }
  if (next <= MAX_CODE_POINT) out.push([next, MAX_CODE_POINT]);
  return out;
}

/** A JSON string literal of `value` (compact JSON encoding). */
export const jsonLiteral = (value: unknown): Re => lit(JSON.stringify(value));
