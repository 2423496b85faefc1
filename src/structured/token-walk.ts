// Walking the vocabulary trie with parser configurations: marks every token that can be read
// whole, skipping a subtree as soon as its prefix is rejected, and accepting a subtree whole
// without visiting it when the state reads every byte in it alike (plain text, any UTF-8 string
// content, a byte class of a format or pattern) for as long as the subtree is tall.

import { byGrammarContent, type Grammar } from "./grammar.ts";
import { Configs, type StackPool, type Stack, simpleStates } from "./parser-state.ts";
import { classRun, classRuns } from "./class-runs.ts";
import { CONTENT_STEP, type TokenTrie } from "./trie.ts";

export const setBit = (mask: Uint32Array, id: number) => {
  mask[id >>> 5] |= 1 << (id & 31);
};

/**
 * Accepted tokens as ranges [lo, hi) of trie.sortedIds, flat pairs: a walk records a whole
 * accepted subtree in one push, and the caller picks the representation (id list or bitmask)
 * from the total without scanning a vocabulary-sized bitmask.
 */
export function rangesCount(ranges: readonly number[]): number {
  let n = 0;
  for (let k = 0; k < ranges.length; k += 2) n += ranges[k + 1] - ranges[k];
  return n;
}

export function rangesToIds(trie: TokenTrie, ranges: readonly number[]): Int32Array {
  const out = new Int32Array(rangesCount(ranges));
  let o = 0;
  for (let k = 0; k < ranges.length; k += 2) {
    out.set(trie.sortedIds.subarray(ranges[k], ranges[k + 1]), o);
    o += ranges[k + 1] - ranges[k];
  }
  return out;
}

export function rangesToBits(trie: TokenTrie, ranges: readonly number[], mask: Uint32Array): void {
  const ids = trie.sortedIds;
  for (let k = 0; k < ranges.length; k += 2) {
    for (let j = ranges[k]; j < ranges[k + 1]; j++) {
      const id = ids[j];
      mask[id >>> 5] |= 1 << (id & 31);
    }
  }
}

/**
 * Reusable per-depth state for trie walks. Most levels hold a single configuration whose state
 * has no calls and cannot end its rule ("simple"): those are kept as plain numbers (the fast path,
 * which is what makes walking the whole vocabulary for string contents cheap).
 */
export class Levels {
  private readonly sets: Configs[] = [];
  /** The configurations at each depth of the current path (scratch sets or shared closures). */
  readonly ref: Configs[] = [];
  fastState = new Int32Array(64);
  fastStack: (Stack | null)[] = [];
  at(d: number): Configs {
    while (this.sets.length <= d) this.sets.push(new Configs());
    if (d >= this.fastState.length) {
      const grown = new Int32Array(this.fastState.length * 2);
      grown.set(this.fastState);
      this.fastState = grown;
    }
    return this.sets[d];
  }
}


const runCache = new WeakMap<Grammar, Int32Array>();
const UNBOUNDED_RUN = 1 << 20;
const PLAIN_BYTES: number[] = [];
for (let b = 0x20; b <= 0x7e; b++) if (b !== 0x22 && b !== 0x5c) PLAIN_BYTES.push(b);

/**
 * Per state, how many plain string bytes (see TokenTrie.plainHeight) can be read in a row through
 * simple states that treat all plain bytes alike; a trie subtree of plain bytes no taller than
 * that is accepted whole, without visiting its nodes. Filled on demand (-1: not yet).
 */
function plainRuns(g: Grammar): Int32Array {
  let runs = runCache.get(g);
  if (!runs) runCache.set(g, (runs = new Int32Array(g.stateCount).fill(-1)));
  return runs;
}

function plainRun(g: Grammar, simple: Uint8Array, computed: Int32Array, s0: number): number {
  const uniformTarget = (s: number): number => {
    if (!simple[s]) return -1;
    const t = g.next[s * 256 + PLAIN_BYTES[0]];
    if (t < 0 || !simple[t]) return -1;
    for (const b of PLAIN_BYTES) if (g.next[s * 256 + b] !== t) return -1;
    return t;
  };
  // Follow the chain of uniform targets; a chain returning to itself reads plain bytes forever.
  const chain: number[] = [];
  const onChain = new Set<number>();
  let s = s0;
  let tailRun = 0;
  for (;;) {
    if (computed[s] >= 0) {
      tailRun = computed[s];
      break;
    }
    if (onChain.has(s)) {
      tailRun = UNBOUNDED_RUN;
      break;
    }
    chain.push(s);
    onChain.add(s);
    const t = uniformTarget(s);
    if (t < 0) {
      computed[s] = 0;
      chain.pop();
      tailRun = 0;
      break;
    }
    s = t;
  }
  for (let k = chain.length - 1; k >= 0; k--) {
    tailRun = tailRun >= UNBOUNDED_RUN ? UNBOUNDED_RUN : tailRun + 1;
    computed[chain[k]] = tailRun;
  }
  return computed[s0];
}

