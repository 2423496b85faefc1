// How many tokens of this vocabulary it takes, at fewest, to finish the document from a parser
// state, and which next tokens still leave a finish within a given number of tokens. The engine
// uses it to close a document before the client's token budget runs out (see
// GrammarMatcher.fillNextTokenBitmask) and to refuse up front a budget too small for any
// document.
//
// The count is over tokens, not bytes: one token may close a string, a member and an object at
// once (`"}}`), so the rules on the stack cannot be costed one by one. The parser state is a
// rule state plus a stack of return states; what couples two rules is only the token left open
// where one ends and the next goes on. So each (state, partial token) pair gets its "exits":
// for each trie node the token in progress may be at when the state's rule ends, the fewest
// tokens cut before that (a shortest path where bytes inside a token cost nothing and each token
// boundary costs one). Such a search only follows the bytes of the token in progress: at a token
// boundary inside the rule it takes the exits of (that state, no partial token), at a call those
// of (the callee's start, the partial token), as other searches it waits on. Recursive rules wait
// on each other; all pending searches run together as one label-correcting shortest path. The
// distance of a state with a stack is then its exits folded through the exits of each return
// state, which depend on the grammar alone and are cached.
//
// Moves left out, because they only lengthen a completion (no vocabulary we know makes them
// shorter) and would take the search through most of the vocabulary: string content read inside
// a token that does not go on past the string's end, string content tokens ending inside a UTF-8
// character (outside counted strings) or longer than the state reads alike, an optional newline
// (layout) and a backslash that starts an escape where the state has another way on. String
// contents are not walked byte by byte: a state that reads every character alike (see
// token-walk.ts contentRun) is left through tokens of k characters, or through the first byte
// after k characters that is not content (a closing quote), listed once per vocabulary
// (content-below.ts; also below any trie node, for a token in progress). The positions of a
// counted string (minLength/maxLength: one state per count) are solved all at once per string
// before the first search (chain-solver.ts), and a budget mask at one of them takes its tokens of
// content by class (whole characters, decoding state at the end) rather than one by one. The
// distance is the exact minimum over the moves followed, so it never promises a finish that does
// not exist: after any token it allows, one that keeps the promise is allowed again (the tests
// check it against every token of small vocabularies). A search that the same rule had done in
// another grammar is taken from that rule's table instead (rule-tables.ts): json_object's whole
// grammar and the built-in formats have theirs computed once per model (built-in-tables.ts).
//
// This module answers the distances (folding exits through the stack) and is the one other
// modules import; the parts live in budget/, each receiving the budget's BudgetContext
// (context.ts: grammar, vocabulary, byte tables, per-state caches): the exit searches
// (exit-search.ts), the moves of one search item (search-moves.ts), the counted strings' chains
// (chain-exits.ts), the per-state runs of units (unit-runs.ts), the next tokens by distance
// (next-profile.ts), the byte bound's token reach (token-reach.ts), the tables shared with other
// threads and grammars (tables.ts), and what is known per vocabulary and per state before any
// search (vocab-facts.ts, state-bytes.ts).

import type { Configs, Stack, StackPool } from "./parser-state.ts";
import type { Grammar } from "./grammar.ts";
import type { RuleTables } from "./rule-tables.ts";
import type { TokenVocabulary } from "./token-bytes.ts";
import { budgetTimeLeft } from "./compile-budget.ts";
import { type BudgetContext, budgetContext, type Distances, MEMO_LIMIT } from "./budget/context.ts";
import { UNREACHABLE } from "./budget/unreachable.ts";
import { ExitSearch } from "./budget/exit-search.ts";
import { type NextProfile, NextProfiles } from "./budget/next-profile.ts";
import { completionTables, ruleTablesOf } from "./budget/export-tables.ts";
import { adoptedTables, type CompletionTables } from "./budget/tables.ts";
import { tokenReach } from "./budget/token-reach.ts";
import { ROOT } from "./budget/vocab-facts.ts";

export { UNREACHABLE } from "./budget/unreachable.ts";
export type { NextProfile } from "./budget/next-profile.ts";
export { adoptCompletionTables, type CompletionTables, completionTablesBytes } from "./budget/tables.ts";
export { prepareCompletionFacts } from "./budget/vocab-facts.ts";

/** Token-level completion distances of one grammar on one vocabulary (shared by its matchers). */
export class CompletionBudget implements Distances {
  private readonly cx: BudgetContext;
  private readonly search: ExitSearch;
  private readonly profiles: NextProfiles;
  private readonly d1Memo = new Map<number, number>();
  private readonly popMemo = new Map<number, number>();
  private readonly configMemo = new WeakMap<Configs, number>();
  private reach: Float64Array | undefined;

  /**
   * `open`: searches as though any byte could follow every rule and something called the root
   * (no exit left out, no cap), for tables that serve the same rules in any grammar (see
   * rule-tables.ts and built-in-tables.ts).
   */
  constructor(
    readonly grammar: Grammar,
    readonly vocab: TokenVocabulary,
    pool: StackPool,
    open = false,
  ) {
    const tables = adoptedTables(grammar, vocab.trie.nodeCount);
    this.cx = budgetContext(grammar, vocab, pool, open, tables);
    this.search = new ExitSearch(this.cx);
    this.profiles = new NextProfiles(this.cx, this);
    if (tables) {
      this.search.adopt(tables);
      if (tables.reach) this.reach = tables.reach;
    }
  }

