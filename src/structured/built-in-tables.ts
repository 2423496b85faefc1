// The token budget tables of what every model's grammars share, computed once per model: the
// whole of json_object's grammar (every search a json_object request can need: about 17,000 on
// Qwen3's vocabulary, a second of work, which a request's compile time limit used to cut short,
// leaving hundreds to its first tight steps on the decoding loop), and the string contents,
// numbers and built-in string formats as rules any grammar may call (every state's search from a
// token boundary). The engine runs this on the model's compile thread in the background after
// load (compile-worker.ts), a search at a time between requests' compiles, and hands each part
// to the model's worker as it is done; until then budgets search as they did before. Grammars
// find the parts by their rules' keys (rule-keys.ts, rule-tables.ts): json_object's own, and any
// schema with a format, a plain string, a number or an untyped value.

import { compileJsonSchema, jsonObjectGrammar } from "./compile.ts";
import { CompletionBudget } from "./completion-budget.ts";
import { SUPPORTED_FORMATS } from "./formats.ts";
import type { Grammar } from "./grammar.ts";
import { StackPool } from "./parser-state.ts";
import { adoptRuleTables, type RuleTables, ruleTablesBytes } from "./rule-tables.ts";
import { inSharedMemory, type TokenVocabulary } from "./token-bytes.ts";

/**
 * Bytes of built-in tables kept per model at most (parts past it are not kept; json_object's
 * take about 2.5 MB on Qwen3's vocabulary, the rest a few hundred kilobytes).
 */
const BUILT_IN_TABLES_LIMIT = 32 * 1024 * 1024;

/**
 * Search items between two yields (a few milliseconds): one search of json_object's waits on
 * thousands of others (a quarter of a second whole), and a compile job would wait for it.
 */
const SEARCH_ITEMS = 2048;

/** One part of the built-in tables: its name and the grammar searched for it. */
interface Part {
  readonly name: string;
  readonly grammar: () => Grammar;
  /** Searched as rules any grammar may call (see CompletionBudget's `open`), else as the grammar a request gets. */
  readonly open: boolean;
}

const PARTS: readonly Part[] = [
  // Small and met by most schemas first; json_object last (the second it takes would hold them up).
  { name: "string", grammar: () => compileJsonSchema({ type: "string" }), open: true },
  { name: "integer", grammar: () => compileJsonSchema({ type: "integer" }), open: true },
  { name: "number", grammar: () => compileJsonSchema({ type: "number" }), open: true },
  ...SUPPORTED_FORMATS.map((format) => ({ name: `format ${format}`, grammar: () => compileJsonSchema({ type: "string", format }), open: true })),
  { name: "json_object", grammar: () => jsonObjectGrammar(), open: false },
];

/** A finished part: its tables in shared memory (posting them to another thread copies nothing). */
export interface BuiltInPart {
  readonly name: string;
  readonly tables: RuleTables;
  /** Time its searches took, ms (a slice at a time: the sum of the slices). */
  readonly ms: number;
}

/**
 * The searches of the built-in tables one by one: yields before each (the caller decides when to
 * go on) and calls `done` with each part as it is finished, leaving out the parts named in
 * `skip` (finished before, e.g. by a compile thread that was restarted since) and those that
 * would pass BUILT_IN_TABLES_LIMIT.
 */
export function* builtInSearches(vocab: TokenVocabulary, done: (part: BuiltInPart) => void, skip: ReadonlySet<string> = new Set()): Generator<void, void, void> {
  let kept = 0;
  for (const part of PARTS) {
    if (skip.has(part.name)) continue;
    const g = part.grammar();
    // A budget of its own: requests' budgets of the same grammar take the result by rule keys.
    const budget = new CompletionBudget(g, vocab, new StackPool(g.stateCount), part.open);
    let ms = 0;
    let t = performance.now();
    for (const _ of budget.searches(SEARCH_ITEMS)) {
      ms += performance.now() - t;
      yield;
      t = performance.now();
    }
    const local = budget.exportRuleTables();
    ms += performance.now() - t;
    const tables: RuleTables = {
      ...local,
      rules: local.rules.map((r) => ({
        ...r,
        follow: inSharedMemory(r.follow),
        origins: inSharedMemory(r.origins),
        offsets: inSharedMemory(r.offsets),
        exitNodes: inSharedMemory(r.exitNodes),
        exitCosts: inSharedMemory(r.exitCosts),
      })),
    };
    const bytes = ruleTablesBytes(tables);
    if (kept + bytes > BUILT_IN_TABLES_LIMIT) continue;
    kept += bytes;
    done({ name: part.name, tables, ms });
  }
}

/** Computes the built-in tables now, in this thread, and adopts them (tests and benchmarks). */
export function prepareBuiltInTables(vocab: TokenVocabulary): BuiltInPart[] {
  const parts: BuiltInPart[] = [];
  for (const _ of builtInSearches(vocab, (p) => (adoptRuleTables(vocab, p.tables), parts.push(p))));
  return parts;
}
