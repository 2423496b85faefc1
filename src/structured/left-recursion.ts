// Recursion that makes no progress: a rule that can call itself before reading a byte, as
// `{"anyOf": [{"$ref": "#"}, {"$ref": "#"}]}` or `{"$ref": "#"}` at the root do. Such a grammar
// describes nothing a model could finish writing, and its matcher would expand ever deeper
// stacks at every step; it is refused when compiled instead.

import { budgetTick } from "./compile-budget.ts";
import { UnsupportedSchemaError } from "./errors.ts";
import type { Grammar } from "./grammar.ts";

/** States of rule r reachable from its start without reading a byte (through nullable calls). */
function startClosure(g: Grammar, r: number, nullable: Uint8Array): number[] {
  const seen = new Set<number>([g.ruleBase[r]!]);
  const out = [g.ruleBase[r]!];
  for (let i = 0; i < out.length; i++) {
    budgetTick();
    const s = out[i]!;
    for (let c = g.callOffset[s]!; c < g.callOffset[s + 1]!; c++) {
      const ret = g.callReturn[c]!;
      if (nullable[g.ruleOf[g.callStart[c]!]!] && !seen.has(ret)) {
        seen.add(ret);
        out.push(ret);
      }
    }
  }
  return out;
}

/**
 * Throws UnsupportedSchemaError when some rule reaches a call of itself without reading input;
 * `pointerOf` names the subschema of a rule.
 */
export function checkProgress(g: Grammar, pointerOf: (rule: number) => string | undefined): void {
  const rules = g.ruleBase.length;
  // Rules that may end having read nothing, to a fixed point.
  const nullable = new Uint8Array(rules);
  for (let changed = true; changed; ) {
    changed = false;
    for (let r = 0; r < rules; r++) {
      if (nullable[r]) continue;
      if (startClosure(g, r, nullable).some((s) => g.final[s])) {
        nullable[r] = 1;
        changed = true;
      }
    }
  }
  // Calls each rule can make before reading a byte.
  const leftCalls: number[][] = [];
  for (let r = 0; r < rules; r++) {
    const callees = new Set<number>();
    for (const s of startClosure(g, r, nullable)) {
      for (let c = g.callOffset[s]!; c < g.callOffset[s + 1]!; c++) callees.add(g.ruleOf[g.callStart[c]!]!);
    }
    leftCalls.push([...callees]);
  }
  // A cycle among those calls, by an iterative depth-first search (0 new, 1 on the path, 2 done).
  const color = new Uint8Array(rules);
  for (let root = 0; root < rules; root++) {
    if (color[root]) continue;
    const frames: Array<[number, number]> = [[root, 0]];
    color[root] = 1;
    while (frames.length > 0) {
      budgetTick();
      const f = frames[frames.length - 1]!;
      const next = leftCalls[f[0]]![f[1]++];
      if (next === undefined) {
        color[f[0]] = 2;
        frames.pop();
      } else if (color[next] === 1) {
        throw new UnsupportedSchemaError("$ref", pointerOf(next) ?? "", "the schema refers to itself before any value is written (recursion without progress)");
      } else if (color[next] === 0) {
        color[next] = 1;
        frames.push([next, 0]);
      }
    }
  }
}
