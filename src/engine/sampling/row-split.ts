// Sampling over the whole vocabulary without gathering or sorting it. With d = (max - logit) / T,
// one pass splits the allowed tokens:
// - the head (d < 8: weight above e^-8 of the best) is gathered with its weights;
// - the tail (8 <= d <= 30, or min_p's bound) is only summed, per bin of width 1/32 in d: a
//   token's weight is e^-(b/32) · e^-x with b = round(32·d) its bin and |x| <= 1/64 the rest, so
//   the pass adds a cubic for e^-x into its bin and the bin's factor is applied once.
// Head and bins give the exact total, so top-p's boundary is found exactly, always in a known bin:
// in the head (its tokens' bins and per-bin weights are kept as they are gathered, so the tokens
// of lighter bins are dropped and only that bin's are partitioned), or in the tail (one more pass
// gathers the bins before it, which are all in the nucleus, and only that bin's tokens are
// partitioned). A draw that lands in the tail
// finds its token with one pass over that bin's tokens. In language-model logits most tokens are
// in the tail, and most draws and nuclei end in the head.
//
// Over a whole row (no mask), a WebAssembly SIMD kernel (simd/sum-exp.wat) makes the pass instead,
// at about half of the JavaScript pass's time: it lists the head and the tail tokens of the
// NEAR_BINS, and sums the tail in float32 arithmetic, without bins. The bins are summed afterwards
// only where a draw or a top-p boundary lands in the tail: from the near list when there (nearly
// always), else by the JavaScript pass. Whether a token is in the head, the tail or out is decided
// by d computed in float32 (splitDistance), by the kernel and by every pass here alike; weights
// and bins use d in float64, exact as before. Only the tail's total then carries float32 rounding
// (within TAIL_RELATIVE_ERROR of it), as all of vLLM's sampling does: top-p's boundary is exact
// unless p·total falls that close to it, and the share of draws that go to the tail is off by as
// little.

import { Candidates, NEGLIGIBLE } from "./candidates.ts";
import type { Random } from "./rng.ts";
import type { AllowedRuns } from "./runs.ts";
import { placeRow, rowSplit, splitDistance, TAIL_TERM_ERROR } from "./simd/sum-exp.ts";

const BINS_PER_UNIT = 32;
const HEAD_BINS = 8 * BINS_PER_UNIT;
/**
 * Tail bins just past the head whose tokens split() also lists: a top-p boundary in the tail is
 * nearly always among them (language-model logits and random ones alike), and then gathering
 * the nucleus reads that list rather than the whole vocabulary.
 */
const NEAR_BINS = 2 * BINS_PER_UNIT;
const LAST_BIN = NEGLIGIBLE * BINS_PER_UNIT;
/** e^(-b/32) for each bin b. */
const EDGE = Float64Array.from({ length: LAST_BIN + 2 }, (_, b) => Math.exp(-b / BINS_PER_UNIT));
const X_PER_D = 1 / BINS_PER_UNIT;
/**
 * Adding and subtracting 1.5·2^52 rounds a double below 2^51 to the nearest integer, in double
 * arithmetic. Bins are found this way rather than with `d | 0`: converting that integer back to a
 * double for d - bin makes x86's cvtsi2sd wait on the previous iteration's result (it merges into
 * its destination register), which serialises the pass (it ran between two and three times slower).
 */
const ROUND = 6755399441055744;
/** drawFromBins found no token. */
const MISSED = -2;
/** Bins of slack in the logit pre-tests, far above the rounding of (max - v)·scale. */
const MARGIN = 0.01;

/**
 * e^-x for |x| <= 1/64 by its Taylor series to x³: the first omitted term bounds the relative
 * error by x⁴/24 < 2.5e-9, of the same sign on both sides of 0, so a weight at the top of one bin
 * meets the bottom of the next: weights decrease with d (to rounding).
 */
function expSmall(x: number): number {
  return 1 - x * (1 - x * (0.5 - x * 0.16666666666666666));
}

/** Bound on the relative error of a token's weight as RowSplit computes it. */
export const WEIGHT_RELATIVE_ERROR = 2.5e-9;

/** Bound on the relative error of the tail's mass as the kernel sums it (d ≤ 30 units). */
export const TAIL_RELATIVE_ERROR = (1 + NEGLIGIBLE) * TAIL_TERM_ERROR;

