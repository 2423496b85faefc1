// JSON Schema to grammar rules. Each subschema becomes one rule (a byte DFA that calls the rules of
// its children), so recursion through $ref is just a rule calling itself. Every keyword that
// constrains values is either enforced or refused with UnsupportedSchemaError; none is ignored.

import {
  alt,
  call,
  compileRe,
  complement,
  EMPTY,
  embed,
  intersect,
  lit,
  members,
  opt,
  type Re,
  rep,
  type RuleDfa,
  seq,
  star,
} from "./automaton.ts";
import { canonicalJson } from "./canonical.ts";
import { budgetDepth, SchemaLimitError } from "./compile-budget.ts";
import { pointerAppend, UnsupportedSchemaError } from "./errors.ts";
import { formatRe, SUPPORTED_FORMATS } from "./formats.ts";
import { type GrammarBuilder } from "./grammar.ts";
import { COUNTED_CHAR, JSON_CHAR, jsonLiteral as jsonLit, PLAIN_JSON_CHAR } from "./json-text.ts";
import { container, type Layout, layoutKey, ROOT, type Spacing } from "./layout.ts";
import { integerRe, type NumericBounds, numberRe } from "./numbers.ts";
import { patternToRe, RegexUnsupportedError } from "./regex.ts";

export type JsonSchema = boolean | { readonly [key: string]: unknown };
type SchemaObject = { readonly [key: string]: unknown };

// Whitespace is not an option: it follows the layout policy of layout.ts for every grammar.
export interface SchemaCompileOptions {}

export const DEFAULT_OPTIONS: SchemaCompileOptions = {};

/** Keywords that only annotate: accepted and skipped (zod, pydantic and SDK helpers emit them). */
const ANNOTATIONS = new Set([
  "$schema", "$id", "$anchor", "$comment", "title", "description", "examples", "default",
  "readOnly", "writeOnly", "deprecated", "contentEncoding", "contentMediaType", "discriminator",
  "$defs", "definitions",
]);

const SUPPORTED = new Set([
  "type", "properties", "required", "additionalProperties", "enum", "const", "anyOf", "oneOf",
  "allOf", "$ref", "items", "prefixItems", "minItems", "maxItems", "minLength", "maxLength",
  "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "propertyNames",
  "additionalItems",
]);

const TYPES = ["null", "boolean", "object", "array", "number", "integer", "string"] as const;
type JsonType = (typeof TYPES)[number];

const OBJECT_KEYWORDS = ["properties", "required", "additionalProperties", "propertyNames"];
const ARRAY_KEYWORDS = ["items", "prefixItems", "minItems", "maxItems", "additionalItems"];
const STRING_KEYWORDS = ["minLength", "maxLength", "pattern", "format"];
const NUMBER_KEYWORDS = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"];

/** allOf merged into allOf (through $ref) this many times is a cycle, not a schema. */
const MAX_ALLOF_DEPTH = 32;

const isObject = (v: unknown): v is SchemaObject => typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * Automata of subschemas that call no other rule (strings with their formats, patterns and
 * lengths, numbers with bounds, enums), by content: the same leaf in a later schema is not
 * compiled again. Bounded, oldest dropped first.
 */
const leafDfas = new Map<string, RuleDfa>();
const LEAF_CACHE_LIMIT = 512;
/** By their transition tables too: one long counted string alone is tens of megabytes. */
const LEAF_CACHE_BYTES = 32 * 1024 * 1024;
let leafDfaBytes = 0;

function rememberLeaf(key: string, dfa: RuleDfa): void {
  if (dfa.next.byteLength > LEAF_CACHE_BYTES / 4) return;
  leafDfas.set(key, dfa);
  leafDfaBytes += dfa.next.byteLength;
  while (leafDfas.size > LEAF_CACHE_LIMIT || leafDfaBytes > LEAF_CACHE_BYTES) {
    const oldest = leafDfas.keys().next().value!;
    leafDfaBytes -= leafDfas.get(oldest)!.next.byteLength;
    leafDfas.delete(oldest);
  }
}

