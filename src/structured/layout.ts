// The whitespace a generated JSON document may contain. A model with no opinion about JSON (or a
// sampler at temperature 1) spends whatever the grammar lets it spend: with "up to N whitespace
// bytes between any two tokens" most of a tight budget went on blanks before, inside and after
// the document. So whitespace is bounded by the document's structure instead:
//
// - nothing before the root value and nothing after it: the document ends and the model may only
//   stop;
// - between tokens only: nothing; one space after ':' and ','; or, in a pretty-printed document, a
//   newline followed by exactly the indentation of the current depth (after '{' '[' ',' and before
//   '}' ']', where pretty-printers put them);
// - a document is pretty-printed when a newline follows its root's opening bracket; that newline
//   fixes the indent unit (two spaces, four spaces or a tab) for the whole document. Otherwise it
//   is flat (no newline anywhere). Past INDENT_DEPTH levels values are written flat.
//
// Both the compact form ({"a": 1, "b": [1, 2]}) and the usual pretty-printed forms (JSON.stringify
// with an indent, Python's json.dumps(indent=...), short arrays kept on one line) stay open, and a
// document's whitespace is at most one newline and its indentation per token.
//
// How others bound it, and why not theirs:
// - llama.cpp's json-schema-to-grammar SPACE_RULE, `| " " | "\n"{1,2} [ \t]{0,20}` after every
//   token: up to 22 bytes per gap whatever the depth, so a model can still put ~20 blanks between
//   every pair of tokens (and before and after the document), which is the budget-eating output
//   this replaces (we had the same: 20 whitespace bytes per gap).
// - XGrammar's any_whitespace (the default, `[ \n\t]*` between tokens, optionally capped per gap
//   by max_whitespace_cnt): the cap bounds one gap, not the document; with any_whitespace=false it
//   imposes one exact indent and separators chosen up front by the caller, so a model trained on
//   the other style is pushed off its distribution.
// - Outlines' whitespace_pattern (default `[ ]?`, documented advice `""` for small models after
//   `[\n ]*` let models loop): a single optional space is bounded but closes pretty-printing to
//   models trained on it; a wider pattern is unbounded again.
// Tying newlines to indentation by depth keeps both styles a model may have learnt while the total
// stays proportional to the structure, and the shortest document (what the token budget must
// cover, see completion-budget.ts) is the compact one.

import { alt, EMPTY, lit, opt, type Re, seq } from "./automaton.ts";

/** Indent units a pretty-printed document may use (chosen by its first newline). */
export const INDENT_UNITS = ["  ", "    ", "\t"] as const;

/** Nesting depth up to which pretty-printing is followed; deeper containers are written flat. */
export const INDENT_DEPTH = 8;

export type Layout =
  /** The document's root value: flat, or pretty-printed from a newline after its opening bracket. */
  | { readonly kind: "root" }
  /** No newlines: nothing or one space after ':' and ','. */
  | { readonly kind: "flat" }
  /** A value at nesting `depth` of a document indented by INDENT_UNITS[unit]. */
  | { readonly kind: "indented"; readonly unit: number; readonly depth: number };

export const ROOT: Layout = { kind: "root" };
export const FLAT: Layout = { kind: "flat" };

/** Distinct for distinct layouts: rules are compiled once per (schema, layout). */
export function layoutKey(l: Layout): string {
  return l.kind === "root" ? "r" : l.kind === "flat" ? "f" : `i${l.unit}.${l.depth}`;
}

/** The whitespace of one container laid out in a given way, and how its items are laid out. */
export interface Spacing {
  /** After the opening bracket of a non-empty container. */
  readonly open: Re;
  /** A comma between items and what may follow it. */
  readonly sep: Re;
  /** The colon after a key and what may follow it. */
  readonly colon: Re;
  /** Before the closing bracket of a non-empty container. */
  readonly close: Re;
  /** Between the brackets of an empty container. */
  readonly empty: Re;
  /** Layout of the values inside. */
  readonly child: Layout;
}

const COLON = seq(lit(":"), opt(lit(" ")));
const FLAT_SPACING: Spacing = { open: EMPTY, sep: seq(lit(","), opt(lit(" "))), colon: COLON, close: EMPTY, empty: EMPTY, child: FLAT };

const indentCache = new Map<string, Spacing>();
function indented(unit: number, depth: number): Spacing {
  const key = `${unit}.${depth}`;
  let s = indentCache.get(key);
  if (!s) {
    const u = INDENT_UNITS[unit];
    const inner = lit(`\n${u.repeat(depth + 1)}`);
    const outer = lit(`\n${u.repeat(depth)}`);
    const child: Layout = depth + 1 < INDENT_DEPTH ? { kind: "indented", unit, depth: depth + 1 } : FLAT;
    s = { open: opt(inner), sep: seq(lit(","), opt(alt(lit(" "), inner))), colon: COLON, close: opt(outer), empty: opt(outer), child };
    indentCache.set(key, s);
  }
  return s;
}

/**
 * A JSON container (object or array) laid out as `layout`. `items` gives the non-empty contents
 * for a spacing (null when the container can only be empty); `canBeEmpty` allows no items.
 * At the root, the flat form and one pretty-printed form per indent unit are alternatives inside
 * one rule: they part at the byte after the opening bracket, so the parser never carries them
 * side by side.
 */
export function container(layout: Layout, open: "{" | "[", items: ((s: Spacing) => Re) | null, canBeEmpty: boolean): Re {
  const close = open === "{" ? "}" : "]";
  const one = (s: Spacing, newlineFirst: Re | null): Re => {
    if (!items) return seq(lit(open), s.empty, lit(close));
    const full = seq(newlineFirst ?? s.open, items(s), s.close);
    return seq(lit(open), canBeEmpty && !newlineFirst ? alt(full, s.empty) : full, lit(close));
  };
  if (layout.kind === "flat") return one(FLAT_SPACING, null);
  if (layout.kind === "indented") return one(indented(layout.unit, layout.depth), null);
  const variants = [one(FLAT_SPACING, null)];
  if (items) INDENT_UNITS.forEach((u, unit) => variants.push(one(indented(unit, 0), lit(`\n${u}`))));
  return alt(...variants);
}
