// Per resting state, what it allows whatever the stack below holds: computed once per state and
// vocabulary, shared between grammars when the automata behind two states are the same.

import type { Grammar } from "./grammar.ts";
import { Configs, StackPool } from "./parser-state.ts";
import type { TokenVocabulary } from "./token-bytes.ts";
import { bitsToIds, Levels, walk } from "./token-walk.ts";

/** What one resting state allows, independent of the stack below it. */
export interface StateMask {
  /** Dense bitmask when many tokens are accepted, else null and the ids are in acceptedIds. */
  readonly accepted: Uint32Array | null;
  readonly acceptedIds: Int32Array | null;
  /** Trie nodes after which the state's rule may have ended with bytes of the token left over. */
  readonly boundaries: Int32Array;
}


const maskCaches = new WeakMap<Grammar, WeakMap<TokenVocabulary, (StateMask | undefined)[]>>();

export function stateMasks(g: Grammar, vocab: TokenVocabulary): (StateMask | undefined)[] {
  let byVocab = maskCaches.get(g);
  if (!byVocab) maskCaches.set(g, (byVocab = new WeakMap()));
  let list = byVocab.get(vocab);
  if (!list) byVocab.set(vocab, (list = new Array(g.stateCount)));
  return list;
}

/** States reachable from a state beyond which its signature is not computed (no sharing). */
const SIGNATURE_LIMIT = 64;

/**
 * A canonical description of everything reachable from state s (transitions, calls, finals,
 * renumbered in discovery order). The stack-independent mask of s depends on nothing else, so
 * equal signatures share one mask across grammars: the string contents of every schema on a
 * vocabulary are computed once.
 */
function signature(g: Grammar, s: number): string | null {
  const order = new Map<number, number>([[s, 0]]);
  const queue = [s];
  const parts: string[] = [];
  const id = (t: number): number => {
    let n = order.get(t);
    if (n === undefined) {
      n = order.size;
      order.set(t, n);
      queue.push(t);
    }
    return n;
  };
  for (let q = 0; q < queue.length; q++) {
    if (order.size > SIGNATURE_LIMIT) return null;
    const x = queue[q];
    let row = g.final[x] ? "F" : "";
    let b = 0;
    while (b < 256) {
      const t = g.next[x * 256 + b];
      if (t < 0) {
        b++;
        continue;
      }
      let e = b;
      while (e + 1 < 256 && g.next[x * 256 + e + 1] === t) e++;
      row += `${b}-${e}>${id(t)};`;
      b = e + 1;
    }
    for (let c = g.callOffset[x]; c < g.callOffset[x + 1]; c++) row += `C${id(g.callStart[c])}>${id(g.callReturn[c])};`;
    parts.push(row);
  }
  return parts.join("|");
}

const sharedMasks = new WeakMap<TokenVocabulary, Map<string, StateMask>>();

export function stateMask(g: Grammar, vocab: TokenVocabulary, s: number): StateMask {
  const sig = signature(g, s);
  if (sig === null) return computeStateMask(g, vocab, s);
  let shared = sharedMasks.get(vocab);
  if (!shared) sharedMasks.set(vocab, (shared = new Map()));
  let m = shared.get(sig);
  if (!m) shared.set(sig, (m = computeStateMask(g, vocab, s)));
  return m;
}

const SPARSE_LIMIT = 1024;

function popcount(x: number): number {
  x -= (x >>> 1) & 0x55555555;
  x = (x & 0x33333333) + ((x >>> 2) & 0x33333333);
  return (((x + (x >>> 4)) & 0x0f0f0f0f) * 0x01010101) >>> 24;
}

function computeStateMask(g: Grammar, vocab: TokenVocabulary, s: number): StateMask {
  const words = (vocab.size + 31) >>> 5;
  const accepted = new Uint32Array(words);
  const boundaries: number[] = [];
  const start = new Configs();
  start.states.push(s);
  start.stacks.push(null);
  walk(g, vocab.trie, new StackPool(g.stateCount), new Levels(), 0, start, accepted, boundaries);
  // Most states allow a handful of tokens: a list keeps thousands of cached states small.
  let count = 0;
  for (let w = 0; w < words && count <= SPARSE_LIMIT; w++) if (accepted[w]) count += popcount(accepted[w]);
  if (count <= SPARSE_LIMIT) return { accepted: null, acceptedIds: bitsToIds(accepted), boundaries: Int32Array.from(boundaries) };
  return { accepted, acceptedIds: null, boundaries: Int32Array.from(boundaries) };
}


/**
 * Computes the shareable masks (states of small, self-contained automata: string and key
 * contents, numbers, literals) of the given grammars on a vocabulary. Meant for model load, so
 * the first requests with new schemas do not pay for the vocabulary-wide walks of string contents.
 */
export function warmStateMasks(vocab: TokenVocabulary, grammars: readonly Grammar[]): void {
  for (const g of grammars) {
    const list = stateMasks(g, vocab);
    for (let s = 0; s < g.stateCount; s++) {
      if (!g.hasBytes[s] || list[s]) continue;
      if (signature(g, s) !== null) list[s] = stateMask(g, vocab, s);
    }
  }
}