/** Compiles schemas of one document (for $ref resolution) into rules of a GrammarBuilder. */
export class SchemaCompiler {
  /** Rules by schema object, then layout key. */
  private readonly byIdentity = new Map<unknown, Map<string, number>>();
  private readonly byContent = new Map<string, number>();
  private readonly anyValue = new Map<string, number>();
  private anyString: number | undefined;
  private anyScalar: number | undefined;
  private readonly keyRules = new Map<string, number>();
  /** Per rule id, the JSON pointer of the subschema it was compiled from (for errors found later). */
  readonly pointers: string[] = [];
  /** Subschemas being compiled, one inside the other (nesting and $ref chains). */
  private depth = 0;

  constructor(
    private readonly builder: GrammarBuilder,
    _options: SchemaCompileOptions = DEFAULT_OPTIONS,
  ) {}

  /**
   * The rule for values valid against `schema` laid out as `layout` (layout.ts); `root` is the
   * document $refs resolve in. Values that cannot hold a container (strings, numbers, enums)
   * have one rule for every layout.
   */
  rule(schema: unknown, root: unknown = schema, pointer = "", layout: Layout = ROOT): number {
    if (schema === true || (isObject(schema) && Object.keys(schema).every((k) => ANNOTATIONS.has(k)))) {
      return this.anyValueRule(layout);
    }
    if (schema === false) throw new UnsupportedSchemaError("false", pointer, "the schema allows no value");
    if (!isObject(schema)) throw new UnsupportedSchemaError("type", pointer, "a schema must be an object or a boolean");
    const lk = mayHoldContainer(schema) ? layoutKey(layout) : "*";
    let forSchema = this.byIdentity.get(schema);
    const known = forSchema?.get(lk);
    if (known !== undefined) return known;
    // Content-equal schemas without references share one rule (and the matcher's caches for it).
    const text = canonicalJson(schema);
    const contentKey = text.includes('"$ref"') ? undefined : `${lk}:${text}`;
    if (contentKey !== undefined) {
      const shared = this.byContent.get(contentKey);
      if (shared !== undefined) return shared;
    }
    const id = this.builder.reserve();
    this.pointers[id] = pointer;
    if (!forSchema) this.byIdentity.set(schema, (forSchema = new Map()));
    forSchema.set(lk, id);
    if (contentKey !== undefined) this.byContent.set(contentKey, id);
    try {
      budgetDepth(++this.depth);
      const cachedDfa = contentKey === undefined ? undefined : leafDfas.get(contentKey);
      if (cachedDfa) this.builder.defineDfa(id, cachedDfa);
      else {
        const dfa = this.builder.define(id, this.body(schema, root, pointer, layout));
        if (contentKey !== undefined && dfa.calls.every((c) => c.length === 0)) rememberLeaf(contentKey, dfa);
      }
    } catch (e) {
      // Noted first: past a time limit, the cleanup below throws the same error again.
      if (e instanceof SchemaLimitError) e.at(pointer);
      // Callers may recover (a loose tool falls back to any object); leave no half-built rule.
      forSchema.delete(lk);
      if (contentKey !== undefined) this.byContent.delete(contentKey);
      this.builder.abandon(id);
      throw e;
    } finally {
      this.depth--;
    }
    return id;
  }

  anyValueRule(layout: Layout = ROOT): number {
    const lk = layoutKey(layout);
    const known = this.anyValue.get(lk);
    if (known !== undefined) return known;
    const value = this.builder.reserve();
    this.anyValue.set(lk, value);
    const str = this.anyStringRule();
    const member = (s: Spacing) => seq(call(str), s.colon, call(this.anyValueRule(s.child)));
    const object = this.builder.add(container(layout, "{", (s) => seq(member(s), star(seq(s.sep, member(s)))), true));
    const item = (s: Spacing) => call(this.anyValueRule(s.child));
    const array = this.builder.add(container(layout, "[", (s) => seq(item(s), star(seq(s.sep, item(s)))), true));
    // Scalars look alike in every layout: one rule for them all.
    this.anyScalar ??= this.builder.add(alt(call(str), numberRe({})!, lit("true"), lit("false"), lit("null")));
    this.builder.define(value, alt(call(object), call(array), call(this.anyScalar)));
    return value;
  }

