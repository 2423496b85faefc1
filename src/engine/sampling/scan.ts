// The argmax pass over the allowed runs of a logits row. (Unrolling it into independent lanes
// measured no faster under JavaScriptCore than this plain loop, whose branch is almost never taken.)

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
    for (let i = b[2 * r]!, hi = b[2 * r + 1]!; i < hi; i++) {
      const v = logits[i]!;
      if (v > best) {
        best = v;
        id = i;
      }
    }
  }
  return id;
}
