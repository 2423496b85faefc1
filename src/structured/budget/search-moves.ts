// The moves of one item of a completion budget's exit search (exit-search.ts): from a state with
// a token in progress (a trie node), through the grammar's bytes, calls and ends, and through
// whole runs of string content or of a byte class at once, from the vocabulary's lists
// (content-below.ts, vocab-facts.ts) instead of byte by byte. What they reach goes back to the
// search (SearchSteps), which keeps the costs.

import { contentBelow, ENDS_INSIDE, PARTIAL_FIELDS } from "../content-below.ts";
import type { BudgetContext } from "./context.ts";
import type { Origin } from "./origins.ts";
import { skipped } from "./state-bytes.ts";
import { forEachExit, loopIndex } from "./unit-runs.ts";
import { ROOT } from "./vocab-facts.ts";

/** What the moves of a search item report to the search (ExitSearch). */
export interface SearchSteps {
  /** Origin `o`'s search reaches state s with the token in progress at `node`, `c` tokens cut. */
  relax(o: number, s: number, node: number, c: number): void;
  /** `o` waits on origin `t`: each exit of t continues o's search at `ret` (or is o's exit, ret -1). */
  wait(t: number, o: number, ret: number, c: number): void;
  /** The origin of (s, node), its search started when it is new. */
  origin(s: number, node: number): number;
  /** Origin `o`'s rule ends with the token in progress at `node`, `c` tokens cut. */
  addExit(o: number, node: number, c: number): void;
}

/** The moves of origin `o`'s search item (state s, token in progress at `node`, `c` tokens cut). */
export function expand(cx: BudgetContext, search: SearchSteps, o: number, origin: Origin, s: number, node: number, c: number): void {
  const g = cx.grammar;
  const t = cx.trie;
  if (c >= origin.cap) return;
  if (node !== ROOT && t.tokCount[node] > 0) search.relax(o, s, ROOT, c + 1);
  if (node === ROOT && !(s === origin.state && origin.node === ROOT)) {
    // A token ended inside the rule: the rest is that state's own exits.
    search.wait(search.origin(s, ROOT), o, -1, c);
    return;
  }
  if (g.final[s]) search.addExit(o, node, c);
  for (let j = g.callOffset[s]; j < g.callOffset[s + 1]; j++) search.wait(search.origin(g.callStart[j], node), o, g.callReturn[j], c);
  if (!g.hasBytes[s]) return;
  const { run, classRun, cls, below, inside } = cx.runs.walkPlan(s);
  if (run > 0 && node === ROOT) {
    const f = cx.facts;
    runMoves(cx, search, o, s, c, run, 0x20, f.contentTokenChars, f.exits);
    return;
  }
  if (run > 0) {
    runMovesBelow(cx, search, o, s, node, c, run);
    return;
  }
  if (cls && node === ROOT) {
    runMoves(cx, search, o, s, c, classRun, cls.first, cls.lengths, cls.exits);
    return;
  }
  const skip = cx.skipByte[s];
  for (let child = node + 1; child < t.end[node]; child = t.end[child]) {
    const b = t.byte[child];
    if (skip && skipped(skip, b)) continue;
    if (below && !below[child] && inside!(b)) continue;
    const to = g.next[s * 256 + b];
    if (to >= 0) search.relax(o, to, child, c);
  }
}

/**
 * Tokens from a token boundary at a state that reads `run` units alike (string characters, or
 * bytes of a class), `unit` being one of them: k units (to the state k units on, for each k
 * some token has), or k units and then a byte beyond them, continued in the state that byte
 * leads to with the token still open.
 */
function runMoves(
  cx: BudgetContext,
  search: SearchSteps,
  o: number,
  s: number,
  c: number,
  run: number,
  unit: number,
  lengths: Int32Array,
  exits: readonly (Int32Array | null)[],
): void {
  const g = cx.grammar;
  const skipByte = cx.skipByte;
  const chain = cx.runs.chain(s, run, unit);
  const at = (k: number) => chain[k < chain.length ? k : loopIndex(chain, k)];
  for (const k of lengths) {
    if (k > run) break;
    search.relax(o, at(k), ROOT, c + 1);
  }
  const distinct = [...new Set(chain)];
  for (let b = 0; b < 256; b++) {
    const list = exits[b];
    if (distinct.every((x) => skipped(skipByte[x], b))) continue;
    if (!list || !distinct.some((x) => g.next[x * 256 + b] >= 0)) continue;
    for (let j = 0; j < list.length; j += 2) {
      const k = list[j + 1];
      if (k > run) break;
      const to = g.next[at(k) * 256 + b];
      if (to >= 0) search.relax(o, to, list[j], c);
    }
  }
}

/**
 * The rest of a token in progress (at trie node `node`) from a state that reads `run`
 * characters alike, from the lists of content below that node (content-chains.ts
 * contentBelow): a token ending after j whole characters (to the state j on, at a token
 * boundary), a byte that is not content after j of them (continued from where it leads), and a
 * token ending inside a character or a byte breaking one off (read from the state j on). What a
 * search of the subtree byte by byte would find, but the subtree is listed once per vocabulary
 * instead of walked per state.
 */
function runMovesBelow(cx: BudgetContext, search: SearchSteps, o: number, s: number, node: number, c: number, run: number): void {
  const g = cx.grammar;
  const t = cx.trie;
  const skipByte = cx.skipByte;
  const below = contentBelow(cx.vocab, node);
  const chain = cx.runs.chain(s, run, 0x20);
  const at = (k: number) => chain[k < chain.length ? k : loopIndex(chain, k)];
  for (const k of below.lengths) {
    if (k > run) break;
    search.relax(o, at(k), ROOT, c + 1);
  }
  forEachExit(g, below.exits, run, at, (exit, to, from, b) => {
    if (!skipped(skipByte[from], b)) search.relax(o, to, exit, c);
  });
  const p = below.partial;
  const path: number[] = [];
  for (let j = 0; j < p.length; j += PARTIAL_FIELDS) {
    const end = p[j];
    const k = p[j + 1];
    if (k >= run) continue;
    path.length = 0;
    for (let n = end; n !== p[j + 2]; n = t.parent[n]) path.push(t.byte[n]);
    path.push(t.byte[p[j + 2]]);
    let x = at(k);
    for (let i = path.length - 1; i >= 0 && x >= 0; i--) x = g.next[x * 256 + path[i]];
    if (x < 0) continue;
    // A token ending here is a token boundary; a byte breaking the character off goes on in the token.
    if (p[j + 3] === ENDS_INSIDE) search.relax(o, x, ROOT, c + 1);
    else search.relax(o, x, end, c);
  }
}
