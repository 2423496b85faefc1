// What the vocabulary's tokens do inside string content, listed once per vocabulary: the token
// searches of completion-budget.ts and its budget masks read these lists at every position of a
// string instead of walking the same subtrees of the trie per position.
//
// Characters are counted as a string's minLength counts them (code points, an escape as one): a
// path read from a character boundary has j whole characters and maybe the first bytes of one
// more (decoding state q, see trie.ts CONTENT_STEP).

import { budgetTick } from "./compile-budget.ts";
import type { TokenVocabulary } from "./token-bytes.ts";
import { CONTENT_STEP } from "./trie.ts";

/** Moves of string content from a point in the trie (see contentBelow and contentFrom). */
export interface ContentBelow {
  /** Characters j >= 1 such that a token ends after j whole characters, ascending. */
  readonly lengths: Int32Array;
  /** Per byte that is not content: flat (trie node of that byte, whole characters before it), by characters. */
  readonly exits: readonly (Int32Array | null)[];
  /**
   * Tokens that end inside a character, and bytes that break a character off: flat quintuples
   * (trie node, whole characters before the character, trie node of its first byte or -1 when it
   * began before, BREAKS or ENDS_INSIDE, decoding state at the node). The state there is found by
   * reading the character's bytes from the state j characters on (or, where the grammar's states
   * follow the decoding states, from the decoding state).
   */
  readonly partial: Int32Array;
}

/** ContentBelow.partial: a byte that cannot go on with the character (the subtree below it is not listed). */
export const BREAKS = 0;
/** ContentBelow.partial: a token that ends inside the character (longer tokens are listed apart). */
export const ENDS_INSIDE = 1;
/** Fields per ContentBelow.partial entry. */
export const PARTIAL_FIELDS = 5;

const belowCache = new WeakMap<TokenVocabulary, Map<number, ContentBelow>>();
/** Nodes whose lists are kept per vocabulary (oldest dropped first; recomputed on demand). */
const BELOW_LIMIT = 4096;

/**
 * String content below a trie node, read from a character boundary at that node: what a search
 * needs from a content state with a token in progress (budget/search-moves.ts runMovesBelow). A
 * token such as "n" after a backslash has thousands of tokens below it; a search used to walk
 * them once per state.
 */
export function contentBelow(vocab: TokenVocabulary, node: number): ContentBelow {
  // From the root: the lists from a character boundary, kept with those from inside one.
  if (node === 0) return contentFrom(vocab, 0);
  let byNode = belowCache.get(vocab);
  if (!byNode) belowCache.set(vocab, (byNode = new Map()));
  let f = byNode.get(node);
  if (f) return f;
  f = listContent(vocab, node, 0);
  if (byNode.size >= BELOW_LIMIT) byNode.delete(byNode.keys().next().value!);
  byNode.set(node, f);
  return f;
}

const fromCache = new WeakMap<TokenVocabulary, ContentBelow[]>();

/**
 * Tokens read from decoding state q: inside a character (the first bytes of the character read
 * already; the character they complete is counted among the whole ones), or from a boundary (q 0).
 */
export function contentFrom(vocab: TokenVocabulary, q: number): ContentBelow {
  let byState = fromCache.get(vocab);
  if (!byState) fromCache.set(vocab, (byState = []));
  return (byState[q] ??= listContent(vocab, 0, q));
}