export class RowSplit {
  /** The head's tokens and weights exp((logit - max) / T). */
  readonly head: Candidates;
  /** Per bin round(32·d), the sum of e^-x over its tail tokens (times EDGE[bin], the bin's mass). */
  private readonly mass = new Float64Array(LAST_BIN + 2);
  /** Per bin, the weight of the head's tokens in it; with `headBins`, valid until the head changes. */
  private readonly headMass = new Float64Array(HEAD_BINS + 2);
  /** The bin of each head token, in the head's order as split() gathered it. */
  private readonly headBins: Uint16Array;
  private headBinsValid = false;
  /** Tail tokens with d·32 below nearEnd, in index order (a few beyond it too); see NEAR_BINS. */
  private readonly near: Int32Array;
  /** [0, count of `near`], as a run list's bounds. */
  private readonly nearBounds = new Int32Array(2);
  /** Every tail token of a bin below this is in `near`. */
  private nearEnd = 0;
  /** Room for one bin's head tokens while the head is compacted. */
  private readonly binIds: Int32Array;
  private readonly binWeights: Float64Array;
  private max = 0;
  /** 32 / T: d in bins. */
  private scale = 1;
  /** `scale`, `headEnd` and `limit` as float32 values: the head/tail/out decision (see inTail). */
  private scale32 = 1;
  private head32 = 0;
  private limit32 = 0;
  /** Whether `mass` holds every bin and `tail` their sum (exact), not the kernel's sum. */
  private binned = false;
  /** Whether `mass` holds the bins below nearEnd, summed from `near` (see binNear). */
  private nearBinned = false;
  /** Tokens with d·32 above this are out (below e^-30 or below min_p). */
  private limit = 0;
  /** Tokens with d·32 below this are in the head. */
  private headEnd = 0;
  /** Bins below this are in the head (all of them after `widen`). */
  private firstBin = 0;
  private tail = 0;

  constructor(capacity: number) {
    this.head = new Candidates(capacity);
    this.headBins = new Uint16Array(capacity);
    this.near = new Int32Array(capacity);
    this.binIds = new Int32Array(capacity);
    this.binWeights = new Float64Array(capacity);
  }

  /**
   * Splits the allowed tokens whose d = (max - logit) / t is at most `limitUnits` (≤ 30).
   * `max` is the largest allowed logit. `placed`: the row (up to the runs' end) is the SIMD
   * kernels' row already (see simd/sum-exp.ts).
   */
  split(logits: Float32Array, runs: AllowedRuns, max: number, t: number, limitUnits: number, placed = false): void {
    this.headBinsValid = false;
    this.nearBinned = false;
    const head = this.head;
    const scale = BINS_PER_UNIT / t;
    const limit = Math.max(0, Math.min(NEGLIGIBLE, limitUnits)) * BINS_PER_UNIT;
    const headEnd = Math.min(HEAD_BINS, limit);
    this.max = max;
    this.scale = scale;
    this.limit = limit;
    this.headEnd = headEnd;
    this.scale32 = Math.fround(scale);
    this.head32 = Math.fround(headEnd);
    this.limit32 = Math.fround(limit);
    this.firstBin = headEnd + ROUND - ROUND;
    this.nearEnd = 0;
    this.nearBounds[1] = 0;
    const b = runs.bounds;
    if (max === Infinity) {
      // Infinite logits share all the mass equally; nothing else can be drawn.
      const ids = head.ids;
      let n = 0;
      for (let r = 0; r < runs.count; r++) {
        for (let i = b[2 * r]!, hi = b[2 * r + 1]!; i < hi; i++) if (logits[i] === Infinity) ids[n++] = i;
      }
      head.weights.fill(1, 0, n);
      head.n = n;
      this.headEnd = this.limit = this.head32 = this.limit32 = -1;
      this.mass.fill(0);
      this.binned = true;
      this.tail = 0;
      return;
    }
    if (runs.count === 1 && b[0] === 0) {
      if (!placed) placeRow(b[1] === logits.length ? logits : logits.subarray(0, b[1]));
      const nearEnd = this.nearEndFor();
      const found = rowSplit(max, this.scale32, this.head32, this.limit32, Math.fround(nearEnd));
      this.fill(found.head, logits);
      this.near.set(found.near);
      this.nearBounds[1] = found.near.length;
      this.nearEnd = nearEnd;
      this.tail = found.tail;
      this.binned = false;
      return;
    }
    this.scan(logits, runs, true);
  }

  /** d below nearEnd - 1/2 rounds to a bin below nearEnd: listing d < nearEnd takes them all. */
  private nearEndFor(): number {
    return Math.min(this.headEnd + NEAR_BINS, this.limit + 1);
  }