  /** Any JSON object, as `response_format: json_object` asks for. */
  anyObjectRule(layout: Layout = ROOT): number {
    return this.rule({ type: "object" }, undefined, "", layout);
  }

  private anyStringRule(): number {
    this.anyString ??= this.builder.add(seq(lit('"'), star(JSON_CHAR), lit('"')));
    return this.anyString;
  }

  private body(schema: SchemaObject, root: unknown, pointer: string, layout: Layout, allOfDepth = 0): Re {
    for (const key of Object.keys(schema)) {
      if (ANNOTATIONS.has(key) || SUPPORTED.has(key) || key.startsWith("x-")) continue;
      throw new UnsupportedSchemaError(key, pointer);
    }
    const constraining = Object.keys(schema).filter((k) => SUPPORTED.has(k));

    if ("$ref" in schema) {
      const others = constraining.filter((k) => k !== "$ref");
      if (others.length) throw new UnsupportedSchemaError(others[0], pointer, "keywords next to $ref");
      const ref = schema.$ref;
      if (typeof ref !== "string") throw new UnsupportedSchemaError("$ref", pointer, "not a string");
      const target = resolveRef(root, ref, pointer);
      return call(this.rule(target, root, ref.slice(1), layout));
    }
    if ("allOf" in schema) {
      // A merged allOf may bring in another allOf (through $ref, possibly back to itself).
      if (allOfDepth >= MAX_ALLOF_DEPTH) throw new UnsupportedSchemaError("allOf", pointer, `allOf refers back to itself or nests more than ${MAX_ALLOF_DEPTH} levels`);
      return this.body(mergeAllOf(schema, root, pointer), root, pointer, layout, allOfDepth + 1);
    }
    for (const key of ["anyOf", "oneOf"] as const) {
      if (!(key in schema)) continue;
      const branches = schema[key];
      if (!Array.isArray(branches) || branches.length === 0) throw new UnsupportedSchemaError(key, pointer, "must be a non-empty array");
      const siblings = Object.fromEntries(Object.entries(schema).filter(([k]) => k !== key && SUPPORTED.has(k)));
      const combinator = key;
      if ("anyOf" in schema && "oneOf" in schema) throw new UnsupportedSchemaError("oneOf", pointer, "together with anyOf");
      // oneOf is generated like anyOf: outputs are valid when the branches do not overlap, which
      // is how tagged unions (the common use) are written.
      return alt(
        ...branches.map((b, i) => {
          const p = pointerAppend(pointerAppend(pointer, combinator), i);
          const branch = Object.keys(siblings).length ? mergeSchemas(siblings, b, root, p) : b;
          return call(this.rule(branch, root, p, layout));
        }),
      );
    }
    if ("const" in schema || "enum" in schema) return this.literals(schema, pointer, constraining);

    const types = this.types(schema, pointer);
    const parts: Re[] = [];
    for (const t of types) {
      const re = this.typed(t, schema, root, pointer, layout);
      if (re) parts.push(re);
    }
    if (parts.length === 0) {
      const keyword = constraining.find((k) => NUMBER_KEYWORDS.includes(k)) ?? "type";
      throw new UnsupportedSchemaError(keyword, pointer, "no value satisfies the constraints");
    }
    return alt(...parts);
  }

  private literals(schema: SchemaObject, pointer: string, constraining: string[]): Re {
    const extra = constraining.filter((k) => k !== "const" && k !== "enum" && k !== "type");
    if (extra.length) throw new UnsupportedSchemaError(extra[0], pointer, "combined with enum/const");
    let values: unknown[];
    if ("const" in schema) values = [schema.const];
    else if (Array.isArray(schema.enum)) values = schema.enum;
    else throw new UnsupportedSchemaError("enum", pointer, "must be an array");
    if ("const" in schema && "enum" in schema) {
      const c = canonicalJson(schema.const);
      values = (schema.enum as unknown[]).some((v) => canonicalJson(v) === c) ? [schema.const] : [];
    }
    if ("type" in schema) {
      const types = this.types(schema, pointer);
      values = values.filter((v) => types.some((t) => hasType(v, t)));
    }
    if (values.length === 0) throw new UnsupportedSchemaError("enum" in schema ? "enum" : "const", pointer, "no value allowed");
    return alt(...values.map((v) => jsonLit(v)));
  }

