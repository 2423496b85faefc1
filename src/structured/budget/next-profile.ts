// The next tokens of a parser state grouped by the distance to the end each leaves (NextProfile):
// what a budget mask clears beyond the tokens left (GrammarMatcher.fillNextTokenBitmask). Walked
// once per parser state as the grammar mask walks the vocabulary, but taking at once the subtrees
// whose tokens all leave one distance (string content, a byte class) and, at a position of a
// counted string, its content tokens by class.

import { classRuns } from "../class-runs.ts";
import { contentClasses, contentFrom } from "../content-below.ts";
import { chainPosition, chainUnitsAt, runAt, stateAfter } from "../content-chains.ts";
import type { Grammar } from "../grammar.ts";
import { type Configs, type Stack, simpleStates } from "../parser-state.ts";
import { contentRun, Levels } from "../token-walk.ts";
import { type BudgetContext, type Distances, MEMO_LIMIT } from "./context.ts";
import { UNREACHABLE } from "./unreachable.ts";
import { classRunOf, forEachExit, loopIndex } from "./unit-runs.ts";
import { prefixesAt, ROOT } from "./vocab-facts.ts";

/** Parser states whose next-token profile is kept (oldest dropped first). */
const PROFILE_LIMIT = 4096;

/** The next tokens of a parser state by the distance to the end each leaves. */
export interface NextProfile {
  /** The largest distance (UNREACHABLE when some token leads where no token sequence finishes). */
  readonly max: number;
  /** Distance to lists of ranges [lo, hi) of trie.sortedIds, flat pairs. */
  readonly groups: ReadonlyMap<number, readonly (readonly number[])[]>;
}

/** The next-token profiles of one budget's parser states, asking `distances` the distance each token leaves. */
export class NextProfiles {
  private readonly profiles = new Map<string, NextProfile>();
  private readonly sameMemo = new Map<number, { readonly d: number; readonly upTo: number }>();
  private readonly levels = new Levels();

  constructor(
    private readonly cx: BudgetContext,
    private readonly distances: Distances,
  ) {}

  /**
   * The next tokens from `c` grouped by the distance each leaves (computed once per parser
   * state, named by `key`): a step whose budget is short clears the groups beyond it.
   */
  profile(c: Configs, key: string): NextProfile {
    let p = this.profiles.get(key);
    if (p === undefined) {
      p = this.walk(c);
      if (this.profiles.size >= PROFILE_LIMIT) this.profiles.delete(this.profiles.keys().next().value!);
      this.profiles.set(key, p);
    }
    return p;
  }

  /**
   * Walks the tokens valid from `start` (as fillNextTokenBitmask allows them) and groups them by
   * the distance each leaves. Subtrees of plain string content whose tokens all leave the same
   * distance (judged by the states k characters on) are taken at once.
   */
  private walk(start: Configs): NextProfile {
    const groups = new Map<number, number[][]>();
    let worst = 0;
    const add = (d: number, lo: number, hi: number) => {
      if (hi <= lo) return;
      worst = Math.max(worst, d);
      let lists = groups.get(d);
      if (!lists) groups.set(d, (lists = [[]]));
      const r = lists[0]!;
      // Walks visit tokens in trie order: neighbouring ranges of one distance are merged.
      if (r.length && r[r.length - 1] === lo) r[r.length - 1] = hi;
      else r.push(lo, hi);
    };
    const addList = (d: number, ranges: readonly number[]) => {
      worst = Math.max(worst, d);
      let lists = groups.get(d);
      if (!lists) groups.set(d, (lists = [[]]));
      lists.push(ranges as number[]);
    };
    // At a position of a counted string: its content by class, and only the subtrees that leave the content walked.
    const leaving = this.contentByClass(start, addList) ?? this.classByLength(start, addList, add);
    if (leaving) {
      for (let k = 0; k < leaving.length; k += 2) {
        const node = leaving[k] as number;
        const config = leaving[k + 1] as Configs;
        const t = this.cx.trie;
        if (t.tokCount[node] > 0) add(this.distances.distance(config), t.tokStart[node], t.tokStart[node] + t.tokCount[node]);
        this.walkBelow(node, config, add);
      }
    } else this.walkBelow(ROOT, start, add);
    return { max: worst, groups };
  }

