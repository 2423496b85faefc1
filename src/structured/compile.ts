// Entry points from schemas / response formats to grammars, cached by canonical content so a
// schema sent with every request is compiled once.

import { canonicalJson } from "./canonical.ts";
import { type Grammar, GrammarBuilder } from "./grammar.ts";
import { DEFAULT_OPTIONS, SchemaCompiler, type SchemaCompileOptions } from "./schema.ts";
import { SUPPORTED_FORMATS } from "./formats.ts";
import { checkProgress } from "./left-recursion.ts";
import { GrammarMatcher } from "./matcher.ts";
import { prepareCompletionFacts } from "./completion-budget.ts";
import { warmStateMasks } from "./state-masks.ts";
import type { TokenVocabulary } from "./token-bytes.ts";

// Each grammar keeps its per-state token masks alive, so the cache stays modest.
let cacheLimit = 64;
const cache = new Map<string, Grammar>();

/**
 * Grammars kept for reuse in this thread (0: none). A thread that hands its grammars to another
 * (the engine's compile thread transfers their memory away) keeps none.
 */
export function configureGrammarCache(limit: number): void {
  cacheLimit = limit;
  while (cache.size > limit) cache.delete(cache.keys().next().value!);
}

export function cached(key: string, build: () => Grammar): Grammar {
  if (cacheLimit === 0) return build();
  const hit = cache.get(key);
  if (hit) {
    // Refresh recency: Map iteration order is insertion order.
    cache.delete(key);
    cache.set(key, hit);
    return hit;
  }
  const g = build();
  cache.set(key, g);
  if (cache.size > cacheLimit) cache.delete(cache.keys().next().value!);
  return g;
}

/** The root value is the whole document: nothing before or after it (see layout.ts). */
function rootGrammar(key: string, options: SchemaCompileOptions, rule: (c: SchemaCompiler) => number): Grammar {
  const builder = new GrammarBuilder();
  const compiler = new SchemaCompiler(builder, options);
  const grammar = builder.build(rule(compiler), key);
  checkProgress(grammar, (r) => compiler.pointers[r]);
  return grammar;
}

/** Grammar of JSON texts valid against `schema` (throws UnsupportedSchemaError). */
export function compileJsonSchema(schema: unknown, options: Partial<SchemaCompileOptions> = {}): Grammar {
  const opts = { ...DEFAULT_OPTIONS, ...options };
  const key = `schema:${canonicalJson(schema)}`;
  return cached(key, () => rootGrammar(key, opts, (c) => c.rule(schema, schema, "")));
}

/** Grammar of any JSON object (`response_format: {"type": "json_object"}`). */
export function jsonObjectGrammar(options: Partial<SchemaCompileOptions> = {}): Grammar {
  const opts = { ...DEFAULT_OPTIONS, ...options };
  const key = "json_object";
  return cached(key, () => rootGrammar(key, opts, (c) => c.anyObjectRule()));
}

/**
 * Warms the vocabulary-wide masks shared by all JSON grammars (string contents, keys, numbers,
 * the built-in string formats); call once per model at load. Takes a few hundred milliseconds on
 * a 150k vocabulary.
 */
export function prepareVocabulary(vocab: TokenVocabulary): void {
  const common: object[] = [
    { type: "object", properties: { s: { type: "string" } }, additionalProperties: false },
    { type: "integer" },
    { type: "number" },
    ...SUPPORTED_FORMATS.map((format) => ({ type: "string", format })),
  ];
  warmStateMasks(vocab, common.map((schema) => compileJsonSchema(schema)), [jsonObjectGrammar()]);
  // String contents as token budgets see them (completion-budget.ts).
  prepareCompletionFacts(vocab);
  // One short document through a matcher, so the first request's steps do not run this code
  // before the JIT has seen it (a cold first step costs several times a warm one).
  const m = new GrammarMatcher(jsonObjectGrammar(), vocab);
  const mask = new Uint32Array(m.maskWords);
  for (const ch of '{"k": [1.5, "v", {"n": null}], "t": true}') {
    m.fillNextTokenBitmask(mask);
    if (!m.acceptString(ch)) break;
  }
}
