// The sampling warpers (top-k, top-p, min-p) work on a candidate list rather than the whole
// vocabulary. Selection uses partitioning, never a full sort.

import { expNonPositive } from "./fast-exp.ts";
import type { TokenMask } from "./mask.ts";
import { AllowedRuns } from "./runs.ts";
import { argmax } from "./scan.ts";

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

  /**
   * Gathers the k allowed tokens with the largest logits with a min-heap, holding logits in
   * `weights` until `weighLogits`: one pass in which nearly every token fails one comparison.
   * Among equal logits at the boundary the lowest ids stay.
   */
  collectTopK(logits: Float32Array, runs: AllowedRuns, k: number): void {
    const heap = this.weights;
    const ids = this.ids;
    const b = runs.bounds;
    let n = 0;
    let floor = -Infinity;
    for (let r = 0; r < runs.count; r++) {
      const hi = b[2 * r + 1]!;
      let i = b[2 * r]!;
      for (; n < k && i < hi; i++) {
        const v = logits[i]!;
        if (!(v >= -Infinity)) continue; // NaN
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
      }
      for (; i < hi; i++) {
        const v = logits[i]!;
        if (v > floor) floor = this.replaceLightest(v, i, k);
      }
    }
    this.n = n;
  }

  /** Puts (v, id) in place of the heap's root and restores the heap; returns the new root. */
  private replaceLightest(v: number, id: number, k: number): number {
    const heap = this.weights;
    const ids = this.ids;
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
    ids[j] = id;
    return heap[0]!;
  }

  /**
   * Turns the logits `collectTopK` left in `weights` into weights exp((logit - max)·inv),
   * dropping candidates whose (max - logit)·inv exceeds `limit`.
   */
  weighLogits(max: number, inv: number, limit: number): void {
    const w = this.weights;
    const ids = this.ids;
    let n = 0;
    if (max === Infinity) {
      // Infinite logits share all the mass equally.
      for (let j = 0; j < this.n; j++) {
        if (w[j] !== Infinity) continue;
        ids[n] = ids[j]!;
        w[n++] = 1;
      }
      this.n = n;
      return;
    }
    for (let j = 0; j < this.n; j++) {
      const x = (w[j]! - max) * inv;
      if (!(-x <= limit)) continue;
      ids[n] = ids[j]!;
      w[n++] = expNonPositive(x);
    }
    this.n = n;
  }

  /** Results of `partition`: [lo, gt) heavier than the pivot, [gt, eq) equal, and the sum of [lo, gt). */
  private gt = 0;
  private eq = 0;
  private heavier = 0;

  /** Three-way partition of [lo, hi) around `pivot`, heavier first; sets gt, eq and heavier. */
  private partition(lo: number, hi: number, pivot: number): void {
    const w = this.weights;
    const ids = this.ids;
    let lt = lo;
    let i = lo;
    let gt = hi;
    let heavier = 0;
    while (i < gt) {
      const v = w[i]!;
      if (v > pivot) {
        heavier += v;
        w[i] = w[lt]!;
        w[lt] = v;
        const id = ids[i]!;
        ids[i] = ids[lt]!;
        ids[lt] = id;
        lt++;
        i++;
      } else if (v < pivot) {
        gt--;
        w[i] = w[gt]!;
        w[gt] = v;
        const id = ids[i]!;
        ids[i] = ids[gt]!;
        ids[gt] = id;
      } else i++;
    }
    this.gt = lt;
    this.eq = gt;
    this.heavier = heavier;
  }

  private pivot(lo: number, hi: number): number {
    const w = this.weights;
    const a = w[lo]!;
    const b = w[(lo + hi) >>> 1]!;
    const c = w[hi - 1]!;
    return a < b ? (b < c ? b : a < c ? c : a) : a < c ? a : b < c ? c : b;
  }

  /** Sum of the candidates' weights. */
  sum(): number {
    const w = this.weights;
    let total = 0;
    for (let i = 0; i < this.n; i++) total += w[i]!;
    return total;
  }

  /** Keeps the k heaviest candidates (exactly k; among ties at the boundary, the lowest ids). */
  topK(k: number): void {
    if (k <= 0 || k >= this.n) return;
    let lo = 0;
    let hi = this.n;
    while (hi - lo > 1) {
      this.partition(lo, hi, this.pivot(lo, hi));
      if (k <= this.gt) hi = this.gt;
      else if (k <= this.eq) {
        // The boundary falls among equal weights: which of them stay must not depend on the
        // partitions' order (see pick).
        this.ids.subarray(this.gt, this.eq).sort();
        break;
      } else lo = this.eq;
    }
    this.n = k;
  }

  /**
   * Keeps the smallest set of heaviest candidates whose share of `total` (by default the
   * candidates' own sum) is at least p. Among equal weights at the boundary, only as many as
   * needed stay.
   */
  topP(p: number, total = -1): void {
    if (p >= 1 || this.n <= 1) return;
    this.keepMass(p * (total < 0 ? this.sum() : total));
  }

  /**
   * Keeps the smallest set of heaviest candidates whose weights add up to at least `need` (all
   * of them when they do not; at least one). Only candidates from `from` on take part; those
   * before it all stay.
   */
  keepMass(need: number, from = 0): void {
    if (this.n - from <= 1) return;
    let lo = from;
    let hi = this.n;
    let keep = this.n;
    while (lo < hi) {
      const pivot = this.pivot(lo, hi);
      this.partition(lo, hi, pivot);
      const { gt, eq, heavier } = this;
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
    this.n = Math.max(from + 1, Math.min(keep, this.n));
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
    return this.pick(u * this.sum());
  }

  /** Puts the candidates in ascending id order (nothing to do when they are: a pass over them). */
  sortById(): void {
    const n = this.n;
    const ids = this.ids;
    let i = 1;
    while (i < n && ids[i - 1]! < ids[i]!) i++;
    if (i >= n) return;
    if (sortKeys.length < n) [sortKeys, sortWeights] = [new Float64Array(this.ids.length), new Float64Array(this.ids.length)];
    // id · 2^21 + position: exact in a double (ids and positions below 2^21), sorted natively.
    const keys = sortKeys.subarray(0, n);
    for (let j = 0; j < n; j++) keys[j] = ids[j]! * 2097152 + j;
    keys.sort();
    sortWeights.set(this.weights.subarray(0, n));
    for (let j = 0; j < n; j++) {
      const at = keys[j]! % 2097152;
      ids[j] = (keys[j]! - at) / 2097152;
      this.weights[j] = sortWeights[at]!;
    }
  }

  /**
   * The candidate at which the running sum of weights, in the order of token ids, first exceeds
   * `target`. The order must not depend on the weights: the heap and the partitions above order
   * candidates by comparing them, so logits that differ in their last bits (the same position
   * computed in a batch of another size, or in a speculative verification run) could reorder
   * near-equal ones and move every later candidate's share of [0, total), and the same seeded
   * draw would pick another token. In id order a draw changes only when it falls that close to a
   * boundary.
   */
  pick(target: number): number {
    this.sortById();
    const w = this.weights;
    for (let i = 0; i < this.n; i++) {
      target -= w[i]!;
      if (target < 0) return this.ids[i]!;
    }
    return this.ids[this.n - 1]!;
  }
}

/** Scratch for Candidates.sortById: keys, and a copy of the weights. */
let sortKeys = new Float64Array(0);
let sortWeights = new Float64Array(0);

/** Largest logit among allowed ids (-Infinity and id -1 when none is allowed). */
export function maxLogit(logits: Float32Array, size: number, mask: TokenMask | null): { id: number; value: number } {
  const runs = new AllowedRuns(size);
  runs.fill(size, mask);
  const id = argmax(logits, runs);
  return { id, value: id < 0 ? -Infinity : logits[id]! };
}
