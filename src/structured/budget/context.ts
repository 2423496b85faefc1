// What every part of a completion budget (../completion-budget.ts) reads: its grammar and
// vocabulary, the per-grammar byte tables it starts from, and the per-state caches the parts
// share. Fixed once the budget is built (the caches only fill), and handed to each part as one
// record, so that the exit searches and the walk of next tokens need nothing of each other.

import type { Grammar } from "../grammar.ts";
import type { Configs, Stack, StackPool } from "../parser-state.ts";
import { ServedRules } from "../rule-tables.ts";
import type { TokenVocabulary } from "../token-bytes.ts";
import type { TokenTrie } from "../trie.ts";
import { byteDistancesWhere } from "../distances.ts";
import { followBytes, optionalBytes, skipped } from "./state-bytes.ts";
import type { CompletionTables } from "./tables.ts";
import { UnitRuns } from "./unit-runs.ts";
import { factsOf, type VocabFacts } from "./vocab-facts.ts";

/** Past this many cached entries a table starts over (values are recomputed on demand). */
export const MEMO_LIMIT = 400_000;

export interface BudgetContext {
  readonly grammar: Grammar;
  readonly vocab: TokenVocabulary;
  readonly trie: TokenTrie;
  readonly facts: VocabFacts;
  /** The trie's node count: a (state, trie node) pair is keyed state * nodes + node. */
  readonly nodes: number;
  readonly pool: StackPool;
  /** Per rule, 8 words of bits: the bytes that may follow it (state-bytes.ts followBytes). */
  readonly follow: Uint32Array;
  /** Per state, the optional bytes searches leave out (state-bytes.ts optionalBytes). */
  readonly skipByte: Uint8Array;
  /** Per state, the fewest bytes that end its rule, the optional ones left out (see byteBound). */
  readonly bytesLeft: Float64Array;
  readonly rootRule: number;
  /** Nothing calls the root rule (see Origin.cap). */
  readonly rootAlone: boolean;
  /** Which rule tables of other grammars serve this grammar's rules (rule-tables.ts). */
  readonly served: ServedRules;
  /** Per-state facts of the runs of units states read alike, asked by searches and walks alike. */
  readonly runs: UnitRuns;
}

/**
 * The context of a budget of `grammar` on `vocab`, its byte tables taken from `tables` (computed
 * by another thread for this grammar) when given. `open`: as though any byte could follow every
 * rule and something called the root (see CompletionBudget's constructor).
 */
export function budgetContext(grammar: Grammar, vocab: TokenVocabulary, pool: StackPool, open: boolean, tables: CompletionTables | undefined): BudgetContext {
  const facts = factsOf(vocab);
  const trie = vocab.trie;
  let follow: Uint32Array;
  let skipByte: Uint8Array;
  let bytesLeft: Float64Array;
  if (tables) {
    follow = tables.follow;
    skipByte = tables.skipByte;
    bytesLeft = tables.bytesLeft;
  } else {
    follow = followBytes(grammar);
    skipByte = optionalBytes(grammar);
    const skip = skipByte;
    bytesLeft = byteDistancesWhere(grammar, (state, b) => !skipped(skip[state], b));
  }
  if (open) follow = new Uint32Array(follow.length).fill(0xffffffff);
  const rootRule = grammar.ruleOf[grammar.start];
  const rootAlone = !open && !grammar.callStart.some((x) => grammar.ruleOf[x] === rootRule);
  const served = new ServedRules(grammar, vocab, follow, (rule) => rootAlone && rule === rootRule);
  const runs = new UnitRuns(grammar, vocab, facts);
  return { grammar, vocab, trie, facts, nodes: trie.nodeCount, pool, follow, skipByte, bytesLeft, rootRule, rootAlone, served, runs };
}

/** The token distances a budget answers (CompletionBudget), which the walk of next tokens asks per token. */
export interface Distances {
  /** Fewest tokens that finish the document from `c`; `c` is remembered unless `remember` is false. */
  distance(c: Configs, remember?: boolean): number;
  /** Fewest tokens from resting state s with stack st to the end of the document. */
  stateDistance(s: number, st: Stack | null): number;
}
