// What a completion budget (../completion-budget.ts) knows of a vocabulary before any grammar: string
// content as seen from the trie root, per vocabulary and per character class, computed once and
// shared by every grammar's budget on that vocabulary.
import type { Grammar } from "../grammar.ts";
import type { TokenVocabulary } from "../token-bytes.ts";
import { byCharacters, prepareContentLists } from "../content-below.ts";
import { CONTENT_STATES, CONTENT_STEP } from "../trie.ts";

/** The trie's root node. */
export const ROOT = 0;

// ---------------------------------------------------------------------------------------------
// Per vocabulary: string content as seen from the trie root.

export interface VocabFacts {
  /** Character counts k such that some token is k characters of string content, ascending. */
  readonly contentTokenChars: Int32Array;
  /** Per byte that is not content: nodes reached by that byte right after pure content from the root (flat node, characters before it), by characters. */
  readonly exits: (Int32Array | null)[];
  /** 1 when some token below node n, read from a character boundary at n, ends inside a character. */
  readonly midCharEnd: Uint8Array;
  /** 1 when a path below node n, read from a character boundary at n, reaches a byte that is not content after whole characters. */
  readonly exitBelow: Uint8Array;
  /** Every byte is a token of its own (byte-level BPE, SentencePiece byte fallback). */
  readonly byteComplete: boolean;
}

const vocabFacts = new WeakMap<TokenVocabulary, VocabFacts>();

/** Computes the per-vocabulary tables now (at model load) rather than on the first budgeted step. */
export function prepareCompletionFacts(vocab: TokenVocabulary): void {
  factsOf(vocab);
  prepareContentLists(vocab);
}

export function factsOf(vocab: TokenVocabulary): VocabFacts {
  let f = vocabFacts.get(vocab);
  if (f) return f;
  const t = vocab.trie;
  const n = t.nodeCount;
  const parent = t.parent;
  // Characters and UTF-8 decoding state of each node's path from the root, -1 once not content.
  const chars = new Int32Array(n);
  const q = new Int8Array(n);
  const tokenChars = new Set<number>();
  const exitLists: number[][] = Array.from({ length: 256 }, () => []);
  for (let i = 1; i < n; i++) {
    const p = parent[i];
    const b = t.byte[i];
    if (chars[p] < 0) {
      chars[i] = -1;
      continue;
    }
    const q2 = CONTENT_STEP[q[p] * 256 + b];
    if (q2 < 0) {
      chars[i] = -1;
      if (q[p] === 0) exitLists[b].push(i, chars[p]);
      continue;
    }
    chars[i] = chars[p] + (q[p] === 0 ? 1 : 0);
    q[i] = q2;
    if (t.tokCount[i] > 0 && q2 === 0) tokenChars.add(chars[i]);
  }
  const exits = exitLists.map((l) => (l.length === 0 ? null : byCharacters(l)));
  // midCharEnd and exitBelow, bottom-up over (node, decoding state): children come after their parent.
  const Q = CONTENT_STATES;
  const below = new Uint8Array(n * Q);
  const exitsUnder = new Uint8Array(n * Q);
  const midCharEnd = new Uint8Array(n);
  const exitBelow = new Uint8Array(n);
  for (let i = n - 1; i > 0; i--) {
    const b = t.byte[i];
    const p = parent[i];
    for (let s = 0; s < Q; s++) {
      const s2 = CONTENT_STEP[s * 256 + b];
      const v = s2 < 0 ? 0 : (t.tokCount[i] > 0 && s2 !== 0) || below[i * Q + s2] ? 1 : 0;
      if (v) below[p * Q + s] = 1;
      const x = s2 < 0 ? (s === 0 ? 1 : 0) : exitsUnder[i * Q + s2];
      if (x) exitsUnder[p * Q + s] = 1;
      if (s === 0) ((midCharEnd[i] = v), (exitBelow[i] = x));
    }
  }
  let singles = 0;
  for (let c = 1; c < t.end[0]; c = t.end[c]) if (t.tokCount[c] > 0) singles++;
  f = {
    contentTokenChars: Int32Array.from([...tokenChars].sort((a, b) => a - b)),
    exits,
    midCharEnd,
    exitBelow,
    byteComplete: singles === 256,
  };
  vocabFacts.set(vocab, f);
  return f;
}

/**
 * A byte class as seen from the trie root, for states that read it alike (class-runs.ts): the
 * lengths of tokens made only of it, the nodes where a byte outside it first follows such a
 * prefix (per byte: node and prefix length, by length), and per node whether such a byte comes
 * somewhere below when reading from inside the class.
 */
