// The fewest tokens to the end of a rule from every state of a counted string at once (see
// content-chains.ts): the searches its tokens continue into after leaving the string are done
// first, then each position, from the end of the chain back to its start, is a minimum over the
// moves from it. The moves are the same at every position relative to it (RelativeMoves: one
// token to position k + j at a boundary or inside a character, or j characters and a byte that
// leaves the string), listed once per chain from the vocabulary's lists (content-below.ts), so a
// position costs a few hundred minimums over small exit lists. Searching each position on its
// own with the label-correcting search of budget/exit-search.ts cost about 5 s for the 2,000
// positions of a string of up to 2,000 characters on Qwen3's vocabulary (every position redid
// the list of tokens that end a string, and passed each improvement along 92 token lengths).
//
// Which tokens are followed: from a position at a token boundary, every token of string content
// (also those ending inside a character), and those that leave the content after whole
// characters (a backslash that starts an escape and an optional newline are left out, as in the
// general search: they never shorten a document); from inside a character and after a backslash,
// every token. The positions' states inside a character and after a backslash are checked to
// follow the UTF-8 decoding states (content-chains.ts chainUnits); without that, only the
// positions are solved here and those states are searched as any other.

import { budgetTick } from "./compile-budget.ts";
import { type ContentBelow, contentBelow, contentFrom, ENDS_INSIDE, PARTIAL_FIELDS } from "./content-below.ts";
import { type ChainUnits, type ContentChain, MID_ORDER, runAt, stateAfter } from "./content-chains.ts";
import type { Grammar } from "./grammar.ts";
import type { TokenVocabulary } from "./token-bytes.ts";

/** A search's result: exit nodes (the token in progress where the rule ends) and the fewest tokens cut before each. */
export interface ChainExits {
  readonly nodes: Int32Array;
  readonly costs: Int32Array;
}

/** What the solver reads besides the grammar. */
export interface ChainContext {
  readonly grammar: Grammar;
  readonly vocab: TokenVocabulary;
  /** Whether the search leaves out byte b at state s (an optional newline or escape, see budget/state-bytes.ts). */
  readonly skipped: (s: number, b: number) => boolean;
}

/**
 * The moves from one kind of state of a chain (a position at a token boundary, inside a
 * character in decoding state q, after a backslash), relative to its position k: the same at
 * every position, listed once per chain from the vocabulary's lists.
 */
interface RelativeMoves {
  /** Flat (offset, q) pairs, each once: one token to position k + offset, at a boundary (q 0) or inside a character. */
  readonly land: Int32Array;
  /** Bytes that are not content after `offset` characters from k, with the trie nodes of the tokens that read them there. */
  readonly leave: readonly LeavingGroup[];
}

interface LeavingGroup {
  /** Unique among a chain's groups (groups of different kinds of state have other nodes for the same byte and offset). */
  readonly id: number;
  readonly byte: number;
  readonly offset: number;
  readonly nodes: Int32Array;
}

class MoveTable {
  private readonly land = new Set<number>();
  private readonly leave = new Map<number, number[]>();
  /** Flat (node, characters) pairs per byte, `offset` characters further on. */
  addExits(exits: readonly (Int32Array | null)[], offset: number): void {
    exits.forEach((list, byte) => {
      for (let e = 0; list && e < list.length; e += 2) {
        const key = byte * 65536 + offset + list[e + 1]!;
        let nodes = this.leave.get(key);
        if (!nodes) this.leave.set(key, (nodes = []));
        nodes.push(list[e]!);
      }
    });
  }
  addLand(offset: number, q: number): void {
    this.land.add(offset * 8 + q);
  }
  /** A vocabulary's list from `offset` characters on: its lengths, its tokens ending inside a character, its exits. */
  addListed(below: ContentBelow, offset: number): void {
    for (const j of below.lengths) this.addLand(offset + j, 0);
    const p = below.partial;
    // Bytes breaking a character off lead nowhere: the units are checked to refuse them.
    for (let i = 0; i < p.length; i += PARTIAL_FIELDS) if (p[i + 3] === ENDS_INSIDE) this.addLand(offset + p[i + 1]!, p[i + 4]!);
    this.addExits(below.exits, offset);
  }
  /** The table's moves; `ids` numbers the groups of all tables of a chain. */
  moves(ids: { next: number }): RelativeMoves {
    const land = Int32Array.from([...this.land].sort((a, b) => a - b).flatMap((x) => [x >>> 3, x & 7]));
    const leave = [...this.leave].map(([key, nodes]) => ({ id: ids.next++, byte: Math.floor(key / 65536), offset: key % 65536, nodes: Int32Array.from(nodes) }));
    return { land, leave };
  }
}

