// Sampling over the whole vocabulary (no top-k to bound it): one pass weighs every allowed token
// into a preallocated row; top-p then finds its boundary from a histogram of probability mass by
// log-probability, so only the tokens above that boundary are gathered and partitioned.

import { Candidates, NEGLIGIBLE } from "./candidates.ts";
import { expNonPositive } from "./fast-exp.ts";
import type { TokenMask } from "./mask.ts";

const BINS_PER_UNIT = 16;

export class VocabWeights {
  private readonly w: Float32Array;
  private readonly binMass = new Float64Array(NEGLIGIBLE * BINS_PER_UNIT + 2);
  private total = 0;

  constructor(capacity: number) {
    this.w = new Float32Array(capacity);
  }

  /** Weighs every allowed token with logit >= cutoff: exp((logit - max) / t); others get 0. */
  weigh(logits: Float32Array, size: number, mask: TokenMask | null, max: number, t: number, cutoff: number, bins: boolean): void {
    const w = this.w;
    const mass = this.binMass;
    if (bins) mass.fill(0);
    const inv = 1 / t;
    const scale = inv * BINS_PER_UNIT;
    let total = 0;
    for (let i = 0; i < size; i++) {
      const v = logits[i]!;
      if (!(v >= cutoff) || (mask !== null && ((mask[i >>> 5]! >>> (i & 31)) & 1) === 0)) {
        w[i] = 0;
        continue;
      }
      const e = expNonPositive((v - max) * inv);
      w[i] = e;
      total += e;
      if (bins) mass[((max - v) * scale) | 0]! += e;
    }
    this.total = total;
  }

  /** Draws a token in proportion to its weight; `u` uniform in [0, 1). */
  draw(u: number, size: number): number {
    const w = this.w;
    let target = u * this.total;
    let last = -1;
    for (let i = 0; i < size; i++) {
      const e = w[i]!;
      if (e === 0) continue;
      target -= e;
      last = i;
      if (target < 0) return i;
    }
    return last;
  }

  /** Gathers the top-p nucleus into `out` (exactly: the boundary is resolved among candidates). */
  nucleus(p: number, out: Candidates, logits: Float32Array, size: number, max: number, t: number): void {
    const need = p * this.total;
    const mass = this.binMass;
    let boundary = 0;
    let acc = 0;
    for (; boundary < mass.length - 1; boundary++) {
      acc += mass[boundary]!;
      if (acc >= need) break;
    }
    const scale = (1 / t) * BINS_PER_UNIT;
    const w = this.w;
    const ids = out.ids;
    const weights = out.weights;
    let n = 0;
    for (let i = 0; i < size; i++) {
      const e = w[i]!;
      if (e !== 0 && (((max - logits[i]!) * scale) | 0) <= boundary) {
        ids[n] = i;
        weights[n++] = e;
      }
    }
    out.n = n;
    out.topP(p, this.total);
  }
}