  private types(schema: SchemaObject, pointer: string): JsonType[] {
    const t = schema.type;
    if (t === undefined) {
      // Without `type`, a keyword only constrains values of its own type; producing only values of
      // the types the keywords speak about stays within the schema.
      const has = (list: string[]) => list.some((k) => k in schema);
      const inferred: JsonType[] = [];
      if (has(OBJECT_KEYWORDS)) inferred.push("object");
      if (has(ARRAY_KEYWORDS)) inferred.push("array");
      if (has(STRING_KEYWORDS)) inferred.push("string");
      if (has(NUMBER_KEYWORDS)) inferred.push("number");
      return inferred.length ? inferred : [...TYPES].filter((x) => x !== "integer");
    }
    const list = Array.isArray(t) ? t : [t];
    for (const x of list) {
      if (!TYPES.includes(x as JsonType)) throw new UnsupportedSchemaError("type", pointer, `unknown type ${JSON.stringify(x)}`);
    }
    const out = list as JsonType[];
    return out.includes("number") ? out.filter((x) => x !== "integer") : out;
  }

  private typed(t: JsonType, schema: SchemaObject, root: unknown, pointer: string, layout: Layout): Re | null {
    switch (t) {
      case "null":
        return lit("null");
      case "boolean":
        return alt(lit("true"), lit("false"));
      case "integer":
        return integerRe(this.bounds(schema, pointer));
      case "number":
        return numberRe(this.bounds(schema, pointer));
      case "string":
        return this.string(schema, pointer);
      case "object":
        return this.object(schema, root, pointer, layout);
      case "array":
        return this.array(schema, root, pointer, layout);
    }
  }

  private bounds(schema: SchemaObject, pointer: string): NumericBounds {
    const out: Record<string, number> = {};
    for (const k of NUMBER_KEYWORDS) {
      if (!(k in schema)) continue;
      const v = schema[k];
      if (typeof v !== "number" || !Number.isFinite(v)) throw new UnsupportedSchemaError(k, pointer, "must be a finite number");
      out[k] = v;
    }
    return out;
  }

  private string(schema: SchemaObject, pointer: string): Re {
    const minLength = nonNegativeInt(schema, "minLength", pointer) ?? 0;
    const maxLength = nonNegativeInt(schema, "maxLength", pointer) ?? Infinity;
    const parts: Array<[string, () => Re]> = [];
    if ("format" in schema) {
      const f = formatRe(String(schema.format));
      if (!f) {
        throw new UnsupportedSchemaError("format", pointer, `format ${JSON.stringify(schema.format)} (supported: ${SUPPORTED_FORMATS.join(", ")})`);
      }
      parts.push(["format", () => f]);
    }
    if ("pattern" in schema) {
      if (typeof schema.pattern !== "string") throw new UnsupportedSchemaError("pattern", pointer, "must be a string");
      const p = schema.pattern;
      parts.push(["pattern", () => patternToRe(p)]);
    }
    if (minLength > 0 || maxLength !== Infinity) {
      // Counted characters use the short escapes only: same strings, a third fewer states.
      parts.push([maxLength !== Infinity ? "maxLength" : "minLength", () => rep(countedChar(), minLength, maxLength)]);
    }
    const guard = <T>(keyword: string, f: () => T): T => {
      try {
        return f();
      } catch (e) {
        if (e instanceof SchemaLimitError) throw e.at(pointer, keyword);
        if (e instanceof RegexUnsupportedError || e instanceof RangeError) {
          throw new UnsupportedSchemaError(keyword, pointer, e.message);
        }
        throw e;
      }
    };
    if (parts.length === 0) return seq(lit('"'), star(JSON_CHAR), lit('"'));
    // A single constraint goes straight into the rule; several are intersected as DFAs first.
    if (parts.length === 1) return seq(lit('"'), guard(parts[0][0], parts[0][1]), lit('"'));
    let content: RuleDfa | null = null;
    for (const [keyword, make] of parts) {
      const d = guard(keyword, () => compileRe(make()));
      content = content ? intersect(content, d) : d;
      if (content.count === 0) throw new UnsupportedSchemaError(keyword, pointer, "no string satisfies the constraints together");
    }
    return seq(lit('"'), embed(content!), lit('"'));
  }

