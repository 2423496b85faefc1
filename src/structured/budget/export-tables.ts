// A budget's finished searches as flat tables (tables.ts' CompletionTables, and rule tables for
// other grammars with the same rules, rule-tables.ts): apart from tables.ts, which the budget's
// context reads, so that the tables' type does not import the context back.

import { ruleKey, ruleShapes } from "../rule-keys.ts";
import type { RuleTableData, RuleTables } from "../rule-tables.ts";
import type { BudgetContext } from "./context.ts";
import type { Origin } from "./origins.ts";
import type { CompletionTables } from "./tables.ts";

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