  /** The head from the kernel's list of its ids. */
  private fill(list: Int32Array, logits: Float32Array): void {
    this.headMass.fill(0);
    const n = list.length;
    for (let j = 0; j < n; j++) {
      const i = list[j]!;
      this.putHead(j, i, logits[i]!);
    }
    this.head.n = n;
    this.headBinsValid = true;
  }

  /** Head token `id` of logit `v` at place `n`: its weight (as `weight` computes it) and bin. */
  private putHead(n: number, id: number, v: number): void {
    const d = (this.max - v) * this.scale;
    const bin = d + ROUND - ROUND;
    const weight = EDGE[bin | 0]! * expSmall((d - bin) * X_PER_D);
    this.head.ids[n] = id;
    this.head.weights[n] = weight;
    this.headBins[n] = bin;
    this.headMass[bin | 0]! += weight;
  }

  /** The bins below nearEnd from the near list, when the kernel summed the tail. */
  private binNear(logits: Float32Array): void {
    if (this.binned || this.nearBinned) return;
    const mass = this.mass;
    mass.fill(0);
    const { max, scale, near, nearEnd } = this;
    for (let j = 0, nn = this.nearBounds[1]!; j < nn; j++) {
      const d = (max - logits[near[j]!]!) * scale;
      const bin = d + ROUND - ROUND;
      if (bin < nearEnd) mass[bin | 0]! += expSmall((d - bin) * X_PER_D);
    }
    this.nearBinned = true;
  }

  /**
   * The JavaScript pass: sums the tail per bin and lists its near tokens, and with `withHead`
   * gathers the head too (else the head is left as it is).
   */
  private scan(logits: Float32Array, runs: AllowedRuns, withHead: boolean): void {
    const mass = this.mass;
    mass.fill(0);
    if (withHead) this.headMass.fill(0);
    const { max, scale, scale32, head32, limit32 } = this;
    const nearEnd = this.nearEndFor();
    const near = this.near;
    let nn = 0;
    let n = 0;
    const b = runs.bounds;
    for (let r = 0; r < runs.count; r++) {
      for (let i = b[2 * r]!, hi = b[2 * r + 1]!; i < hi; i++) {
        const v = logits[i]!;
        const side = splitDistance(max, v, scale32);
        if (side < head32) {
          if (withHead) this.putHead(n++, i, v);
        } else if (side <= limit32) {
          const d = (max - v) * scale;
          // `| 0` on an integral double is a plain truncation; as an index alone JSC would also
          // check that the conversion is exact.
          const bin = d + ROUND - ROUND;
          mass[bin | 0]! += expSmall((d - bin) * X_PER_D);
          // Branch-free: whether a tail token is near is a coin toss the branch predictor loses.
          near[nn] = i;
          nn += +(d < nearEnd);
        }
      }
    }
    if (withHead) {
      this.head.n = n;
      this.headBinsValid = true;
    }
    this.nearBounds[1] = nn;
    this.nearEnd = nearEnd;
    this.binned = true;
    this.sumTail();
  }

  /** The tail's bins, when the kernel gave only its sum. */
  private bin(logits: Float32Array, runs: AllowedRuns): void {
    if (!this.binned) this.scan(logits, runs, false);
  }

  /** Whether a tail token by the float32 decision (see splitDistance). */
  private inTail(v: number): boolean {
    const side = splitDistance(this.max, v, this.scale32);
    return side >= this.head32 && side <= this.limit32;
  }

  /** A token's weight e^-(d/32), computed as for its bin's mass. */
  private weight(v: number): number {
    const d = (this.max - v) * this.scale;
    const bin = d + ROUND - ROUND;
    return EDGE[bin | 0]! * expSmall((d - bin) * X_PER_D);
  }

  private sumTail(): void {
    let tail = 0;
    for (let b = this.firstBin; b <= LAST_BIN; b++) tail += EDGE[b]! * this.mass[b]!;
    this.tail = tail;
  }

  /** The tail's mass as the split holds it: the kernel's sum or the bins' (tests). */
  tailMass(): number {
    return this.tail;
  }

  /** The tail's mass from its bins, binning it first if the kernel summed it (tests). */
  exactTailMass(logits: Float32Array, runs: AllowedRuns): number {
    this.bin(logits, runs);
    return this.tail;
  }

  /**
   * Moves the tail tokens in bins below `end` into the head: gather()'s tokens of the bins before
   * `end`, in the same order (those of `end` itself, which it writes past the head, stay out).
   */
  private widen(logits: Float32Array, runs: AllowedRuns, end: number): void {
    const last = Math.min(end, LAST_BIN + 1);
    this.gather(logits, runs, last);
    this.mass.fill(0, this.firstBin, last);
    this.firstBin = Math.max(this.firstBin, last);
    this.sumTail();
  }