  private object(schema: SchemaObject, root: unknown, pointer: string, layout: Layout): Re {
    if ("propertyNames" in schema) {
      // Keys are strings anyway: only a propertyNames that says no more than that is accepted.
      const pn = schema.propertyNames;
      const trivial = pn === true || (isObject(pn) && Object.keys(pn).every((k) => ANNOTATIONS.has(k) || (k === "type" && pn.type === "string")));
      if (!trivial) throw new UnsupportedSchemaError("propertyNames", pointer);
    }
    const properties = schema.properties ?? {};
    if (!isObject(properties)) throw new UnsupportedSchemaError("properties", pointer, "must be an object");
    const required = schema.required ?? [];
    if (!Array.isArray(required) || !required.every((r) => typeof r === "string")) {
      throw new UnsupportedSchemaError("required", pointer, "must be an array of strings");
    }
    const additional = schema.additionalProperties;
    const names = Object.keys(properties);
    // Sets: with thousands of properties, list lookups made this quadratic.
    const requiredSet = new Set(required as string[]);
    const nameSet = new Set(names);
    // Absent additionalProperties next to declared properties: only the declared ones are
    // produced (valid either way, and what callers of structured outputs expect).
    const extraSchema: unknown = additional === undefined ? (names.length ? false : true) : additional;
    const entries: Array<{ name: string; schema: unknown; required: boolean; pointer: string }> = names.map((n) => ({
      name: n,
      schema: properties[n],
      required: requiredSet.has(n),
      pointer: pointerAppend(pointerAppend(pointer, "properties"), n),
    }));
    for (const r of requiredSet) {
      if (nameSet.has(r)) continue;
      if (extraSchema === false) throw new UnsupportedSchemaError("required", pointer, `"${r}" is required but not allowed`);
      entries.push({ name: r, schema: extraSchema, required: true, pointer: pointerAppend(pointer, "additionalProperties") });
    }
    const items = (s: Spacing): Re => {
      const member = entries.map((e) => seq(jsonLit(e.name), s.colon, call(this.rule(e.schema, root, e.pointer, s.child))));
      let extra: Re | null = null;
      if (extraSchema !== false) {
        const valueRule = this.rule(extraSchema, root, pointerAppend(pointer, "additionalProperties"), s.child);
        extra = seq(call(this.extraKeyRule(entries.map((e) => e.name))), s.colon, call(valueRule));
      }
      return members(member, entries.map((e) => e.required), extra, s.sep, true);
    };
    const possible = entries.length > 0 || extraSchema !== false;
    return container(layout, "{", possible ? items : null, entries.every((e) => !e.required));
  }

  /**
   * A quoted key differing from every declared name (escapes are not produced, so no other
   * spelling of a declared name can slip through). Its own rule: key contents then have a small
   * automaton of their own, whose token masks are shared by every object and grammar.
   */
  private extraKeyRule(declared: string[]): number {
    const key = JSON.stringify([...declared].sort());
    let id = this.keyRules.get(key);
    if (id === undefined) {
      let content: Re = star(PLAIN_JSON_CHAR);
      if (declared.length) {
        const names = compileRe(alt(...declared.map((n) => lit(JSON.stringify(n).slice(1, -1)))));
        content = embed(intersect(compileRe(content), complement(names)));
      }
      id = this.builder.add(seq(lit('"'), content, lit('"')));
      this.keyRules.set(key, id);
    }
    return id;
  }