  /** The tables this budget computed so far (see CompletionTables); their buffers may be transferred. */
  exportTables(): CompletionTables {
    // Those taken from rule tables: the thread that adopts these has the same rule tables.
    return completionTables(this.cx, this.search.ownFinished(), this.reach);
  }

  /**
   * This grammar's finished searches per rule, as tables for other grammars with the same rules
   * (rule-tables.ts); those taken from such tables are left out.
   */
  exportRuleTables(): RuleTables {
    return ruleTablesOf(this.cx, this.search.ownFinished());
  }

  /**
   * Fewest tokens that finish the document from `c` (0 when it is complete), stop token not
   * counted. `c` must not change afterwards unless `remember` is false.
   */
  distance(c: Configs, remember = true): number {
    if (c.bottom) return 0;
    const known = remember ? this.configMemo.get(c) : undefined;
    if (known !== undefined) return known;
    let best = UNREACHABLE;
    for (let i = 0; i < c.size; i++) best = Math.min(best, this.stateDistance(c.states[i], c.stacks[i]));
    if (remember) this.configMemo.set(c, best);
    return best;
  }

  /** Fewest tokens from resting state s with stack st to the end of the document. */
  stateDistance(s: number, st: Stack | null): number {
    if (st === null && this.grammar.final[s]) return 0;
    const key = (st ? st.id : 0) * this.grammar.stateCount + s;
    let d = this.d1Memo.get(key);
    if (d === undefined) {
      const e = this.search.exits(s, ROOT);
      d = UNREACHABLE;
      for (let k = 0; k < e.nodes.length; k++) d = Math.min(d, e.costs[k] + this.pop(e.nodes[k], st));
      if (this.d1Memo.size >= MEMO_LIMIT) this.d1Memo.clear();
      this.d1Memo.set(key, d);
    }
    return d;
  }

  /** Fewest tokens to finish once the current rule has ended with token `node` in progress. */
  private pop(node: number, st: Stack | null): number {
    if (st === null) return node === ROOT ? 0 : this.cx.trie.tokCount[node] > 0 ? 1 : UNREACHABLE;
    const key = st.id * this.cx.nodes + node;
    let d = this.popMemo.get(key);
    if (d === undefined) {
      const e = this.search.exits(st.ret, node);
      d = UNREACHABLE;
      for (let k = 0; k < e.nodes.length; k++) d = Math.min(d, e.costs[k] + this.pop(e.nodes[k], st.next));
      if (this.popMemo.size >= MEMO_LIMIT) this.popMemo.clear();
      this.popMemo.set(key, d);
    }
    return d;
  }

  /**
   * Searches every resting state at a token boundary (in state order) while `ms` milliseconds
   * last: the states a budget mask meets after a token that its first searches did not reach
   * (inside a key, after a newline). Done where the grammar is compiled, so that a tight first
   * request does not search them on the loop that decodes (275 ms in one step for json_object on
   * Qwen3's vocabulary). Each search runs whole; the time only decides whether to start the next,
   * and under a compile budget none starts once half its time limit is spent (so that no schema is
   * refused for these: they are a cache).
   */
  searchStates(ms: number): void {
    const stop = performance.now() + ms;
    for (const _ of this.searches()) if (performance.now() > stop || budgetTimeLeft() < 0.5) return;
  }

  /** Every search the budget can need, one by one, yielding between them (see ExitSearch.searches). */
  searches(items = Infinity): Generator<void, void, void> {
    return this.search.searches(items);
  }

  /**
   * The next tokens from `c` grouped by the distance each leaves (computed once per parser
   * state, named by `key`): a step whose budget is short clears the groups beyond it.
   */
  nextProfile(c: Configs, key: string): NextProfile {
    return this.profiles.profile(c, key);
  }

  /**
   * An upper bound on what any next token can leave to finish, from byte distances alone: the
   * byte distance of the state plus the most a token (of at most the vocabulary's longest token's
   * bytes) can add to it from there (see tokenReach); a vocabulary holding every byte as a token
   * finishes a text of B bytes in at most B tokens. Lets requests with ample budgets skip the
   * token-level work entirely.
   */
  byteBound(c: Configs): number {
    if (!this.cx.facts.byteComplete) return UNREACHABLE;
    const dist = this.cx.bytesLeft;
    // Computed once per grammar, on the first budgeted step that needs it (or adopted).
    const reach = (this.reach ??= tokenReach(this.grammar, dist, this.cx.trie.maxDepth));
    let worst = 0;
    for (let i = 0; i < c.size; i++) {
      let d = dist[c.states[i]] + reach[c.states[i]];
      for (let st = c.stacks[i]; st; st = st.next) d += dist[st.ret];
      worst = Math.max(worst, d);
    }
    return Number.isFinite(worst) ? worst : UNREACHABLE;
  }
}

const budgets = new WeakMap<StackPool, CompletionBudget>();

/** The completion costs of a grammar and vocabulary, shared by the matchers of one stack pool. */
export function completionBudget(g: Grammar, vocab: TokenVocabulary, pool: StackPool): CompletionBudget {
  let b = budgets.get(pool);
  if (!b) budgets.set(pool, (b = new CompletionBudget(g, vocab, pool)));
  return b;
}
