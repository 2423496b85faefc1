// Per vocabulary, the tokens that are nothing but unescaped JSON string content, by character
// count. Inside a string the grammar accepts all of them (up to the characters left, for
// maxLength): a state's mask is then "this bitmask, plus what the walk finds elsewhere", and the
// walk skips the subtrees covered here instead of listing their hundred thousand tokens.

import type { TokenVocabulary } from "./token-bytes.ts";

export interface ContentBase {
  /** Tokens of 1..min(R, CUMULATIVE) characters. */
  readonly bits: Uint32Array;
  /** Tokens of CUMULATIVE+1..R characters (few: long pure-text tokens are rare). */
  readonly extra: Int32Array;
}

/** Bitmasks are kept for every count up to this; longer tokens go in the id list. */
const CUMULATIVE = 16;

interface Bases {
  readonly byCount: Uint32Array[];
  /** Ids of tokens longer than CUMULATIVE characters, ascending by characters, and their counts. */
  readonly longIds: Int32Array;
  readonly longChars: Int16Array;
  readonly memo: Map<number, ContentBase>;
}

const cache = new WeakMap<TokenVocabulary, Bases>();

function bases(vocab: TokenVocabulary): Bases {
  let b = cache.get(vocab);
  if (b) return b;
  const { trie } = vocab;
  const words = (vocab.size + 31) >>> 5;
  const byCount: Uint32Array[] = [];
  for (let k = 0; k <= CUMULATIVE; k++) byCount.push(new Uint32Array(words));
  const long: Array<[number, number]> = [];
  for (let i = 1; i < trie.nodeCount; i++) {
    const c = trie.pathChars[i];
    const n = trie.tokCount[i];
    if (c <= 0 || n === 0) continue;
    for (let k = trie.tokStart[i]; k < trie.tokStart[i] + n; k++) {
      const id = trie.sortedIds[k];
      if (c > CUMULATIVE) long.push([c, id]);
      else byCount[c][id >>> 5] |= 1 << (id & 31);
    }
  }
  for (let k = 1; k <= CUMULATIVE; k++) {
    const cur = byCount[k];
    const prev = byCount[k - 1];
    for (let w = 0; w < words; w++) cur[w] |= prev[w];
  }
  long.sort((x, y) => x[0] - y[0]);
  b = { byCount, longIds: Int32Array.from(long, (x) => x[1]), longChars: Int16Array.from(long, (x) => x[0]), memo: new Map() };
  cache.set(vocab, b);
  return b;
}

/** The tokens of 1..chars characters of string content (chars may be "unbounded", any large number). */
export function contentBase(vocab: TokenVocabulary, chars: number): ContentBase {
  const b = bases(vocab);
  const top = b.longChars.length ? b.longChars[b.longChars.length - 1] : CUMULATIVE;
  const r = Math.min(chars, Math.max(top, CUMULATIVE));
  let base = b.memo.get(r);
  if (!base) {
    let n = 0;
    while (n < b.longChars.length && b.longChars[n] <= r) n++;
    base = { bits: b.byCount[Math.min(r, CUMULATIVE)], extra: b.longIds.subarray(0, n) };
    b.memo.set(r, base);
  }
  return base;
}
