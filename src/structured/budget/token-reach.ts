// Per resting state, the most one token can raise the byte distance of the document from it (see
// CompletionBudget.byteBound in ../completion-budget.ts): the bound that lets requests with ample
// budgets skip the token-level work.

import { budgetTick } from "../compile-budget.ts";
import type { Grammar } from "../grammar.ts";

/**
 * Per resting state, the most one token can raise the byte distance of the document from it:
 * a dynamic program over the token's bytes (up to `maxDepth`, the vocabulary's longest token)
 * through byte transitions, calls (the callee's distance added) and returns (to any return state,
 * which over-counts safely), `dist` being each state's byte distance to the end of its rule.
 */
export function tokenReach(g: Grammar, dist: Float64Array, maxDepth: number): Float64Array {
  const n = g.stateCount;
  const targets: Int32Array[] = [];
  for (let s = 0; s < n; s++) {
    const set = new Set<number>();
    for (let b = 0; b < 256; b++) if (g.next[s * 256 + b] >= 0) set.add(g.next[s * 256 + b]);
    targets.push(Int32Array.from(set));
  }
  const returns = Int32Array.from(new Set(g.callReturn));
  let h = new Float64Array(n);
  let clo = new Float64Array(n);
  const UNSEEN = -1;
  const IN_PROGRESS = -2;
  for (let k = 1; k <= maxDepth; k++) {
    // h: a token of at most k bytes from resting state s; clo (of k - 1 bytes): what the rest
    // of it adds after landing on s, through s's calls and returns.
    const next = new Float64Array(n);
    for (let s = 0; s < n; s++) {
      budgetTick();
      let best = 0;
      for (const t of targets[s]) best = Math.max(best, dist[t] - dist[s] + Math.max(0, clo[t]));
      next[s] = best;
    }
    h = next;
    const memo = new Float64Array(n).fill(UNSEEN);
    let popValue = 0;
    const closure = (t: number): number => {
      if (memo[t] >= 0) return memo[t];
      if (memo[t] === IN_PROGRESS) return Infinity;
      memo[t] = IN_PROGRESS;
      let v = g.hasBytes[t] ? h[t] : 0;
      for (let j = g.callOffset[t]; j < g.callOffset[t + 1]; j++) {
        v = Math.max(v, dist[g.callStart[j]] + dist[g.callReturn[j]] - dist[t] + closure(g.callStart[j]));
      }
      if (g.final[t]) v = Math.max(v, popValue);
      memo[t] = v;
      return v;
    };
    // Returns may lead to finals that return again: iterate the returns' value to a fixed point.
    for (let round = 0; ; round++) {
      memo.fill(UNSEEN);
      let pop = 0;
      for (const r of returns) pop = Math.max(pop, closure(r));
      if (pop === popValue) break;
      if (round > 16 || !Number.isFinite(pop)) {
        popValue = Infinity;
        memo.fill(UNSEEN);
        break;
      }
      popValue = pop;
    }
    const nextClo = new Float64Array(n);
    let same = true;
    for (let s = 0; s < n; s++) {
      nextClo[s] = closure(s);
      if (nextClo[s] !== clo[s]) same = false;
    }
    clo = nextClo;
    // h of k + 1 bytes depends only on clo of k: once clo repeats, so does every longer step
    // (a pattern of 10,000 states on a vocabulary whose longest token is 256 bytes settles in a
    // few steps instead of 256 passes over every state).
    if (same) break;
  }
  return h;
}