export interface ClassFacts {
  readonly first: number;
  readonly lengths: Int32Array;
  readonly exits: (Int32Array | null)[];
  readonly exitBelow: Uint8Array;
  /** Tokens made only of the class, by length: ranges [lo, hi) of trie.sortedIds, flat pairs. */
  readonly tokens: ReadonlyMap<number, readonly number[]>;
  /** The bytes outside the class (8 words of bits). */
  readonly outside: Int32Array;
  /** Per depth, the nodes spelled in the class that have children (see prefixesAt): filled on first need. */
  prefixes: Map<number, Int32Array> | null;
}

const classFactCache = new WeakMap<TokenVocabulary, Map<string, ClassFacts>>();
const CLASS_FACTS_LIMIT = 64;

export function classFactsOf(vocab: TokenVocabulary, outside: Int32Array): ClassFacts {
  let byClass = classFactCache.get(vocab);
  if (!byClass) classFactCache.set(vocab, (byClass = new Map()));
  const key = Array.from(outside).join(",");
  let f = byClass.get(key);
  if (f) return f;
  const inC = (b: number) => (outside[b >>> 5] & (1 << (b & 31))) === 0;
  const t = vocab.trie;
  const n = t.nodeCount;
  const pure = new Uint8Array(n);
  pure[ROOT] = 1;
  const tokens = new Map<number, number[]>();
  const lists: number[][] = Array.from({ length: 256 }, () => []);
  for (let i = 1; i < n; i++) {
    const p = t.parent[i];
    if (!pure[p]) continue;
    const b = t.byte[i];
    if (inC(b)) {
      pure[i] = 1;
      if (t.tokCount[i] === 0) continue;
      let r = tokens.get(t.depth[i]);
      if (!r) tokens.set(t.depth[i], (r = []));
      // Nodes come in trie order: a length's tokens ascend, and neighbouring ranges merge.
      const lo = t.tokStart[i];
      if (r.length && r[r.length - 1] === lo) r[r.length - 1] = lo + t.tokCount[i];
      else r.push(lo, lo + t.tokCount[i]);
    } else lists[b].push(i, t.depth[p]);
  }
  const exitBelow = new Uint8Array(n);
  for (let i = n - 1; i > 0; i--) {
    if (!inC(t.byte[i])) exitBelow[i] = 1;
    if (exitBelow[i]) exitBelow[t.parent[i]] = 1;
  }
  let first = 0;
  while (!inC(first)) first++;
  f = {
    first,
    lengths: Int32Array.from([...tokens.keys()].sort((a, b) => a - b)),
    exits: lists.map((l) => (l.length === 0 ? null : byCharacters(l))),
    exitBelow,
    tokens,
    outside: outside.slice(),
    prefixes: null,
  };
  if (byClass.size >= CLASS_FACTS_LIMIT) byClass.delete(byClass.keys().next().value!);
  byClass.set(key, f);
  return f;
}

/**
 * The nodes at `depth` whose bytes are all of the class and that have children: where tokens
 * longer than a bounded run of the class go on (an email's local part is read alike for at most
 * 24 bytes, and the class has longer tokens). Listed by depth for every depth on first need.
 */
export function prefixesAt(vocab: TokenVocabulary, f: ClassFacts, depth: number): Int32Array {
  if (!f.prefixes) {
    const t = vocab.trie;
    const pure = new Uint8Array(t.nodeCount);
    pure[ROOT] = 1;
    const byDepth = new Map<number, number[]>();
    for (let i = 1; i < t.nodeCount; i++) {
      const b = t.byte[i];
      if (!pure[t.parent[i]] || (f.outside[b >>> 5] & (1 << (b & 31))) !== 0) continue;
      pure[i] = 1;
      if (t.end[i] === i + 1) continue;
      let list = byDepth.get(t.depth[i]);
      if (!list) byDepth.set(t.depth[i], (list = []));
      list.push(i);
    }
    f.prefixes = new Map([...byDepth].map(([d, list]) => [d, Int32Array.from(list)]));
  }
  return f.prefixes.get(depth) ?? NO_NODES;
}

const NO_NODES = new Int32Array(0);

/** Whether state s, reading its class, could also do something else here (a byte outside it, a call, an end). */
export function canLeave(g: Grammar, s: number, outside: Int32Array): boolean {
  if (g.final[s] || g.callOffset[s + 1] > g.callOffset[s]) return true;
  for (let b = 0; b < 256; b++) if (g.next[s * 256 + b] >= 0 && (outside[s * 8 + (b >>> 5)] & (1 << (b & 31))) !== 0) return true;
  return false;
}