/** A move's destination: a position's state (index 0 .. positions, decoding state or 0), or searches of their own. */
interface MoveSink {
  position(index: number, q: number): void;
  /** The searches from `state` with each of the group's nodes in progress (group: an index into the chain's leaving groups). */
  leave(state: number, group: LeavingGroup): void;
}

/** The relative moves of each kind of state of one chain. */
class ChainMoves {
  readonly boundary: RelativeMoves;
  readonly mid: (RelativeMoves | null)[] = [];
  private readonly escapes = new Map<string, RelativeMoves>();
  private readonly ids = { next: 0 };
  constructor(private readonly cx: ChainContext) {
    const b = new MoveTable();
    b.addListed(contentBelow(cx.vocab, ROOT), 0);
    this.boundary = b.moves(this.ids);
    for (let q = 1; q < 8; q++) {
      const m = new MoveTable();
      m.addListed(contentFrom(cx.vocab, q), 0);
      this.mid[q] = m.moves(this.ids);
    }
  }
  /** After the backslash of state `escape`: each escaped character's token (one character), and the tokens below it. */
  escape(escape: number): RelativeMoves {
    const { grammar: g, vocab } = this.cx;
    const t = vocab.trie;
    const children: number[] = [];
    for (let child = 1; child < t.end[0]!; child = t.end[child]!) {
      const b = t.byte[child]!;
      if (g.next[escape * 256 + b]! >= 0 && !this.cx.skipped(escape, b)) children.push(child);
    }
    const key = children.join(",");
    let moves = this.escapes.get(key);
    if (!moves) {
      const m = new MoveTable();
      for (const child of children) {
        if (t.tokCount[child]! > 0) m.addLand(1, 0);
        m.addListed(contentBelow(vocab, child), 1);
      }
      this.escapes.set(key, (moves = m.moves(this.ids)));
    }
    return moves;
  }
}

/** The moves from position k of a state of kind `moves`, whose position reads `run` characters. */
function forEach(cx: ChainContext, chain: ContentChain, k: number, moves: RelativeMoves, sink: MoveSink): void {
  const run = runAt(cx.grammar, chain, k);
  const land = moves.land;
  for (let i = 0; i < land.length; i += 2) {
    const offset = land[i]!;
    const q = land[i + 1]!;
    // A boundary within the run; a character started within it (the chain's last state starts none).
    if (q === 0 ? offset <= run : offset < run) sink.position(k + offset, q);
  }
  const g = cx.grammar;
  for (const group of moves.leave) {
    if (group.offset > run) continue;
    const y = stateAfter(chain, k, group.offset);
    const to = g.next[y * 256 + group.byte]!;
    if (to >= 0 && !cx.skipped(y, group.byte)) sink.leave(to, group);
  }
}

/** Calls `need(state, node)` for every search the chain's moves continue into (they must be finished before solveChain). */
export function chainDependencies(cx: ChainContext, chain: ContentChain, units: ChainUnits | null, need: (state: number, node: number) => void): void {
  const count = chain.positions.length;
  const seen = new Set<number>();
  const sink: MoveSink = {
    position(index, q) {
      if (index < count || (q > 0 && !units)) return;
      const state = q === 0 ? chain.beyond : units!.mid[count * 8 + q]!;
      if (state >= 0) need(state, 0);
    },
    leave(state, group) {
      const key = state * 2 ** 24 + group.id;
      if (seen.has(key)) return;
      seen.add(key);
      for (const node of group.nodes) need(state, node);
    },
  };
  const moves = new ChainMoves(cx);
  for (let k = 0; k < count; k++) eachKind(cx, chain, units, moves, k, (m) => forEach(cx, chain, k, m, sink));
}

/**
 * The moves of each state at position k: those inside a character and after a backslash first
 * (a token from the boundary may end inside the position's first character, so the boundary
 * reads them), then the boundary's.
 */
