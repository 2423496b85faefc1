// The allowed tokens of a row as runs [start, end) of consecutive ids, so that every pass over
// the logits is a plain loop over ranges instead of testing one mask bit per token: whole words
// of a mask extend a run, empty words are skipped, and only mixed words are read bit by bit.

import type { TokenMask } from "./mask.ts";

export class AllowedRuns {
  /** start0, end0, start1, end1, … (grown on demand: masks rarely make more than a few runs). */
  bounds: Int32Array = new Int32Array(64);
  /** Number of runs. */
  count = 0;

  /** `vocabSize` bounds the ids; the runs' storage starts small and grows. */
  constructor(readonly vocabSize: number) {}

  private grow(): Int32Array {
    // At most one run per two ids (a run needs an allowed id followed by a disallowed one).
    const most = 2 * (((this.vocabSize + 1) >>> 1) + 1);
    const next = new Int32Array(Math.min(Math.max(most, this.bounds.length + 2), this.bounds.length * 4));
    next.set(this.bounds);
    this.bounds = next;
    return next;
  }

  /** Every id below `size` (no mask), or the ids `mask` allows. */
  fill(size: number, mask: TokenMask | null): void {
    let b = this.bounds;
    if (mask === null) {
      b[0] = 0;
      b[1] = size;
      this.count = size > 0 ? 1 : 0;
      return;
    }
    let n = 0;
    let open = -1; // start of the run being extended, or -1
    const words = Math.min(mask.length, (size + 31) >>> 5);
    const lastBits = size & 31 ? (1 << (size & 31)) - 1 : -1;
    for (let w = 0; w < words; w++) {
      // The last word's bits past `size` do not count.
      const bits = w === words - 1 && (size + 31) >>> 5 === words ? mask[w]! & lastBits : mask[w]! | 0;
      const base = w << 5;
      if (bits === -1) {
        if (open < 0) open = base;
        continue;
      }
      if (bits === 0) {
        if (open >= 0) {
          if (n + 2 > b.length) b = this.grow();
          b[n++] = open;
          b[n++] = base;
          open = -1;
        }
        continue;
      }
      // Walk the word's transitions: the next set bit opens a run, the next clear bit closes it.
      let p = 0;
      while (p < 32) {
        const rest = open < 0 ? bits >>> p : ~bits >>> p;
        if (rest === 0) break;
        p += 31 - Math.clz32(rest & -rest);
        if (open < 0) open = base + p;
        else {
          if (n + 2 > b.length) b = this.grow();
          b[n++] = open;
          b[n++] = base + p;
          open = -1;
        }
      }
    }
    if (open >= 0) {
      if (n + 2 > b.length) b = this.grow();
      b[n++] = open;
      b[n++] = Math.min(words << 5, size);
    }
    this.count = n >>> 1;
  }
}
