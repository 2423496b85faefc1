// The sampling warpers (top-k, top-p, min-p) work on a candidate list rather than the whole
// vocabulary: tokens whose probability is within e^-30 of the best one (anything below cannot
// change a float sample). Selection uses partitioning, never a full sort.

import { expNonPositive } from "./fast-exp.ts";
import type { TokenMask } from "./mask.ts";

/** Below max·e^-30 a token's share is under 1e-13 per token: it cannot be drawn in practice. */
export const NEGLIGIBLE = 30;

export class Candidates {
  readonly ids: Int32Array;
  /** Unnormalised probabilities exp((logit - max) / T); the best candidate has weight 1. */
  readonly weights: Float64Array;
  n = 0;

  constructor(capacity: number) {
    this.ids = new Int32Array(capacity);
    this.weights = new Float64Array(capacity);
  }

  /** Gathers every allowed token with logit >= cutoff, weighed at temperature `t`. */
  collect(logits: Float32Array, size: number, mask: TokenMask | null, max: number, t: number, cutoff: number): void {
    const ids = this.ids;
    let n = 0;
    if (mask) {
      for (let i = 0; i < size; i++) {
        if (logits[i]! >= cutoff && ((mask[i >>> 5]! >>> (i & 31)) & 1) === 1) ids[n++] = i;
      }
    } else {
      for (let i = 0; i < size; i++) if (logits[i]! >= cutoff) ids[n++] = i;
    }
    const w = this.weights;
    const inv = 1 / t;
    for (let j = 0; j < n; j++) w[j] = expNonPositive((logits[ids[j]!]! - max) * inv);
    this.n = n;
  }

  /**
   * Gathers the k allowed tokens with the largest logits (>= cutoff) with a min-heap: one pass in
   * which nearly every token fails a single comparison.
   */
  collectTopK(logits: Float32Array, size: number, mask: TokenMask | null, max: number, t: number, cutoff: number, k: number): void {
    const ids = this.ids;
    const heap = this.weights; // logits while selecting, weights afterwards
    let n = 0;
    let floor = cutoff;
    for (let i = 0; i < size; i++) {
      const v = logits[i]!;
      if (!(v >= floor) || (n === k && v === floor)) continue;
      if (mask && ((mask[i >>> 5]! >>> (i & 31)) & 1) === 0) continue;
      if (n < k) {
        let j = n++;
        while (j > 0) {
          const parent = (j - 1) >> 1;
          if (heap[parent]! <= v) break;
          heap[j] = heap[parent]!;
          ids[j] = ids[parent]!;
          j = parent;
        }
        heap[j] = v;
        ids[j] = i;
        if (n === k) floor = heap[0]!;
      } else {
        let j = 0;
        for (;;) {
          const l = 2 * j + 1;
          if (l >= k) break;
          const r = l + 1;
          const c = r < k && heap[r]! < heap[l]! ? r : l;
          if (heap[c]! >= v) break;
          heap[j] = heap[c]!;
          ids[j] = ids[c]!;
          j = c;
        }
        heap[j] = v;
        ids[j] = i;
        floor = heap[0]!;
      }
    }
    const inv = 1 / t;
    for (let j = 0; j < n; j++) heap[j] = Math.exp((heap[j]! - max) * inv);
    this.n = n;
  }

  private swap(a: number, b: number): void {
    const ids = this.ids;
    const w = this.weights;
    const ti = ids[a]!;
    ids[a] = ids[b]!;
    ids[b] = ti;
    const tw = w[a]!;
    w[a] = w[b]!;
    w[b] = tw;
  }

  /**
   * Three-way partition of [lo, hi) around `pivot`, heavier first. Returns [gt, eq]: [lo, gt)
   * holds weights > pivot, [gt, eq) weights == pivot, [eq, hi) the rest.
   */
  private partition(lo: number, hi: number, pivot: number): [number, number] {
    const w = this.weights;
    let lt = lo;
    let i = lo;
    let gt = hi;
    while (i < gt) {
      const v = w[i]!;
      if (v > pivot) this.swap(lt++, i++);
      else if (v < pivot) this.swap(i, --gt);
      else i++;
    }
    return [lt, gt];
  }