function eachKind(cx: ChainContext, chain: ContentChain, units: ChainUnits | null, moves: ChainMoves, k: number, visit: (m: RelativeMoves, state: number, q: number) => void): void {
  if (units) {
    for (const q of MID_ORDER) {
      const state = units.mid[k * 8 + q]!;
      if (state >= 0) visit(moves.mid[q]!, state, q);
    }
    const e = units.escape[k]!;
    if (e >= 0) visit(moves.escape(e), e, ESCAPE);
  }
  visit(moves.boundary, chain.positions[k]!, 0);
}

/** eachKind's q for the state after a backslash. */
const ESCAPE = 8;

/** Per position: its state's exits, then (with units) those of its states inside a character and after a backslash. */
export interface SolvedPosition {
  readonly boundary: ChainExits;
  readonly mid: (ChainExits | null)[];
  escape: ChainExits | null;
}

/**
 * Every position's exits, from the end back (see the top of this file). `searched` gives the
 * exits of a finished search; `known` those of a state some search has found already (a grammar
 * that comes back into the chain from after it), which are taken as they are.
 */
export function solveChain(
  cx: ChainContext,
  chain: ContentChain,
  units: ChainUnits | null,
  searched: (state: number, node: number) => ChainExits,
  known: (state: number) => ChainExits | null,
): SolvedPosition[] {
  const count = chain.positions.length;
  const min = new ExitMinimum(cx.vocab.trie.nodeCount);
  // A group's searches are merged while a state's minimum is being taken: a table of their own.
  const groupMin = new ExitMinimum(cx.vocab.trie.nodeCount);
  const solved: SolvedPosition[] = new Array(count);
  const merged = new Map<number, ChainExits>();
  const sink: MoveSink = {
    position(index, q) {
      // Past the last position: `beyond` (every count past it, when it loops).
      const e = index < count ? (q === 0 ? solved[index]!.boundary : solved[index]!.mid[q]) : searchedAt(q);
      if (e) min.take(e, 1);
    },
    leave(state, group) {
      // Merged once per (state, group): most moves out of the chain lead to the same few searches.
      const key = state * 2 ** 24 + group.id;
      let e = merged.get(key);
      if (!e) {
        for (const node of group.nodes) groupMin.take(searched(state, node), 0);
        merged.set(key, (e = groupMin.result()));
      }
      min.take(e, 0);
    },
  };
  const searchedAt = (q: number): ChainExits | null => {
    if (q > 0 && !units) return null;
    const state = q === 0 ? chain.beyond : units!.mid[count * 8 + q]!;
    return state >= 0 ? searched(state, 0) : null;
  };
  const moves = new ChainMoves(cx);
  for (let k = count - 1; k >= 0; k--) {
    budgetTick();
    const position: SolvedPosition = { boundary: EMPTY, mid: [null, null, null, null, null, null, null, null], escape: null };
    solved[k] = position;
    eachKind(cx, chain, units, moves, k, (m, state, q) => {
      let e = known(state);
      if (!e) {
        forEach(cx, chain, k, m, sink);
        e = min.result();
      }
      if (q === 0) (position as { boundary: ChainExits }).boundary = e;
      else if (q === ESCAPE) position.escape = e;
      else position.mid[q] = e;
    });
  }
  return solved;
}

const EMPTY: ChainExits = { nodes: new Int32Array(0), costs: new Int32Array(0) };
/** The trie's root: no token in progress. */
const ROOT = 0;

/** The least cost per exit node over the exits taken since the last result (a vocabulary-sized scratch table). */
class ExitMinimum {
  private readonly cost: Int32Array;
  private readonly touched: number[] = [];
  constructor(nodes: number) {
    this.cost = new Int32Array(nodes).fill(-1);
  }
  take(e: ChainExits, extra: number): void {
    for (let i = 0; i < e.nodes.length; i++) {
      const node = e.nodes[i]!;
      const c = e.costs[i]! + extra;
      const old = this.cost[node]!;
      if (old < 0) this.touched.push(node);
      if (old < 0 || c < old) this.cost[node] = c;
    }
  }
  /** The minimum so far, and a fresh start. */
  result(): ChainExits {
    const nodes = Int32Array.from(this.touched);
    const costs = new Int32Array(nodes.length);
    for (let i = 0; i < nodes.length; i++) ((costs[i] = this.cost[nodes[i]!]!), (this.cost[nodes[i]!] = -1));
    this.touched.length = 0;
    return { nodes, costs };
  }
}
