// Byte-class runs: a state that sends a set of ASCII bytes C (its largest one going to a single target)
// through a chain of states that treat C alike accepts whole every trie subtree spelled in C and
// no taller than the chain. This keeps formats and patterns (email local parts, hex digits,
// [a-z0-9_]+) from visiting tens of thousands of trie nodes one by one.

import type { Grammar } from "./grammar.ts";
import { simpleStates } from "./parser-state.ts";

const UNKNOWN = -1;
/** Longer than any token: a chain that loops reads a class forever. */
const ENDLESS = 1 << 20;
/** Classes of fewer bytes than this are not worth checking (whitespace, four bytes, is not: its subtrees hold other tokens anyway). */
const MIN_CLASS = 8;

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

const IN_PROGRESS = -2;

/**
 * The class of simple state s: the bytes going to the target most bytes go to (written to
 * runs.outside as its complement). Returns that target, or -1 when s has no class worth it.
 */
function classify(g: Grammar, simple: Uint8Array, runs: ClassRuns, s: number): number {
  if (!simple[s] || g.byteCount[s] < MIN_CLASS) return -1;
  const next = g.next;
  // Classes are sets of ASCII bytes (formats, patterns): states reading only the rest of a
  // multi-byte character, which a walk meets by the hundred inside strings, are let go early.
  let ascii = false;
  for (let b = 0x20; b < 0x7f && !ascii; b++) ascii = next[s * 256 + b] >= 0;
  if (!ascii) return -1;
  // Targets come in runs of equal bytes: count per run, summing repeats of a target.
  const targets: number[] = [];
  const counts: number[] = [];
  let prev = -2;
  for (let b = 0; b < 256; b++) {
    const t = next[s * 256 + b];
    if (t === prev) {
      if (t >= 0) counts[counts.length - 1]++;
      continue;
    }
    prev = t;
    if (t >= 0 && simple[t]) {
      targets.push(t);
      counts.push(1);
    } else prev = -3;
  }
  let best = -1;
  let bestCount = 0;
  for (let k = 0; k < targets.length; k++) {
    let c = 0;
    for (let j = 0; j < targets.length; j++) if (targets[j] === targets[k]) c += counts[j];
    if (c > bestCount) ((best = targets[k]), (bestCount = c));
  }
  if (bestCount < MIN_CLASS) return -1;
  for (let b = 0x80; b < 0x100; b++) if (next[s * 256 + b] === best) return -1;
  const o = s * 8;
  for (let w = 0; w < 8; w++) runs.outside[o + w] = -1;
  for (let b = 0; b < 256; b++) if (next[s * 256 + b] === best) runs.outside[o + (b >>> 5)] &= ~(1 << (b & 31));
  return best;
}

/** Bytes of s's class read in a row from s, following the chain by hand (classes differ along it). */
function chainRun(g: Grammar, simple: Uint8Array, runs: ClassRuns, s: number, best: number): number {
  const bytes: number[] = [];
  const o = s * 8;
  for (let b = 0; b < 256; b++) if ((runs.outside[o + (b >>> 5)] & (1 << (b & 31))) === 0) bytes.push(b);
  const next = g.next;
  let run = 1;
  let x = best;
  const seen = new Set<number>([s]);
  for (;;) {
    if (seen.has(x)) return ENDLESS;
    seen.add(x);
    const y = next[x * 256 + bytes[0]];
    if (y < 0 || !simple[y]) return run;
    for (const b of bytes) if (next[x * 256 + b] !== y) return run;
    run++;
    x = y;
  }
}

const sameClass = (outside: Int32Array, a: number, b: number): boolean => {
  for (let w = 0; w < 8; w++) if (outside[a * 8 + w] !== outside[b * 8 + w]) return false;
  return true;
};

/**
 * Fills runs.run[s] (and runs.outside for s when the run is not 0); returns the run. Along a
 * chain of states with the same class (a counted repetition), runs are derived from the next
 * state's, so the whole chain costs one pass.
 */
export function classRun(g: Grammar, runs: ClassRuns, s0: number): number {
  const simple = simpleStates(g);
  const { run, outside } = runs;
  const chain: number[] = [];
  const bestOf: number[] = [];
  let s = s0;
  while (run[s] === UNKNOWN) {
    const best = classify(g, simple, runs, s);
    if (best < 0) {
      run[s] = 0;
      break;
    }
    run[s] = IN_PROGRESS;
    chain.push(s);
    bestOf.push(best);
    if (run[best] !== UNKNOWN || classify(g, simple, runs, best) < 0 || !sameClass(outside, s, best)) break;
    s = best;
  }
  for (let k = chain.length - 1; k >= 0; k--) {
    const x = chain[k];
    const t = bestOf[k];
    if (run[t] === IN_PROGRESS && sameClass(outside, x, t)) run[x] = ENDLESS;
    else if (run[t] > 0 && sameClass(outside, x, t)) run[x] = run[t] >= ENDLESS ? ENDLESS : run[t] + 1;
    else run[x] = chainRun(g, simple, runs, x, t);
  }
  return run[s0];
}