  /**
   * Walks the tokens below trie node `root` (its bytes read already, leading to `start`) and adds
   * each with the distance it leaves. Subtrees of string content or of a byte class whose tokens
   * all leave the same distance (judged by the states k characters or bytes on) are taken at once.
   */
  private walkBelow(root: number, start: Configs, add: (d: number, lo: number, hi: number) => void): void {
    const g = this.cx.grammar;
    const t = this.cx.trie;
    const pool = this.cx.pool;
    const distances = this.distances;
    const levels = this.levels;
    const simple = simpleStates(g);
    const midChar = this.cx.facts.midCharEnd;
    levels.at(t.maxDepth + 1);
    const ref = levels.ref;
    ref[t.depth[root]] = start;
    const stop = t.end[root];
    let i = root + 1;
    while (i < stop) {
      const d = t.depth[i];
      const prev = ref[d - 1];
      const cc = t.contentChars[i];
      if (cc > 0 && prev.size === 1 && !prev.bottom && simple[prev.states[0]] && !midChar[i]) {
        const s = prev.states[0];
        const run = contentRun(g, s);
        if (run >= cc) {
          const chain = this.cx.runs.chain(s, run, 0x20);
          let lo = UNREACHABLE;
          let hi = 0;
          for (let k = 1; k <= cc; k++) {
            const v = distances.stateDistance(chain[k < chain.length ? k : loopIndex(chain, k)], prev.stacks[0]);
            lo = Math.min(lo, v);
            hi = Math.max(hi, v);
          }
          if (lo === hi) {
            add(hi, t.subLo[i], t.subHi[i]);
            i = t.end[i];
            continue;
          }
        }
      }
      if (t.height[i] > 1 && prev.size === 1 && !prev.bottom && simple[prev.states[0]]) {
        const same = this.classSubtreeDistance(prev.states[0], prev.stacks[0], i);
        if (same >= 0) {
          add(same, t.subLo[i], t.subHi[i]);
          i = t.end[i];
          continue;
        }
      }
      const scratch = levels.at(d);
      const cur = prev.advance(g, pool, t.byte[i], scratch);
      ref[d] = cur;
      if (cur.size === 0 && !cur.bottom) {
        i = t.end[i];
        continue;
      }
      if (t.tokCount[i] > 0) add(distances.distance(cur, cur !== scratch), t.tokStart[i], t.tokStart[i] + t.tokCount[i]);
      i = cur.size === 0 ? t.end[i] : i + 1;
    }
  }

  /**
   * When state s reads the bytes of a class alike (class-runs.ts: an email's letters, a
   * pattern's digits) for at least the height of the subtree at trie node i, every byte below i
   * is in the class, and the states 1 .. height bytes on all leave the same distance: that
   * distance (the subtree's tokens are taken at once, as the mask walk accepts them), else -1.
   */
  private classSubtreeDistance(s: number, st: Stack | null, i: number): number {
    const g = this.cx.grammar;
    const t = this.cx.trie;
    if (contentRun(g, s) > 0) return -1;
    const classes = classRuns(g);
    const run = classRunOf(g, classes, s);
    const h = t.height[i];
    if (run < h) return -1;
    const outside = classes.outside;
    const sb = t.subtreeBytes;
    for (let w = 0; w < 8; w++) if ((sb[i * 8 + w] & outside[s * 8 + w]) !== 0) return -1;
    const same = this.sameAlongRun(s, st, run);
    return h <= same.upTo ? same.d : -1;
  }

  /**
   * For state s reading its class for `run` bytes, with stack st: the distance of the state one
   * byte on, and up to how many bytes on (at most the longest token) the distance stays the same.
   * Kept per (state, stack): a walk below a node such as "." (thousands of subtrees spelt in an
   * email's class) asks it for each subtree.
   */
  private sameAlongRun(s: number, st: Stack | null, run: number): { readonly d: number; readonly upTo: number } {
    const key = (st ? st.id : 0) * this.cx.grammar.stateCount + s;
    let same = this.sameMemo.get(key);
    if (!same) {
      const outside = classRuns(this.cx.grammar).outside;
      let first = 0;
      while ((outside[s * 8 + (first >>> 5)] & (1 << (first & 31))) !== 0) first++;
      const chain = this.cx.runs.chain(s, run, first);
      const at = (k: number) => chain[k < chain.length ? k : loopIndex(chain, k)];
      const d = this.distances.stateDistance(at(1), st);
      const limit = Math.min(run, this.cx.trie.maxDepth);
      let upTo = 1;
      while (upTo < limit && this.distances.stateDistance(at(upTo + 1), st) === d) upTo++;
      if (this.sameMemo.size >= MEMO_LIMIT) this.sameMemo.clear();
      this.sameMemo.set(key, (same = { d, upTo }));
    }
    return same;
  }