  private array(schema: SchemaObject, root: unknown, pointer: string, layout: Layout): Re {
    // Draft 2019 and earlier spell tuples as an items array plus additionalItems.
    const legacyTuple = Array.isArray(schema.items);
    if (legacyTuple && "prefixItems" in schema) throw new UnsupportedSchemaError("items", pointer, "an items array next to prefixItems");
    if (!legacyTuple && "additionalItems" in schema) throw new UnsupportedSchemaError("additionalItems", pointer, "without an items array");
    const prefix = legacyTuple ? (schema.items as unknown[]) : (schema.prefixItems ?? []);
    if (!Array.isArray(prefix)) throw new UnsupportedSchemaError("prefixItems", pointer, "must be an array");
    const items = legacyTuple ? schema.additionalItems : schema.items;
    const n = prefix.length;
    const min = nonNegativeInt(schema, "minItems", pointer) ?? 0;
    let max = nonNegativeInt(schema, "maxItems", pointer) ?? Infinity;
    // Items past prefixItems: `items: false` forbids them, an absent `items` allows any value but
    // we produce none unless minItems needs them.
    const extraSchema: unknown = items === false ? null : items === undefined ? (n === 0 || min > n ? true : null) : items;
    if (extraSchema === null) max = Math.min(max, n);
    if (min > max) throw new UnsupportedSchemaError("minItems", pointer, "no array length satisfies the constraints");
    if (Math.max(min, n) > 1024 || (max !== Infinity && max > 1024)) {
      if (max !== Infinity && max > 1024 && min <= 1024) max = Infinity;
      else throw new UnsupportedSchemaError("minItems", pointer, "more than 1024 items");
    }
    const prefixKey = legacyTuple ? "items" : "prefixItems";
    const contents = (s: Spacing): Re => {
      const prefixRules = prefix.map((p, i) => this.rule(p, root, pointerAppend(pointerAppend(pointer, prefixKey), i), s.child));
      const extraRule = extraSchema === null ? -1 : this.rule(extraSchema, root, pointerAppend(pointer, legacyTuple ? "additionalItems" : "items"), s.child);
      const element = (i: number): Re => call(i < n ? prefixRules[i] : extraRule);
      const tail = (i: number): Re => {
        if (i >= max) return EMPTY;
        if (i >= n && i >= min) return rep(seq(s.sep, element(i)), 0, max - i);
        const item = seq(s.sep, element(i), tail(i + 1));
        return i < min ? item : opt(item);
      };
      return seq(element(0), tail(1));
    };
    return container(layout, "[", max === 0 ? null : contents, min === 0);
  }
}

let countedCharDfa: Re | undefined;
/**
 * One counted character as a minimized DFA: repeated per position, it costs a handful of states
 * instead of one per UTF-8 lead-byte range and escape form.
 */
function countedChar(): Re {
  countedCharDfa ??= embed(compileRe(COUNTED_CHAR));
  return countedCharDfa;
}

/**
 * Whether values of `schema` may be objects or arrays, whose whitespace depends on the layout
 * (references and combinators are taken as possibly so; their targets decide for themselves).
 */
function mayHoldContainer(schema: SchemaObject): boolean {
  if ("$ref" in schema || "allOf" in schema || "anyOf" in schema || "oneOf" in schema) return true;
  if ("const" in schema || "enum" in schema) return false;
  const t = schema.type;
  if (t === undefined) {
    const has = (list: string[]) => list.some((k) => k in schema);
    if (has(OBJECT_KEYWORDS) || has(ARRAY_KEYWORDS)) return true;
    return !(has(STRING_KEYWORDS) || has(NUMBER_KEYWORDS));
  }
  const list = Array.isArray(t) ? t : [t];
  return list.includes("object") || list.includes("array");
}

function nonNegativeInt(schema: SchemaObject, key: string, pointer: string): number | undefined {
  if (!(key in schema)) return undefined;
  const v = schema[key];
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0) throw new UnsupportedSchemaError(key, pointer, "must be a non-negative integer");
  return v;
}

function hasType(v: unknown, t: JsonType): boolean {
  switch (t) {
    case "null":
      return v === null;
    case "boolean":
      return typeof v === "boolean";
    case "integer":
      return typeof v === "number" && Number.isInteger(v);
    case "number":
      return typeof v === "number";
    case "string":
      return typeof v === "string";
    case "array":
      return Array.isArray(v);
    case "object":
      return isObject(v);
  }
}

