// The exits of every position of a grammar's counted string contents (minLength/maxLength: one
// state per count), each string at once (../chain-solver.ts) instead of one search per position:
// done before a budget's first search (exit-search.ts), so that searches reaching a position find
// it finished.

import { type ChainContext, type ChainExits, chainDependencies, solveChain } from "../chain-solver.ts";
import { chainUnits, contentChains } from "../content-chains.ts";
import type { TokenTrie } from "../trie.ts";
import type { BudgetContext } from "./context.ts";
import { UNREACHABLE } from "./unreachable.ts";
import type { Exits } from "./origins.ts";
import { skipped } from "./state-bytes.ts";
import { ROOT } from "./vocab-facts.ts";

/** What solving the chains asks of the exit search (ExitSearch). */
export interface ChainSearch {
  /** The exits of (s, node) when known, else null. */
  frozenExits(s: number, node: number): Exits | null;
  /** Starts the search of (s, node) unless it is known. */
  origin(s: number, node: number): number;
  /** Runs every pending search to its end. */
  run(): boolean;
  /** Records the exits of (state, no token in progress) found without a search of its own. */
  freeze(state: number, exits: ChainExits): void;
}

/**
 * The exits of every position of the grammar's counted string contents, each chain at once
 * (content-chains.ts): the searches they continue into first, then the positions from the end of
 * the chain back.
 */
export function solveChains(cx: BudgetContext, search: ChainSearch): void {
  const g = cx.grammar;
  const chainCx: ChainContext = {
    grammar: g,
    vocab: cx.vocab,
    skipped: (s, b) => skipped(cx.skipByte[s], b),
  };
  for (const chain of contentChains(g)) {
    const units = chainUnits(g, chain);
    const states = [...chain.positions];
    if (units) for (let k = 0; k < chain.positions.length; k++) states.push(...units.mid.subarray(k * 8 + 1, k * 8 + 8), units.escape[k]);
    if (states.every((s) => s < 0 || search.frozenExits(s, ROOT) !== null)) continue;
    chainDependencies(chainCx, chain, units, (state, node) => void search.origin(state, node));
    search.run();
    const solved = solveChain(chainCx, chain, units, (state, node) => search.frozenExits(state, node)!, (state) => search.frozenExits(state, ROOT));
    const keep = cx.rootAlone && g.ruleOf[chain.positions[0]] === cx.rootRule ? (e: ChainExits) => cheapestEnds(cx.trie, e) : (e: ChainExits) => e;
    solved.forEach((p, k) => {
      search.freeze(chain.positions[k], keep(p.boundary));
      if (!units) return;
      for (let q = 1; q < 8; q++) if (p.mid[q]) search.freeze(units.mid[k * 8 + q], keep(p.mid[q]!));
      if (p.escape) search.freeze(units.escape[k], keep(p.escape));
    });
  }
}

/**
 * In the root rule, when nothing calls it, an exit ends the document: only those that end it
 * in the fewest tokens matter (a token in progress is one more; see CompletionBudget's pop and
 * Origin.cap). The rest only fill the tables (megabytes for the 2,000 positions of a long string).
 */
function cheapestEnds(t: TokenTrie, e: ChainExits): ChainExits {
  const total = (i: number) => e.costs[i] + (e.nodes[i] === ROOT ? 0 : t.tokCount[e.nodes[i]] > 0 ? 1 : UNREACHABLE);
  let least = UNREACHABLE;
  for (let i = 0; i < e.nodes.length; i++) least = Math.min(least, total(i));
  const kept: number[] = [];
  for (let i = 0; i < e.nodes.length; i++) if (total(i) === least) kept.push(i);
  if (kept.length === e.nodes.length) return e;
  return { nodes: Int32Array.from(kept, (i) => e.nodes[i]), costs: Int32Array.from(kept, (i) => e.costs[i]) };
}