  /** Draws a token from the whole split (head and tail) in proportion to its weight. */
  draw(logits: Float32Array, runs: AllowedRuns, random: Random): number {
    const head = this.head;
    const s = head.sum();
    let target = random() * (s + this.tail);
    if (target < s || this.tail === 0) return head.pick(target);
    target -= s;
    if (!this.binned) {
      // Most draws in the tail land in its first bins, which the near list holds.
      this.binNear(logits);
      const id = this.drawFromBins(target, logits, runs, this.nearEnd);
      if (id !== MISSED) return id;
      // The same share of the tail, of its exact mass.
      const share = target / this.tail;
      this.bin(logits, runs);
      target = share * this.tail;
    }
    const id = this.drawFromBins(target, logits, runs, LAST_BIN + 1);
    return id === MISSED ? -1 : id;
  }

  /**
   * The tail token at `target` along the bins below `end` (in bin order, each bin's tokens in
   * index order, as its mass was summed); MISSED when the bins hold less. Rounding can leave a
   * target at the very end of the last bin: its last token then.
   */
  private drawFromBins(target: number, logits: Float32Array, runs: AllowedRuns, end: number): number {
    let bin = -1;
    let inside = false;
    for (let b = this.firstBin; b < end; b++) {
      const m = EDGE[b]! * this.mass[b]!;
      if (m === 0) continue;
      bin = b;
      target -= m;
      if (target < 0) {
        target += m;
        inside = true;
        break;
      }
    }
    if (bin < 0 || (!inside && end <= LAST_BIN)) return MISSED;
    // A cheap test on the logit first.
    const { max, scale } = this;
    const lo = max - (bin + 0.5 + MARGIN) / scale;
    const hi = max - (bin - 0.5 - MARGIN) / scale;
    const list = bin < this.nearEnd ? this.near : null;
    const b = list ? this.nearBounds : runs.bounds;
    const count = list ? 1 : runs.count;
    let last = MISSED;
    for (let r = 0; r < count; r++) {
      for (let j = b[2 * r]!, hi2 = b[2 * r + 1]!; j < hi2; j++) {
        const i = list ? list[j]! : j;
        const v = logits[i]!;
        if (!(v >= lo && v <= hi)) continue;
        const d = (max - v) * scale;
        if (d + ROUND - ROUND === bin && (list || this.inTail(v))) {
          last = i;
          target -= this.weight(v);
          if (target < 0) return i;
        }
      }
    }
    return last;
  }

  /**
   * Leaves in the head exactly the top-p nucleus: the smallest set of heaviest tokens whose
   * probability reaches p.
   */
  nucleus(p: number, logits: Float32Array, runs: AllowedRuns): void {
    const head = this.head;
    const s = head.sum();
    const total = s + this.tail;
    const need = p * total;
    if (s >= need || this.tail === 0) {
      if (!this.keepHeadBins(need)) head.topP(p, total);
      return;
    }
    if (!this.binned) {
      // With the kernel's tail sum, the boundary is nearly always in the near list's bins.
      this.binNear(logits);
      if (this.keepTailBins(need, logits, runs, this.nearEnd)) return;
      this.bin(logits, runs);
      this.nucleus(p, logits, runs);
      return;
    }
    // Rounding (the bins' sum in another order) can leave the last bin short of need: then it is
    // the boundary.
    if (!this.keepTailBins(need, logits, runs, LAST_BIN + 1)) this.keepTailBinsTo(LAST_BIN, need, logits, runs);
  }

  /**
   * The nucleus when its boundary is in a tail bin below `end`: every token of the bins before it
   * is in the nucleus (they are all heavier), so only that bin's own tokens need ordering. False,
   * with the head unchanged, when those bins do not reach `need`.
   */
  private keepTailBins(need: number, logits: Float32Array, runs: AllowedRuns, end: number): boolean {
    let acc = this.head.sum();
    for (let b = this.firstBin; b < end; b++) {
      const m = EDGE[b]! * this.mass[b]!;
      if (acc + m >= need) {
        this.keepTailBinsTo(b, need, logits, runs);
        return true;
      }
      acc += m;
    }
    return false;
  }

