// Plain passes over the allowed runs of a logits row. The loops are unrolled four ways with
// independent lanes: JavaScriptCore then keeps four comparisons in flight instead of waiting on
// one running maximum.

import type { AllowedRuns } from "./runs.ts";

/**
 * Id of the largest allowed logit (the lowest id among equals), or -1 when every allowed logit
 * is -Infinity or NaN.
 */
export function argmax(logits: Float32Array, runs: AllowedRuns): number {
  let best = -Infinity;
  let id = -1;
  const b = runs.bounds;
  for (let r = 0; r < runs.count; r++) {
    const lo = b[2 * r]!;
    const hi = b[2 * r + 1]!;
    let a0 = -Infinity, a1 = -Infinity, a2 = -Infinity, a3 = -Infinity;
    let i0 = -1, i1 = -1, i2 = -1, i3 = -1;
    let i = lo;
    for (const end = hi - 3; i < end; i += 4) {
      const x0 = logits[i]!;
      const x1 = logits[i + 1]!;
      const x2 = logits[i + 2]!;
      const x3 = logits[i + 3]!;
      if (x0 > a0) { a0 = x0; i0 = i; }
      if (x1 > a1) { a1 = x1; i1 = i + 1; }
      if (x2 > a2) { a2 = x2; i2 = i + 2; }
      if (x3 > a3) { a3 = x3; i3 = i + 3; }
    }
    for (; i < hi; i++) {
      const x = logits[i]!;
      if (x > a0) { a0 = x; i0 = i; }
    }
    // Each lane holds its first maximum; among equal lanes the lowest id wins.
    if (a0 > best || (a0 === best && i0 >= 0 && i0 < id)) { best = a0; id = i0; }
    if (a1 > best || (a1 === best && i1 >= 0 && i1 < id)) { best = a1; id = i1; }
    if (a2 > best || (a2 === best && i2 >= 0 && i2 < id)) { best = a2; id = i2; }
    if (a3 > best || (a3 === best && i3 >= 0 && i3 < id)) { best = a3; id = i3; }
  }
  return best === -Infinity ? -1 : id;
}