function resolveRef(root: unknown, ref: string, pointer: string): unknown {
  if (!ref.startsWith("#")) throw new UnsupportedSchemaError("$ref", pointer, `only local references ("#/...") are supported, got ${ref}`);
  let node: unknown = root;
  const path = ref.slice(1);
  if (path === "") return root;
  if (!path.startsWith("/")) throw new UnsupportedSchemaError("$ref", pointer, `anchors are not supported: ${ref}`);
  for (const raw of path.slice(1).split("/")) {
    const token = decodeURIComponent(raw).replace(/~1/g, "/").replace(/~0/g, "~");
    if (Array.isArray(node)) node = node[Number(token)];
    else if (isObject(node)) node = node[token];
    else node = undefined;
    if (node === undefined) throw new UnsupportedSchemaError("$ref", pointer, `unresolvable reference ${ref}`);
  }
  return node;
}

/** allOf folded into its parent: conjunction of keywords, refused where two keywords collide. */
function mergeAllOf(schema: SchemaObject, root: unknown, pointer: string): SchemaObject {
  const all = schema.allOf;
  if (!Array.isArray(all)) throw new UnsupportedSchemaError("allOf", pointer, "must be an array");
  let merged: SchemaObject = Object.fromEntries(Object.entries(schema).filter(([k]) => k !== "allOf"));
  all.forEach((sub, i) => {
    merged = mergeSchemas(merged, sub, root, pointerAppend(pointerAppend(pointer, "allOf"), i));
  });
  return merged;
}

function mergeSchemas(a: SchemaObject, bIn: unknown, root: unknown, pointer: string): SchemaObject {
  let b = bIn;
  const seen = new Set<unknown>();
  while (isObject(b) && typeof b.$ref === "string" && Object.keys(b).every((k) => k === "$ref" || ANNOTATIONS.has(k))) {
    if (seen.has(b)) throw new UnsupportedSchemaError("$ref", pointer, "reference cycle");
    seen.add(b);
    b = resolveRef(root, b.$ref, pointer);
  }
  if (b === true) return a;
  if (!isObject(b)) throw new UnsupportedSchemaError("allOf", pointer, "cannot combine with a boolean false schema");
  const out: Record<string, unknown> = { ...a };
  for (const [k, v] of Object.entries(b)) {
    if (ANNOTATIONS.has(k)) continue;
    if (!(k in out)) {
      out[k] = v;
      continue;
    }
    if (k === "required" && Array.isArray(v) && Array.isArray(out[k])) {
      out[k] = [...new Set([...(out[k] as unknown[]), ...v])];
    } else if (k === "properties" && isObject(v) && isObject(out[k])) {
      const left = out[k] as SchemaObject;
      for (const p of Object.keys(v)) {
        if (p in left && canonicalJson(left[p]) !== canonicalJson(v[p])) {
          throw new UnsupportedSchemaError("allOf", pointer, `property "${p}" constrained twice`);
        }
      }
      out[k] = { ...left, ...v };
    } else if (canonicalJson(out[k]) !== canonicalJson(v)) {
      throw new UnsupportedSchemaError("allOf", pointer, `keyword "${k}" appears in more than one combined schema`);
    }
  }
  // additionalProperties is relative to the properties next to it; combining it with properties
  // from another schema would change its meaning.
  if ("additionalProperties" in out && out.additionalProperties !== true) {
    const pa = Object.keys((a.properties as SchemaObject | undefined) ?? {}).sort().join();
    const pb = Object.keys(((b as SchemaObject).properties as SchemaObject | undefined) ?? {}).sort().join();
    const hasA = "additionalProperties" in a;
    const hasB = "additionalProperties" in (b as SchemaObject);
    if ((hasA && !hasB && pb && pb !== pa) || (hasB && !hasA && pa && pa !== pb)) {
      throw new UnsupportedSchemaError("additionalProperties", pointer, "combined with properties of another schema");
    }
  }
  return out;
}