  /** The nucleus with its boundary in tail bin `boundary` (see keepTailBins). */
  private keepTailBinsTo(boundary: number, need: number, logits: Float32Array, runs: AllowedRuns): void {
    const head = this.head;
    const e = this.gather(logits, runs, boundary);
    const before = head.n;
    const rest = need - head.sum();
    const end = head.ids.length;
    head.ids.copyWithin(before, end - e, end);
    head.weights.copyWithin(before, end - e, end);
    if (rest > 0) {
      head.n = before + e;
      head.keepMass(rest, before);
    }
  }

  /**
   * The nucleus within the head, by its bins: the tokens of the bins before the boundary bin all
   * stay (they are all heavier), those after it go, and only the boundary bin's are partitioned.
   * False when the head's bins are not known (it changed since split) or do not reach `need`
   * (rounding: their sum in another order), for the partition of the whole head instead.
   */
  private keepHeadBins(need: number): boolean {
    if (!this.headBinsValid) return false;
    this.headBinsValid = false;
    const mass = this.headMass;
    let acc = 0;
    let boundary = 0;
    for (; boundary <= HEAD_BINS; boundary++) {
      if (acc + mass[boundary]! >= need) break;
      acc += mass[boundary]!;
    }
    if (boundary > HEAD_BINS) return false;
    const head = this.head;
    const { ids, weights: w } = head;
    const bins = this.headBins;
    let kept = 0;
    let inBin = 0;
    for (let j = 0; j < head.n; j++) {
      const b = bins[j]!;
      if (b < boundary) {
        ids[kept] = ids[j]!;
        w[kept++] = w[j]!;
      } else if (b === boundary) {
        this.binIds[inBin] = ids[j]!;
        this.binWeights[inBin++] = w[j]!;
      }
    }
    ids.set(this.binIds.subarray(0, inBin), kept);
    w.set(this.binWeights.subarray(0, inBin), kept);
    head.n = kept + inBin;
    head.keepMass(need - acc, kept);
    return true;
  }

  /**
   * Appends the tail tokens of bins below `bin` to the head, and writes those of `bin` from the
   * far end of the head's arrays down (the two never meet: together they are at most every
   * token). Returns how many `bin` has.
   */
  private gather(logits: Float32Array, runs: AllowedRuns, bin: number): number {
    this.headBinsValid = false;
    const head = this.head;
    const ids = head.ids;
    const w = head.weights;
    const { max, scale, firstBin } = this;
    const above = max - (bin + 1 + MARGIN) / scale;
    let n = head.n;
    let e = ids.length;
    // The same tokens in the same (index) order either way: the list holds every tail token of
    // the bins up to `bin`, with the same tests applied to each.
    const list = bin < this.nearEnd ? this.near : null;
    const b = list ? this.nearBounds : runs.bounds;
    const count = list ? 1 : runs.count;
    for (let r = 0; r < count; r++) {
      for (let j = b[2 * r]!, hi = b[2 * r + 1]!; j < hi; j++) {
        const i = list ? list[j]! : j;
        const v = logits[i]!;
        // The near list holds tail tokens only.
        if (!(v >= above) || (!list && !this.inTail(v))) continue;
        const d = (max - v) * scale;
        const k = d + ROUND - ROUND;
        if (k < firstBin || k > bin) continue;
        if (k < bin) {
          ids[n] = i;
          w[n++] = this.weight(v);
        } else {
          ids[--e] = i;
          w[e] = this.weight(v);
        }
      }
    }
    head.n = n;
    return ids.length - e;
  }

  /** Leaves in the head exactly the k heaviest tokens (fewer when fewer are in play). */
  topK(k: number, logits: Float32Array, runs: AllowedRuns): void {
    const head = this.head;
    if (head.n < k && this.tail > 0) {
      this.bin(logits, runs);
      // Count the tail per bin to find the bin where the k-th token falls.
      const counts = new Int32Array(LAST_BIN + 2);
      const { max, scale } = this;
      const b = runs.bounds;
      for (let r = 0; r < runs.count; r++) {
        for (let i = b[2 * r]!, hi = b[2 * r + 1]!; i < hi; i++) {
          const v = logits[i]!;
          if (this.inTail(v)) counts[(max - v) * scale + ROUND - ROUND]!++;
        }
      }
      let count = head.n;
      let end = LAST_BIN + 1;
      for (let bin = this.firstBin; bin <= LAST_BIN; bin++) {
        count += counts[bin]!;
        if (count >= k) {
          end = bin + 1;
          break;
        }
      }
      this.widen(logits, runs, end);
    }
    head.topK(k);
    this.mass.fill(0);
    this.tail = 0;
  }
}
