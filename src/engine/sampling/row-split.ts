// Sampling over the whole vocabulary without weighing every token. One pass splits the allowed
// tokens by d = (max - logit) / T: the head (d < 8, weight above e^-8 of the best) is gathered
// and weighed exactly; the tail is only counted, in bins of 1/16 of d, which bounds its mass
// within a factor e^(1/16). Decisions that the bounds settle need nothing more:
// - a draw lands in the head with probability S / (S + U) (S the head's mass, U the tail's upper
//   bound); a draw that lands in the tail picks a bin by its bound, a token of the bin uniformly,
//   and keeps it with probability weight / bound, else starts over (rejection sampling), so every
//   token is drawn with probability exactly weight / total;
// - top-p's nucleus is inside the head when S >= p·(S + U); its size is settled when the head's
//   prefix counts agree for the totals S + L and S + U. Otherwise the head is widened to the bins
//   that the bounds say the nucleus needs, and the tail's mass is computed exactly only when its
//   bounds still leave the boundary open.
// The tail costs a bin increment per token instead of an exp; in language-model logits nearly
// every token is in the tail and nearly no draw or decision needs it.

import { Candidates, NEGLIGIBLE } from "./candidates.ts";
import { expNonPositive } from "./fast-exp.ts";
import type { Random } from "./rng.ts";
import type { AllowedRuns } from "./runs.ts";

const BINS_PER_UNIT = 16;
const HEAD_BINS = 8 * BINS_PER_UNIT;
const LAST_BIN = NEGLIGIBLE * BINS_PER_UNIT;
/** e^(-b/16): the largest weight in bin b, and the smallest in bin b - 1. */
const EDGE = Float64Array.from({ length: LAST_BIN + 2 }, (_, b) => Math.exp(-b / BINS_PER_UNIT));
/** Widens every bound: exp's own error (3e-12) and the rounding of d and of bin edges. */
const SLACK = 1e-9;
const UPPER = Float64Array.from(EDGE, (e) => e * (1 + SLACK));
const LOWER = Float64Array.from(EDGE, (e, b) => (b + 1 < EDGE.length ? EDGE[b + 1]! : 0) * (1 - SLACK));

export class RowSplit {
  /** The head's tokens and weights exp((logit - max) / T). */
  readonly head: Candidates;
  /** Tail tokens per bin floor(d·16). */
  private readonly bins = new Int32Array(LAST_BIN + 2);
  private max = 0;
  private inv = 1;
  /** 16 / T: d in bins. */
  private scale = 1;
  /** Tokens with d·16 above this are out (below e^-30 or below min_p). */
  private limit = 0;
  /** The head holds the tokens with d·16 < headEnd, the tail the others up to `limit`. */
  private headEnd = 0;
  /** Upper bound of the tail's mass, as last computed by `bounds`. */
  private upper = 0;
  private lower = 0;

  constructor(capacity: number) {
    this.head = new Candidates(capacity);
  }

  /**
   * Splits the allowed tokens whose d = (max - logit) / t is at most `limitUnits` (≤ 30).
   * `max` is the largest allowed logit.
   */
  split(logits: Float32Array, runs: AllowedRuns, max: number, t: number, limitUnits: number): void {
    const bins = this.bins;
    bins.fill(0);
    const head = this.head;
    const ids = head.ids;
    const scale = BINS_PER_UNIT / t;
    const limit = Math.max(0, Math.min(NEGLIGIBLE, limitUnits)) * BINS_PER_UNIT;
    const headEnd = Math.min(HEAD_BINS, limit);
    this.max = max;
    this.inv = 1 / t;
    this.scale = scale;
    this.limit = limit;
    this.headEnd = headEnd;
    let n = 0;
    const b = runs.bounds;
    if (max === Infinity) {
      // Infinite logits share all the mass equally; nothing else can be drawn.
      for (let r = 0; r < runs.count; r++) {
        for (let i = b[2 * r]!, hi = b[2 * r + 1]!; i < hi; i++) if (logits[i] === Infinity) ids[n++] = i;
      }
      head.weights.fill(1, 0, n);
      head.n = n;
      this.headEnd = this.limit = -1;
      this.bounds();
      return;
    }
    for (let r = 0; r < runs.count; r++) {
      for (let i = b[2 * r]!, hi = b[2 * r + 1]!; i < hi; i++) {
        const d = (max - logits[i]!) * scale;
        if (d < headEnd) ids[n++] = i;
        else if (d <= limit) bins[d | 0]!++;
      }
    }
    const w = head.weights;
    const inv = this.inv;
    for (let j = 0; j < n; j++) w[j] = expNonPositive((logits[ids[j]!]! - max) * inv);
    head.n = n;
    this.bounds();
  }

  private bounds(): void {
    const bins = this.bins;
    let lo = 0;
    let hi = 0;
    for (let b = 0; b <= LAST_BIN; b++) {
      const c = bins[b]!;
      if (c === 0) continue;
      lo += c * LOWER[b]!;
      hi += c * UPPER[b]!;
    }
    this.lower = lo;
    this.upper = hi;
  }