const UNKNOWN = -1;

/**
 * The state every unescaped character leads to from s, when it is the same for all of them (the
 * bytes of multi-byte characters going through simple states only), else -1. Bytes outside string
 * content (quote, backslash, controls) are not looked at: subtrees holding them are walked.
 */
function uniformCharTarget(g: Grammar, simple: Uint8Array, s: number): number {
  if (!simple[s]) return -1;
  const next = g.next;
  const row = s * 256;
  const t = next[row + 0x20];
  if (t < 0 || !simple[t]) return -1;
  // Pending (state, decoding state) pairs inside a multi-byte character, each checked once.
  const pending: number[] = [];
  const seen: number[] = [];
  const visit = (x: number, q: number): boolean => {
    if (x < 0 || !simple[x]) return false;
    const key = x * 8 + q;
    if (!seen.includes(key)) {
      seen.push(key);
      pending.push(key);
    }
    return true;
  };
  for (let b = 0x20; b < 0x100; b++) {
    const q = CONTENT_STEP[b];
    if (q < 0) continue;
    const x = next[row + b];
    if (q === 0 ? x !== t : !visit(x, q)) return -1;
  }
  while (pending.length) {
    const key = pending.pop()!;
    const x = key >>> 3;
    const q = key & 7;
    for (let b = 0x80; b < 0xc0; b++) {
      const q2 = CONTENT_STEP[q * 256 + b];
      if (q2 < 0) continue;
      const y = next[x * 256 + b];
      if (q2 === 0 ? y !== t : !visit(y, q2)) return -1;
    }
  }
  return t;
}

/**
 * How many characters of string content (see TokenTrie.contentChars) can be read from s through
 * uniform targets: the generalisation of plainRuns to any UTF-8 text, computed per state on first
 * need (a counted string follows its chain of positions once).
 */
function charRun(g: Grammar, simple: Uint8Array, memo: Int32Array, s0: number): number {
  const chain: number[] = [];
  let s = s0;
  let tail = 0;
  for (;;) {
    if (memo[s] !== UNKNOWN) {
      tail = memo[s];
      break;
    }
    if (chain.includes(s)) {
      tail = UNBOUNDED_RUN;
      break;
    }
    const t = uniformCharTarget(g, simple, s);
    if (t < 0) {
      memo[s] = 0;
      tail = 0;
      break;
    }
    chain.push(s);
    s = t;
  }
  for (let k = chain.length - 1; k >= 0; k--) {
    tail = tail >= UNBOUNDED_RUN ? UNBOUNDED_RUN : tail + 1;
    memo[chain[k]] = tail;
  }
  return memo[s0];
}

/**
 * Also by the grammar's content key (a few grammars): following a 2,000-character string's chain
 * again for each request's new grammar object took milliseconds.
 */
const charRuns = byGrammarContent(16, (g) => new Int32Array(g.stateCount).fill(UNKNOWN));

/** Characters of any string content state s reads through uniform states (0: s is no such state). */
export function contentRun(g: Grammar, s: number): number {
  const memo = charRuns(g);
  return memo[s] === UNKNOWN ? charRun(g, simpleStates(g), memo, s) : memo[s];
}

/**
 * Walks the subtrees below each of `roots` (exclusive) starting from `start`; marks tokens that can be fully
 * consumed (as ranges, see rangesCount). With `boundaries`, reaching the bottom of the stack mid-token is recorded instead of
 * counting as an ending (the local, stack-independent walk). With `contentRun` R > 0 (a walk from
 * the trie root whose start state reads any R characters, see contentRun), subtrees of tokens
 * with at most R characters of content are skipped: the caller adds them from contentBase.
 */
