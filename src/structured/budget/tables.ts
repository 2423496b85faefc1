// What a completion budget (../completion-budget.ts) has computed that depends only on its grammar
// and vocabulary, as flat arrays: for the thread that decodes, from the thread that compiled the
// grammar (CompletionTables), and for other grammars with the same rules (rule tables,
// rule-tables.ts). Made from a budget's finished searches by export-tables.ts.

import type { Grammar } from "../grammar.ts";

/**
 * What a budget has computed that depends only on its grammar and vocabulary: the finished
 * searches' exits and the per-state token reach, as arrays another thread can take over (see
 * adoptCompletionTables). The engine computes them where it compiles the grammar, not on the loop
 * that decodes: on a large vocabulary they take from tens of milliseconds to seconds.
 */
export interface CompletionTables {
  /** The vocabulary's trie size: tables apply only to the vocabulary they were computed on. */
  readonly nodeCount: number;
  /** Per finished search: its state and partial token (trie node), flat pairs. */
  readonly origins: Int32Array;
  /** Search i's exits are exitNodes/exitCosts[offsets[i] .. offsets[i + 1]). */
  readonly offsets: Int32Array;
  readonly exitNodes: Int32Array;
  readonly exitCosts: Int32Array;
  readonly reach: Float64Array | null;
  /** Per-grammar arrays the budget starts from (fixed points over every state: slow on large grammars). */
  readonly follow: Uint32Array;
  readonly skipByte: Uint8Array;
  readonly bytesLeft: Float64Array;
}

const adopted = new WeakMap<Grammar, CompletionTables>();

/** Budgets of `g` created from now on start from these tables (computed by another thread). */
export function adoptCompletionTables(g: Grammar, tables: CompletionTables): void {
  adopted.set(g, tables);
}

/** The tables adopted for `g`, when they were computed on a vocabulary whose trie has `nodeCount` nodes. */
export function adoptedTables(g: Grammar, nodeCount: number): CompletionTables | undefined {
  const tables = adopted.get(g);
  return tables && tables.nodeCount === nodeCount ? tables : undefined;
}

/** Bytes the tables hold (for the memory bound of a grammar cache). */
export function completionTablesBytes(t: CompletionTables): number {
  const n = t.origins.byteLength + t.offsets.byteLength + t.exitNodes.byteLength + t.exitCosts.byteLength + (t.reach?.byteLength ?? 0);
  return n + t.follow.byteLength + t.skipByte.byteLength + t.bytesLeft.byteLength;
}
