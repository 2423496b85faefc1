// What a completion budget (../completion-budget.ts) has computed that depends only on its grammar
// and vocabulary, as flat arrays: for the thread that decodes, from the thread that compiled the
// grammar (CompletionTables), and for other grammars with the same rules (rule tables,
// rule-tables.ts).

import type { Grammar } from "../grammar.ts";
import { ruleKey, ruleShapes } from "../rule-keys.ts";
import type { RuleTableData, RuleTables } from "../rule-tables.ts";
import type { BudgetContext } from "./context.ts";
import type { Origin } from "./origins.ts";

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

/** The tables of a budget whose own finished searches are `done` (copies: their buffers may be transferred). */
export function completionTables(cx: BudgetContext, done: readonly Origin[], reach: Float64Array | undefined): CompletionTables {
  return {
    nodeCount: cx.nodes,
    ...flatExits(done, 0),
    reach: reach ? reach.slice() : null,
    follow: cx.follow.slice(),
    skipByte: cx.skipByte.slice(),
    bytesLeft: cx.bytesLeft.slice(),
  };
}

/**
 * A budget's own finished searches `done` per rule, as tables for other grammars with the same
 * rules (rule-tables.ts).
 */
export function ruleTablesOf(cx: BudgetContext, done: readonly Origin[]): RuleTables {
  const g = cx.grammar;
  const byRule = new Map<number, Origin[]>();
  for (const o of done) {
    const rule = g.ruleOf[o.state];
    let list = byRule.get(rule);
    if (!list) byRule.set(rule, (list = []));
    list.push(o);
  }
  const rules: RuleTableData[] = [];
  for (const [rule, list] of byRule) {
    const key = ruleKey(g, rule)!;
    rules.push({ key, follow: cx.follow.slice(rule * 8, rule * 8 + 8), capped: cx.rootAlone && rule === cx.rootRule, ...flatExits(list, g.ruleBase[rule]) });
  }
  return { nodeCount: cx.nodes, rules, shapes: [...new Set(ruleShapes(g))] };
}

/**
 * Finished searches as flat arrays (see CompletionTables): states less `base` (a rule's first
 * state, for rule tables) and partial tokens, flat pairs, and their exits one after another.
 */
function flatExits(done: readonly Origin[], base: number): { origins: Int32Array; offsets: Int32Array; exitNodes: Int32Array; exitCosts: Int32Array } {
  const origins = new Int32Array(2 * done.length);
  const offsets = new Int32Array(done.length + 1);
  let total = 0;
  done.forEach((o, i) => {
    origins[2 * i] = o.state - base;
    origins[2 * i + 1] = o.node;
    offsets[i] = total;
    total += o.frozen!.nodes.length;
  });
  offsets[done.length] = total;
  const exitNodes = new Int32Array(total);
  const exitCosts = new Int32Array(total);
  done.forEach((o, i) => {
    exitNodes.set(o.frozen!.nodes, offsets[i]);
    exitCosts.set(o.frozen!.costs, offsets[i]);
  });
  return { origins, offsets, exitNodes, exitCosts };
}