export function walk(
  g: Grammar,
  trie: TokenTrie,
  pool: StackPool,
  levels: Levels,
  roots: ArrayLike<number>,
  start: Configs,
  out: number[],
  boundaries: number[] | null,
  contentRun = 0,
): void {
  const { byte, depth, end, tokCount, tokStart, plainHeight, subLo, subHi, contentChars, maxPathChars } = trie;
  if (contentRun > 0 && (roots.length !== 1 || roots[0] !== 0)) throw new RangeError("contentRun needs a walk from the trie root");
  const next = g.next;
  const runs = plainRuns(g);
  const cruns = charRuns(g);
  const kruns = classRuns(g);
  const outside = kruns.outside;
  const { height, subtreeBytes: sb } = trie;
  const simple = simpleStates(g);
  levels.at(trie.maxDepth + 1);
  const fastState = levels.fastState;
  const fastStack = levels.fastStack;
  // Level 0 is `start`; fastState[d] >= 0 marks a level held as one simple configuration.
  const startState = start.size === 1 && !start.bottom && simple[start.states[0]] ? start.states[0] : -1;
  const startStack = start.stacks[0] ?? null;
  for (let r = 0; r < roots.length; r++) {
    const root = roots[r];
    const base = depth[root];
    const stop = end[root];
    fastState[0] = startState;
    fastStack[0] = startStack;
    let i = root + 1;
    while (i < stop) {
      if (contentRun > 0) {
        const mc = maxPathChars[i];
        if (mc > 0 && mc <= contentRun) {
          i = end[i];
          continue;
        }
      }
      const d = depth[i] - base;
      const b = byte[i];
      const ps = fastState[d - 1];
      let cur: Configs;
      if (ps >= 0) {
        // A first byte the state refuses rules the subtree out (no shortcut accepts it either).
        const t = next[ps * 256 + b];
        if (t < 0) {
          i = end[i];
          continue;
        }
        const ph = plainHeight[i];
        let pr = 0;
        if (ph > 0) {
          pr = runs[ps];
          if (pr < 0) pr = plainRun(g, simple, runs, ps);
        }
        if (ph > 0 && pr >= ph) {
          if (subHi[i] > subLo[i]) out.push(subLo[i], subHi[i]);
          i = end[i];
          continue;
        }
        const cc = contentChars[i];
        if (cc > 0) {
          let r = cruns[ps];
          if (r === UNKNOWN) r = charRun(g, simple, cruns, ps);
          if (r >= cc) {
            if (subHi[i] > subLo[i]) out.push(subLo[i], subHi[i]);
            i = end[i];
            continue;
          }
        }
        // A state reading any string content has the content check above, which covers its class.
        // (A leaf is as cheap to visit as to check.)
        let kr = cruns[ps] > 0 || height[i] < 2 ? 0 : kruns.run[ps];
        if (kr === UNKNOWN) kr = classRun(g, kruns, ps);
        if (kr >= height[i]) {
          const o = i * 8;
          const c = ps * 8;
          const clash =
            (sb[o] & outside[c]) | (sb[o + 1] & outside[c + 1]) | (sb[o + 2] & outside[c + 2]) | (sb[o + 3] & outside[c + 3]) |
            (sb[o + 4] & outside[c + 4]) | (sb[o + 5] & outside[c + 5]) | (sb[o + 6] & outside[c + 6]) | (sb[o + 7] & outside[c + 7]);
          if (clash === 0) {
            if (subHi[i] > subLo[i]) out.push(subLo[i], subHi[i]);
            i = end[i];
            continue;
          }
        }
        if (simple[t]) {
          fastState[d] = t;
          fastStack[d] = fastStack[d - 1];
          const n = tokCount[i];
          if (n) out.push(tokStart[i], tokStart[i] + n);
          i++;
          continue;
        }
        cur = pool.closure(g, t, fastStack[d - 1]);
      } else {
        cur = (d === 1 ? start : levels.ref[d - 1]).advance(g, pool, b, levels.at(d));
      }
      levels.ref[d] = cur;
      if ((cur.size > 0 || cur.bottom) && tokCount[i]) out.push(tokStart[i], tokStart[i] + tokCount[i]);
      if (boundaries && cur.bottom && end[i] > i + 1) boundaries.push(i);
      if (cur.size === 0) {
        i = end[i];
        continue;
      }
      if (cur.size === 1 && !cur.bottom && simple[cur.states[0]]) {
        fastState[d] = cur.states[0];
        fastStack[d] = cur.stacks[0];
      } else fastState[d] = -1;
      i++;
    }
  }
}
