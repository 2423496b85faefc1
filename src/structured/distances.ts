import type { Grammar } from "./grammar.ts";

const distanceCache = new WeakMap<Grammar, Float64Array>();
/** Per state, the fewest bytes that end its rule (shortest paths, solved to a fixed point). */
export function completionDistances(g: Grammar): Float64Array {
  const cached = distanceCache.get(g);
  if (cached) return cached;
  const dist = byteDistancesWhere(g, () => true);
  distanceCache.set(g, dist);
  return dist;
}

/** completionDistances over the byte transitions `allowed` keeps (calls and ends always count). */
export function byteDistancesWhere(g: Grammar, allowed: (state: number, byte: number) => boolean): Float64Array {
  const n = g.stateCount;
  const targets: number[][] = [];
  for (let s = 0; s < n; s++) {
    const set = new Set<number>();
    for (let b = 0; b < 256; b++) {
      const t = g.next[s * 256 + b];
      if (t >= 0 && allowed(s, b)) set.add(t);
    }
    targets.push([...set]);
  }
  const dist = new Float64Array(n).fill(Infinity);
  for (let changed = true; changed; ) {
    changed = false;
    for (let s = 0; s < n; s++) {
      let d = g.final[s] ? 0 : Infinity;
      for (const t of targets[s]) d = Math.min(d, 1 + dist[t]);
      for (let c = g.callOffset[s]; c < g.callOffset[s + 1]; c++) d = Math.min(d, dist[g.callStart[c]] + dist[g.callReturn[c]]);
      if (d < dist[s]) {
        dist[s] = d;
        changed = true;
      }
    }
  }
  return dist;
}
