// Byte-class runs: a state that sends a set of bytes C (its largest one going to a single target)
// through a chain of states that treat C alike accepts every trie subtree spelled in C and no
// taller than the chain, whole. This is what keeps formats and patterns (email local parts,
// hex digits, [a-z0-9_]+) from visiting tens of thousands of trie nodes one by one.

import type { Grammar } from "./grammar.ts";
import { simpleStates } from "./parser-state.ts";
import type { TokenTrie } from "./trie.ts";

const UNKNOWN = -1;
/** Chains longer than any token are as good as endless. */
const ENDLESS = 1 << 20;
/** Classes of fewer bytes than this are not worth a height array. */
const MIN_CLASS = 4;
/** Height arrays kept per trie (each 2 bytes per node); the oldest is dropped beyond this. */
const HEIGHTS_LIMIT = 48;

export interface ClassRuns {
  /** Per state: bytes of its class it reads in a row (0: none), UNKNOWN until first asked. */
  readonly run: Int32Array;
  /** Per state: for each trie node, the height of its subtree when spelled in the state's class, else -1. */
  readonly heights: (Int16Array | null)[];
}

const heightCache = new WeakMap<TokenTrie, Map<string, Int16Array>>();

function classHeights(trie: TokenTrie, inClass: Uint8Array): Int16Array {
  let byKey = heightCache.get(trie);
  if (!byKey) heightCache.set(trie, (byKey = new Map()));
  const key = inClass.join("");
  let h = byKey.get(key);
  if (h) return h;
  const { byte, parent, nodeCount } = trie;
  h = new Int16Array(nodeCount);
  for (let i = 1; i < nodeCount; i++) h[i] = inClass[byte[i]] ? 1 : -1;
  h[0] = -1;
  // Reverse preorder visits children before parents; -2 marks "has a child outside the class".
  for (let i = nodeCount - 1; i > 0; i--) {
    const p = parent[i];
    if (p === 0 || h[p] < 0) continue;
    h[p] = h[i] < 0 ? -2 : Math.max(h[p], h[i] + 1);
  }
  for (let i = 0; i < nodeCount; i++) if (h[i] < 0) h[i] = -1;
  byKey.set(key, h);
  if (byKey.size > HEIGHTS_LIMIT) byKey.delete(byKey.keys().next().value!);
  return h;
}

const cache = new WeakMap<Grammar, WeakMap<TokenTrie, ClassRuns>>();

export function classRuns(g: Grammar, trie: TokenTrie): ClassRuns {
  let byTrie = cache.get(g);
  if (!byTrie) cache.set(g, (byTrie = new WeakMap()));
  let r = byTrie.get(trie);
  if (!r) byTrie.set(trie, (r = { run: new Int32Array(g.stateCount).fill(UNKNOWN), heights: new Array(g.stateCount).fill(null) }));
  return r;
}

/** Fills runs.run[s] (and runs.heights[s] when the run is not 0); returns the run. */
export function classRun(g: Grammar, trie: TokenTrie, runs: ClassRuns, s: number): number {
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
  const inClass = new Uint8Array(256);
  const bytes: number[] = [];
  for (let b = 0; b < 256; b++) {
    if (next[s * 256 + b] === best) {
      inClass[b] = 1;
      bytes.push(b);
    }
  }
  // Follow the chain while every class byte leads to one simple state.
  let run = 1;
  let x = best;
  const seen = new Set<number>([s]);
  while (run < trie.maxDepth) {
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
  if (run >= trie.maxDepth) run = ENDLESS;
  runs.run[s] = run;
  runs.heights[s] = classHeights(trie, inClass);
  return run;
}