function listContent(vocab: TokenVocabulary, node: number, q0: number): ContentBelow {
  const t = vocab.trie;
  const lengths = new Set<number>();
  const exitLists: number[][] = Array.from({ length: 256 }, () => []);
  const partial: number[] = [];
  // Depth-first with, per node, the decoding state before it, whole characters and the first byte of the character in progress.
  const stack: number[] = [];
  for (let c = node + 1; c < t.end[node]!; c = t.end[c]!) stack.push(c, q0, 0, -1);
  while (stack.length) {
    budgetTick();
    const start = stack.pop()!;
    const chars = stack.pop()!;
    const q = stack.pop()!;
    const i = stack.pop()!;
    const b = t.byte[i]!;
    const q2 = CONTENT_STEP[q * 256 + b]!;
    if (q2 < 0) {
      if (q === 0) exitLists[b]!.push(i, chars);
      else partial.push(i, chars, start, BREAKS, q);
      continue;
    }
    const chars2 = q2 === 0 ? chars + 1 : chars;
    const start2 = q2 === 0 ? -1 : q === 0 ? i : start;
    if (t.tokCount[i]! > 0) {
      if (q2 === 0) lengths.add(chars2);
      else partial.push(i, chars, start2, ENDS_INSIDE, q2);
    }
    for (let c = i + 1; c < t.end[i]!; c = t.end[c]!) stack.push(c, q2, chars2, start2);
  }
  return {
    lengths: Int32Array.from([...lengths].sort((x, y) => x - y)),
    exits: exitLists.map((l) => (l.length === 0 ? null : byCharacters(l))),
    partial: Int32Array.from(partial),
  };
}

/** Flat (node, characters) pairs sorted by characters. */
export function byCharacters(l: readonly number[]): Int32Array {
  const order = Array.from({ length: l.length / 2 }, (_, k) => k).sort((a, b) => l[2 * a + 1]! - l[2 * b + 1]!);
  const out = new Int32Array(l.length);
  order.forEach((k, j) => ((out[2 * j] = l[2 * k]!), (out[2 * j + 1] = l[2 * k + 1]!)));
  return out;
}

/**
 * The tokens that are string content from a character boundary, by (whole characters j,
 * decoding state q at their end): a budget mask at a position of a counted string groups them by
 * the distance of the state j characters on (content-chains.ts), instead of walking them.
 */
export interface ContentClasses {
  /** Class keys j * 8 + q, ascending. */
  readonly keys: Int32Array;
  /** Per class (same order): its tokens as ranges [lo, hi) of trie.sortedIds, flat pairs. */
  readonly ranges: readonly (readonly number[])[];
}

const classCache = new WeakMap<TokenVocabulary, ContentClasses>();

export function contentClasses(vocab: TokenVocabulary): ContentClasses {
  let c = classCache.get(vocab);
  if (c) return c;
  const t = vocab.trie;
  const n = t.nodeCount;
  const chars = new Int32Array(n);
  const q = new Int8Array(n);
  const byKey = new Map<number, number[]>();
  for (let i = 1; i < n; i++) {
    const p = t.parent[i]!;
    const q2 = chars[p]! < 0 ? -1 : CONTENT_STEP[q[p]! * 256 + t.byte[i]!]!;
    if (q2 < 0) {
      chars[i] = -1;
      continue;
    }
    chars[i] = chars[p]! + (q2 === 0 ? 1 : 0);
    q[i] = q2;
    if (t.tokCount[i]! === 0) continue;
    const key = chars[i]! * 8 + q2;
    let r = byKey.get(key);
    if (!r) byKey.set(key, (r = []));
    const lo = t.tokStart[i]!;
    const hi = lo + t.tokCount[i]!;
    // Nodes come in trie order, so a class's tokens ascend: neighbouring ranges merge.
    if (r.length && r[r.length - 1] === lo) r[r.length - 1] = hi;
    else r.push(lo, hi);
  }
  const keys = Int32Array.from([...byKey.keys()].sort((a, b) => a - b));
  c = { keys, ranges: Array.from(keys, (k) => byKey.get(k)!) };
  classCache.set(vocab, c);
  return c;
}

/**
 * Lists every budget over string content needs first, computed at model load rather than on a
 * request's first tight step: the content classes, the lists from inside a character, and those
 * below each single byte (the character after a backslash, a first byte read in a search).
 */
export function prepareContentLists(vocab: TokenVocabulary): void {
  contentClasses(vocab);
  for (let q = 0; q < 8; q++) contentFrom(vocab, q);
  const t = vocab.trie;
  for (let child = 1; child < t.end[0]!; child = t.end[child]!) contentBelow(vocab, child);
}
