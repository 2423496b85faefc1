// Names for a rule of a grammar by what it reads, whatever grammar it is in: two rules with the
// same key read the same bytes through the same states and call rules with the same keys, so
// their token budget tables (completion-budget.ts) are the same on one vocabulary. The tables of
// json_object and of the built-in string formats are computed once per model (built-in-tables.ts)
// and found by these keys from any grammar that has those rules: json_object's own (compiled
// anew for each request on the compile thread) and a schema with a format or an untyped value.
//
// A rule's own content (states, finals, transitions, calls by return state) is hashed apart from
// whom it calls; its key hashes, in the order a breadth-first walk over its calls meets them,
// the content of every rule it reaches and which of them each call goes to. Hashing a rule reads
// its whole transition table (18 MB for a string of 2,000 counted characters), so a rule is
// hashed only when its shape (state and call counts, a sample of its transitions) is the shape
// of a rule that has tables.

import { createHash } from "node:crypto";
import { byGrammarContent, type Grammar } from "./grammar.ts";

/** What is known of one grammar's rules, filled on first need. */
interface RuleNames {
  readonly shapes: readonly string[];
  /** Per rule: the hash of its own content (undefined until needed). */
  readonly content: (string | undefined)[];
  /** Per rule: its key (undefined until needed). */
  readonly keys: (string | undefined)[];
  /** Per rule: the rules it calls, in call order. */
  readonly callees: readonly (readonly number[])[];
}

/** By grammar and by content key: a model worker gets a new grammar object per compile. */
const namesOf = byGrammarContent(16, (g): RuleNames => {
  const rules = g.ruleBase.length;
  const shapes: string[] = [];
  const callees: number[][] = [];
  for (let r = 0; r < rules; r++) {
    shapes.push(shapeOf(g, r));
    const list: number[] = [];
    for (let c = g.callOffset[g.ruleBase[r]]; c < g.callOffset[end(g, r)]; c++) list.push(g.ruleOf[g.callStart[c]]);
    callees.push(list);
  }
  return { shapes, content: new Array(rules), keys: new Array(rules), callees };
});

const end = (g: Grammar, r: number) => (r + 1 < g.ruleBase.length ? g.ruleBase[r + 1] : g.stateCount);

/** Cheap to compute: states, calls, and a sample of the transitions relative to the rule's first state. */
function shapeOf(g: Grammar, r: number): string {
  const base = g.ruleBase[r];
  const stop = end(g, r);
  let h = 0x811c9dc5;
  for (let s = base; s < stop; s++) h = Math.imul(h ^ g.final[s], 0x01000193);
  for (let i = base * 256; i < stop * 256; i += 61) {
    const t = g.next[i];
    h = Math.imul(h ^ (t < 0 ? -1 : t - base), 0x01000193);
  }
  return `${stop - base}:${g.callOffset[stop] - g.callOffset[base]}:${h >>> 0}`;
}

/** A hash of the rule's states, finals, transitions and calls (by return state, callee left out). */
function contentOf(g: Grammar, r: number): string {
  const base = g.ruleBase[r];
  const stop = end(g, r);
  const local = new Int32Array((stop - base) * 256);
  for (let i = 0; i < local.length; i++) {
    const t = g.next[base * 256 + i];
    local[i] = t < 0 ? -1 : t - base;
  }
  const calls: number[] = [];
  for (let s = base; s < stop; s++) {
    calls.push(g.callOffset[s + 1] - g.callOffset[s]);
    for (let c = g.callOffset[s]; c < g.callOffset[s + 1]; c++) calls.push(g.callReturn[c] - base);
  }
  return createHash("sha256")
    .update(new Uint8Array(local.buffer))
    .update(g.final.subarray(base, stop))
    .update(new Uint8Array(Int32Array.from(calls).buffer))
    .digest("base64");
}

/** The shape of every rule of `g` (what a rule must have for its key to be worth computing). */
export function ruleShapes(g: Grammar): readonly string[] {
  return namesOf(g).shapes;
}

/**
 * The key of rule r of `g` (see the top of this file), or null when some rule it reaches has a
 * shape `wanted` refuses (no table can then be kept under its key: not hashed).
 */
export function ruleKey(g: Grammar, r: number, wanted: (shape: string) => boolean = () => true): string | null {
  const n = namesOf(g);
  const known = n.keys[r];
  if (known !== undefined) return known;
  // The rules r reaches, numbered in the order a breadth-first walk over calls meets them.
  const order = new Map<number, number>([[r, 0]]);
  const queue = [r];
  for (let q = 0; q < queue.length; q++) {
    if (!wanted(n.shapes[queue[q]])) return null;
    for (const c of n.callees[queue[q]]) {
      if (order.has(c)) continue;
      order.set(c, order.size);
      queue.push(c);
    }
  }
  const hash = createHash("sha256");
  for (const x of queue) {
    const content = (n.content[x] ??= contentOf(g, x));
    hash.update(`${content}>${n.callees[x].map((c) => order.get(c)).join(",")};`);
  }
  const key = hash.digest("base64");
  n.keys[r] = key;
  return key;
}