  /**
   * At a state that reads a byte class alike (class-runs.ts: an email's letters, a pattern's
   * digits; one configuration) for a run of bytes: the tokens made of the class no longer than
   * the run by length, each length at once with the distance of the state that many bytes on,
   * and the rest to walk (flat (trie node, configuration there) pairs, where a byte outside the
   * class follows class bytes), as contentByClass does for string content. Tokens longer than a
   * bounded run (an email's local part of at most 24 bytes, a uuid's 8 hex digits) go on past
   * it in the state the run ends in: when that state reads no byte of the class they are
   * refused (as the grammar mask refuses them), else they are walked from the nodes of the
   * run's length (walkBelow, with `add`). Null for other states.
   */
  private classByLength(
    start: Configs,
    addList: (d: number, ranges: readonly number[]) => void,
    add: (d: number, lo: number, hi: number) => void,
  ): (number | Configs)[] | null {
    const g = this.cx.grammar;
    if (start.size !== 1 || start.bottom) return null;
    const s = start.states[0];
    if (!simpleStates(g)[s] || contentRun(g, s) > 0) return null;
    const classes = classRuns(g);
    const run = classRunOf(g, classes, s);
    if (run <= 0) return null;
    const cls = this.cx.runs.classFacts(classes.outside, s);
    if (cls.lengths.length === 0) return null;
    const st = start.stacks[0];
    const chain = this.cx.runs.chain(s, run, cls.first);
    const at = (k: number) => chain[k < chain.length ? k : loopIndex(chain, k)];
    for (const [k, ranges] of cls.tokens) if (k <= run) addList(this.distances.stateDistance(at(k), st), ranges);
    if (cls.lengths[cls.lengths.length - 1] <= run) return this.leavingSubtrees(cls.exits, run, at, st);
    // A bounded run: what the state after it does with more bytes of the class.
    const after = this.cx.pool.closure(g, at(run), st);
    if (!readsAny(g, after, cls.outside)) return this.leavingSubtrees(cls.exits, run, at, st);
    // Paths longer than the run are walked from its length on (a byte outside the class right
    // after the run's last byte included): the lists give the shorter ones.
    for (const node of prefixesAt(this.cx.vocab, cls, run)) this.walkBelow(node, after, add);
    return this.leavingSubtrees(cls.exits, run - 1, at, st);
  }

  /**
   * At a position of a counted string (one configuration, its chain's states inside characters
   * following the decoding states, see content-chains.ts): its tokens of string content by class
   * (whole characters, decoding state at the end), each class taken at once with the distance of
   * the state it leads to, instead of walking a hundred thousand tokens per position. Returns
   * the rest to walk, flat (trie node, configuration there) pairs: where a byte that is not
   * content follows whole characters (a closing quote, a backslash), the lists of content-below.ts
   * name the nodes. Null when the start is no such position (the whole vocabulary is walked).
   */
  private contentByClass(start: Configs, addList: (d: number, ranges: readonly number[]) => void): (number | Configs)[] | null {
    const g = this.cx.grammar;
    if (start.size !== 1 || start.bottom) return null;
    const s = start.states[0];
    const at = chainPosition(g, s);
    // The positions a token can reach from here (at most the longest token's bytes in characters).
    const units = at && chainUnitsAt(g, at.chain, at.k, at.k + this.cx.trie.maxDepth);
    if (!at || !units) return null;
    const { chain, k } = at;
    const st = start.stacks[0];
    const run = runAt(g, chain, k);
    const count = chain.positions.length;
    const classes = contentClasses(this.cx.vocab);
    for (let c = 0; c < classes.keys.length; c++) {
      const j = classes.keys[c] >>> 3;
      const q = classes.keys[c] & 7;
      // The grammar refuses the others: a count past the run, or a character it cannot start there.
      if (q === 0 ? j < 1 || j > run : j >= run) continue;
      const state = q === 0 ? stateAfter(chain, k, j) : units.mid[Math.min(k + j, count) * 8 + q];
      if (state >= 0) addList(this.distances.stateDistance(state, st), classes.ranges[c]);
    }
    // Bytes breaking a character off are refused by the states inside it (chainUnits checks it).
    return this.leavingSubtrees(contentFrom(this.cx.vocab, 0).exits, run, (j) => stateAfter(chain, k, j), st);
  }

  /** The subtrees below an exits list's nodes (see forEachExit) to walk, with the configurations there: flat pairs. */
  private leavingSubtrees(exits: readonly (Int32Array | null)[], run: number, at: (k: number) => number, st: Stack | null): (number | Configs)[] {
    const g = this.cx.grammar;
    const pool = this.cx.pool;
    const leaving: (number | Configs)[] = [];
    forEachExit(g, exits, run, at, (exit, to) => {
      const config = pool.closure(g, to, st);
      if (config.size > 0 || config.bottom) leaving.push(exit, config);
    });
    return leaving;
  }
}

/** Whether a state of `c` reads some byte that is not in `outside` (8 words of bits). */
function readsAny(g: Grammar, c: Configs, outside: Int32Array): boolean {
  for (const x of c.states) {
    for (let b = 0; b < 256; b++) if ((outside[b >>> 5] & (1 << (b & 31))) === 0 && g.next[x * 256 + b] >= 0) return true;
  }
  return false;
}