  private pivot(lo: number, hi: number): number {
    const w = this.weights;
    const a = w[lo]!;
    const b = w[(lo + hi) >>> 1]!;
    const c = w[hi - 1]!;
    return a < b ? (b < c ? b : a < c ? c : a) : a < c ? a : b < c ? c : b;
  }

  /** Keeps the k heaviest candidates (exactly k; ties at the boundary broken arbitrarily). */
  topK(k: number): void {
    if (k <= 0 || k >= this.n) return;
    let lo = 0;
    let hi = this.n;
    while (hi - lo > 1) {
      const [gt, eq] = this.partition(lo, hi, this.pivot(lo, hi));
      if (k <= gt) hi = gt;
      else if (k <= eq) break;
      else lo = eq;
    }
    this.n = k;
  }

  /**
   * Keeps the smallest set of heaviest candidates whose share of `total` (by default the
   * candidates' own sum) is at least p.
   */
  topP(p: number, total = -1): void {
    if (p >= 1 || this.n <= 1) return;
    const w = this.weights;
    if (total < 0) {
      total = 0;
      for (let i = 0; i < this.n; i++) total += w[i]!;
    }
    let need = p * total;
    let lo = 0;
    let hi = this.n;
    let keep = this.n;
    while (lo < hi) {
      const pivot = this.pivot(lo, hi);
      const [gt, eq] = this.partition(lo, hi, pivot);
      let heavier = 0;
      for (let i = lo; i < gt; i++) heavier += w[i]!;
      if (heavier >= need && gt > lo) {
        hi = gt;
        keep = gt;
        continue;
      }
      const equal = pivot * (eq - gt);
      if (heavier + equal >= need) {
        keep = gt + Math.max(1, Math.ceil((need - heavier) / pivot - 1e-9));
        break;
      }
      need -= heavier + equal;
      lo = eq;
      keep = eq;
    }
    this.n = Math.max(1, Math.min(keep, this.n));
  }

  /** Keeps candidates with probability at least minP times the best candidate's. */
  minP(minP: number): void {
    if (minP <= 0) return;
    const w = this.weights;
    let best = 0;
    for (let i = 0; i < this.n; i++) if (w[i]! > best) best = w[i]!;
    const threshold = minP * best;
    let n = 0;
    for (let i = 0; i < this.n; i++) {
      if (w[i]! >= threshold) {
        this.ids[n] = this.ids[i]!;
        w[n++] = w[i]!;
      }
    }
    this.n = n;
  }

  /** Draws one candidate id in proportion to its weight; `u` is uniform in [0, 1). */
  draw(u: number): number {
    const w = this.weights;
    let total = 0;
    for (let i = 0; i < this.n; i++) total += w[i]!;
    let target = u * total;
    for (let i = 0; i < this.n; i++) {
      target -= w[i]!;
      if (target < 0) return this.ids[i]!;
    }
    return this.ids[this.n - 1]!;
  }
}

/** Largest logit among allowed ids (-Infinity when none is allowed). */
export function maxLogit(logits: Float32Array, size: number, mask: TokenMask | null): { id: number; value: number } {
  let best = -Infinity;
  let id = -1;
  if (mask) {
    for (let w = 0, base = 0; base < size; w++, base += 32) {
      let bits = mask[w]!;
      // Whole words of disallowed tokens are skipped; structured output masks are often sparse.
      while (bits !== 0) {
        const bit = 31 - Math.clz32(bits & -bits);
        bits &= bits - 1;
        const i = base + bit;
        if (i >= size) break;
        const v = logits[i]!;
        if (v > best) {
          best = v;
          id = i;
        }
      }
    }
  } else {
    for (let i = 0; i < size; i++) {
      const v = logits[i]!;
      if (v > best) {
        best = v;
        id = i;
      }
    }
  }
  return { id, value: best };
}

