// Byte-class runs: a state that sends a set of bytes C (its largest one going to a single target)
// through a chain of states that treat C alike accepts whole every trie subtree spelled in C and
// no taller than the chain. This keeps formats and patterns (email local parts, hex digits,
// [a-z0-9_]+) from visiting tens of thousands of trie nodes one by one.

import type { Grammar } from "./grammar.ts";
import { simpleStates } from "./parser-state.ts";

const UNKNOWN = -1;
/** Longer than any token: a chain that loops reads a class forever. */
const ENDLESS = 1 << 20;
/** Classes of fewer bytes than this are not worth checking. */
const MIN_CLASS = 4;

export interface ClassRuns {
  /** Per state: bytes of its class it reads in a row (0: none), UNKNOWN until first asked. */
  readonly run: Int32Array;
  /** Per state, 8 words at s*8: the bytes outside its class (a subtree using any is walked). */
  readonly outside: Int32Array;
}

const cache = new WeakMap<Grammar, ClassRuns>();

export function classRuns(g: Grammar): ClassRuns {
  let r = cache.get(g);
  if (!r) cache.set(g, (r = { run: new Int32Array(g.stateCount).fill(UNKNOWN), outside: new Int32Array(g.stateCount * 8) }));
  return r;
}

/** Fills runs.run[s] (and runs.outside for s when the run is not 0); returns the run. */
export function classRun(g: Grammar, runs: ClassRuns, s: number): number {
  runs.run[s] = 0;
  const simple = simpleStates(g);
  if (!simple[s]) return 0;
  const next = g.next;
  // The class: the bytes going to the target that most bytes go to.
  const counts = new Map<number, number>();
  let best = -1;
  let bestCount = 0;
  for (let b = 0; b < 256; b++) {
    const t = next[s * 256 + b];
    if (t < 0 || !simple[t]) continue;
    const c = (counts.get(t) ?? 0) + 1;
    counts.set(t, c);
    if (c > bestCount) ((best = t), (bestCount = c));
  }
  if (bestCount < MIN_CLASS) return 0;
  const bytes: number[] = [];
  for (let b = 0; b < 256; b++) if (next[s * 256 + b] === best) bytes.push(b);
  // Follow the chain while every class byte leads to one simple state.
  let run = 1;
  let x = best;
  const seen = new Set<number>([s]);
  for (;;) {
    if (seen.has(x)) {
      run = ENDLESS;
      break;
    }
    seen.add(x);
    const y = next[x * 256 + bytes[0]];
    if (y < 0 || !simple[y]) break;
    let uniform = true;
    for (const b of bytes) {
      if (next[x * 256 + b] !== y) {
        uniform = false;
        break;
      }
    }
    if (!uniform) break;
    run++;
    x = y;
  }
  runs.run[s] = run;
  const o = s * 8;
  for (let w = 0; w < 8; w++) runs.outside[o + w] = -1;
  for (const b of bytes) runs.outside[o + (b >>> 5)] &= ~(1 << (b & 31));
  return run;
}