  /** Lower and upper bounds of the tail's mass (tests). */
  tailBounds(): [number, number] {
    return [this.lower, this.upper];
  }

  /** Moves the tail tokens with d·16 < end into the head. */
  private widen(logits: Float32Array, runs: AllowedRuns, end: number): void {
    const head = this.head;
    const ids = head.ids;
    const w = head.weights;
    const { max, scale, limit, inv } = this;
    const from = this.headEnd;
    let n = head.n;
    const b = runs.bounds;
    for (let r = 0; r < runs.count; r++) {
      for (let i = b[2 * r]!, hi = b[2 * r + 1]!; i < hi; i++) {
        const v = logits[i]!;
        const d = (max - v) * scale;
        if (d >= from && d < end && d <= limit) {
          ids[n] = i;
          w[n++] = expNonPositive((v - max) * inv);
        }
      }
    }
    head.n = n;
    this.bins.fill(0, 0, Math.min(Math.ceil(end), LAST_BIN + 1));
    this.headEnd = end;
    this.bounds();
  }

  /** The tail's mass, weighing every tail token (the bounds' check, and tests). */
  tailMass(logits: Float32Array, runs: AllowedRuns): number {
    if (this.upper === 0) return 0;
    const { max, scale, limit, inv, headEnd } = this;
    let total = 0;
    const b = runs.bounds;
    for (let r = 0; r < runs.count; r++) {
      for (let i = b[2 * r]!, hi = b[2 * r + 1]!; i < hi; i++) {
        const v = logits[i]!;
        const d = (max - v) * scale;
        if (d >= headEnd && d <= limit) total += expNonPositive((v - max) * inv);
      }
    }
    return total;
  }

  /** Draws a token from the whole split (head and tail) in proportion to its weight. */
  draw(logits: Float32Array, runs: AllowedRuns, random: Random): number {
    const head = this.head;
    const s = head.sum();
    if (!(s + this.upper > 0)) throw new Error("RowSplit.draw: nothing to draw from");
    for (;;) {
      const target = random() * (s + this.upper);
      if (target < s) return head.pick(target);
      const id = this.tryTail(logits, runs, target - s, random);
      if (id >= 0) return id;
    }
  }

  /** One rejection-sampling attempt in the tail; -1 when rejected. */
  private tryTail(logits: Float32Array, runs: AllowedRuns, target: number, random: Random): number {
    const bins = this.bins;
    let bin = -1;
    for (let b = 0; b <= LAST_BIN; b++) {
      const c = bins[b]!;
      if (c === 0) continue;
      bin = b;
      target -= c * UPPER[b]!;
      if (target < 0) break;
    }
    if (bin < 0) return -1;
    let k = Math.floor(random() * bins[bin]!);
    const { max, scale, limit, inv, headEnd } = this;
    const b = runs.bounds;
    for (let r = 0; r < runs.count; r++) {
      for (let i = b[2 * r]!, hi = b[2 * r + 1]!; i < hi; i++) {
        const v = logits[i]!;
        const d = (max - v) * scale;
        if (d >= headEnd && d <= limit && (d | 0) === bin && k-- === 0) {
          return random() * UPPER[bin]! < expNonPositive((v - max) * inv) ? i : -1;
        }
      }
    }
    return -1;
  }

  /**
   * Leaves in the head exactly the top-p nucleus: the smallest set of heaviest tokens whose
   * probability reaches p.
   */
  nucleus(p: number, logits: Float32Array, runs: AllowedRuns): void {
    const head = this.head;
    let s = head.sum();
    if (s < p * (s + this.upper)) {
      // Widen to the first bin by which the tail's lower bounds surely reach p.
      const need = p * (s + this.upper);
      let acc = s;
      let end = LAST_BIN + 1;
      for (let b = Math.floor(this.headEnd); b <= LAST_BIN; b++) {
        acc += this.bins[b]! * LOWER[b]!;
        if (acc >= need) {
          end = b + 1;
          break;
        }
      }
      this.widen(logits, runs, end);
      s = head.sum();
    }
    // The nucleus only shrinks as the total does: at the lower bound (and at the exact total) it
    // is a prefix of the nucleus at the upper bound, which `topP` leaves first.
    head.topP(p, s + this.upper);
    const atUpper = head.n;
    head.topP(p, s + this.lower);
    if (head.n !== atUpper) {
      head.n = atUpper;
      head.topP(p, s + this.tailMass(logits, runs));
    }
  }

  /** Leaves in the head exactly the k heaviest tokens (fewer when fewer are in play). */
  topK(k: number, logits: Float32Array, runs: AllowedRuns): void {
    const head = this.head;
    if (head.n < k && this.upper > 0) {
      let count = head.n;
      let end = LAST_BIN + 1;
      for (let b = Math.floor(this.headEnd); b <= LAST_BIN; b++) {
        count += this.bins[b]!;
        if (count >= k) {
          end = b + 1;
          break;
        }
      }
      this.widen(logits, runs, end);
    }
    head.topK(k);
    this.bins.fill(0);
    this.upper = this.lower = 0;
  }
}
