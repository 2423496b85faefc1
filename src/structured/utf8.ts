// Code point ranges to UTF-8 byte-range sequences, so character classes of JSON Schema patterns
// can be matched byte by byte (tokens are matched on bytes, not on characters).

export type ByteRange = readonly [lo: number, hi: number];
/** One alternative: a sequence of byte ranges, one per encoded byte. */
export type ByteSeq = ByteRange[];

export const MAX_CODE_POINT = 0x10ffff;

export function encodeUtf8(cp: number): number[] {
  if (cp < 0x80) return [cp];
  if (cp < 0x800) return [0xc0 | (cp >> 6), 0x80 | (cp & 0x3f)];
  if (cp < 0x10000) return [0xe0 | (cp >> 12), 0x80 | ((cp >> 6) & 0x3f), 0x80 | (cp & 0x3f)];
  return [0xf0 | (cp >> 18), 0x80 | ((cp >> 12) & 0x3f), 0x80 | ((cp >> 6) & 0x3f), 0x80 | (cp & 0x3f)];
}

const LENGTH_LIMITS = [0x7f, 0x7ff, 0xffff, MAX_CODE_POINT];

/** Byte sequences covering exactly the code points lo..hi (surrogates excluded). */
export function utf8Sequences(lo: number, hi: number): ByteSeq[] {
  const out: ByteSeq[] = [];
  const pieces: Array<[number, number]> = [];
  // Surrogates are not encodable in UTF-8: cut them out first.
  if (lo <= 0xdfff && hi >= 0xd800) {
    if (lo < 0xd800) pieces.push([lo, 0xd7ff]);
    if (hi > 0xdfff) pieces.push([0xe000, hi]);
  } else pieces.push([lo, hi]);
  for (const [a, b] of pieces) {
    let start = a;
    for (const limit of LENGTH_LIMITS) {
      if (start > b) break;
      if (start > limit) continue;
      const end = Math.min(b, limit);
      splitSameLength(start, end, out);
      start = end + 1;
    }
  }
  return out;
}

function splitSameLength(lo: number, hi: number, out: ByteSeq[]): void {
  const n = encodeUtf8(lo).length;
  for (let i = 1; i < n; i++) {
    const m = (1 << (6 * i)) - 1;
    if ((lo & ~m) !== (hi & ~m)) {
      if ((lo & m) !== 0) {
        splitSameLength(lo, lo | m, out);
        splitSameLength((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) !== m) {
        splitSameLength(lo, (hi & ~m) - 1, out);
        splitSameLength(hi & ~m, hi, out);
        return;
      }
    }
  }
  const a = encodeUtf8(lo);
  const b = encodeUtf8(hi);
  out.push(a.map((x, i) => [x, b[i]] as const));
}
