// Grammars that make a model's tool calls parse: each format's framing (formats/) around
// {"name": <one of the tools>, "arguments": <that tool's parameters schema>} or its own spelling
// of name and arguments.

import type { FunctionTool, ToolChoice } from "../../protocol/chat.ts";
import type { ToolFormatName } from "../../protocol/tools.ts";
import { alt, call, charSet, compileRe, complement, embed, intersect, lit, opt, type Re, seq, star } from "../automaton.ts";
import { canonicalJson } from "../canonical.ts";
import { cached } from "../compile.ts";
import { UnsupportedSchemaError } from "../errors.ts";
import { type Grammar, GrammarBuilder } from "../grammar.ts";
import { checkProgress } from "../left-recursion.ts";
import { container, type Layout, layoutKey, ROOT } from "../layout.ts";
import { SchemaCompiler } from "../schema.ts";
import { MAX_CODE_POINT, utf8Sequences } from "../utf8.ts";
import type { ToolGrammarContext } from "./format.ts";
import { toolFormat } from "./formats/index.ts";

export interface ToolGrammarRequest {
  readonly tools: readonly FunctionTool[];
  readonly toolChoice?: ToolChoice;
  /** The model's tool-call format. */
  readonly syntax: ToolFormatName;
  /** More than one call allowed (OpenAI's parallel_tool_calls, default true). */
  readonly parallelToolCalls?: boolean;
}

const ANY_UTF8_CHAR: Re = charSet(utf8Sequences(0, MAX_CODE_POINT));
const ANY_BYTE: Re = { k: "set", seqs: [[[0, 255]]] };

/** Free text that does not contain `marker` (so a call can only start as a real call). */
function textWithout(markers: readonly string[], forbiddenStart?: Re): Re {
  let d = compileRe(star(ANY_UTF8_CHAR));
  for (const m of markers) d = intersect(d, complement(compileRe(seq(star(ANY_BYTE), lit(m), star(ANY_BYTE)))));
  if (forbiddenStart) d = intersect(d, complement(compileRe(seq(forbiddenStart, star(ANY_BYTE)))));
  return embed(d);
}

/**
 * The grammar for the request's tool calls, or null when no constraint applies (tool_choice
 * "none", or "auto" without strict tools in a format that leaves free text free). "required"
 * and a named function force a call; "auto" with strict tools allows an answer or calls whose
 * arguments match the schemas. Throws UnsupportedSchemaError for a strict or forced tool whose
 * schema cannot be enforced.
 */
export function toolCallGrammar(req: ToolGrammarRequest): Grammar | null {
  const choice = req.toolChoice ?? "auto";
  if (choice === "none" || req.tools.length === 0) return null;
  const format = toolFormat(req.syntax);
  if (!format) throw new UnsupportedSchemaError("tools", "", `no tool-call format named ${JSON.stringify(req.syntax)}`);
  let tools = req.tools;
  if (typeof choice === "object") {
    tools = req.tools.filter((t) => t.function.name === choice.function.name);
    if (tools.length === 0) throw new UnsupportedSchemaError("tool_choice", "", `no tool named ${JSON.stringify(choice.function.name)}`);
  }
  const auto = choice === "auto";
  if (auto && !format.alwaysConstrained && !tools.some((t) => t.function.strict === true)) return null;
  const parallel = (req.parallelToolCalls ?? true) && typeof choice !== "object";
  const key = `tools:${req.syntax}:${canonicalJson(choice)}:${parallel}:${canonicalJson(tools)}`;
  return cached(key, () => {
    const builder = new GrammarBuilder();
    const compiler = new SchemaCompiler(builder);
    const parts = format.grammar(context(tools, parallel, builder, compiler));
    let root: Re;
    if (!auto) root = parts.calls;
    else if ("whole" in parts.auto) root = parts.auto.whole;
    else if (parts.auto.order === "text-or-calls") root = alt(parts.calls, parts.auto.text);
    else root = seq(parts.auto.text, opt(parts.calls));
    const grammar = builder.build(builder.add(root), key);
    checkProgress(grammar, (r) => compiler.pointers[r]);
    return grammar;
  });
}

function context(tools: readonly FunctionTool[], parallel: boolean, builder: GrammarBuilder, compiler: SchemaCompiler): ToolGrammarContext {
  const argRules = new Map<string, number>();
  const args = (i: number, layout: Layout): number => {
    const k = `${i}:${layoutKey(layout)}`;
    let id = argRules.get(k);
    if (id !== undefined) return id;
    const t = tools[i]!;
    const params = t.function.parameters ?? { type: "object" };
    try {
      id = compiler.rule(params, params, `/tools/${i}/function/parameters`, layout);
    } catch (e) {
      // A non-strict tool is not promised schema-valid arguments: any object keeps the call parseable.
      if (!(e instanceof UnsupportedSchemaError) || t.function.strict === true) throw e;
      id = compiler.anyObjectRule(layout);
    }
    argRules.set(k, id);
    return id;
  };
  // {"name": <tool>, "arguments": <its parameters>}: a JSON object like any other, with the same
  // whitespace policy (layout.ts) as response formats; one rule per layout it stands in.
  const fnRules = new Map<string, number>();
  const jsonCall = (layout: Layout, argsKey: string): number => {
    const k = `${argsKey}:${layoutKey(layout)}`;
    let id = fnRules.get(k);
    if (id === undefined) {
      const calls = tools.map((t, i) =>
        container(layout, "{", (s) => seq(lit('"name"'), s.colon, lit(JSON.stringify(t.function.name)), s.sep, lit(`"${argsKey}"`), s.colon, call(args(i, s.child))), false),
      );
      id = builder.add(alt(...calls));
      fnRules.set(k, id);
    }
    return id;
  };
  const repeat = (one: Re, sep: Re): Re => (parallel ? seq(one, star(seq(sep, one))) : one);
  return {
    tools,
    parallel,
    builder,
    compiler,
    argsRe: (i, layout = ROOT) => call(args(i, layout)),
    jsonCallRe: (layout, argsKey = "arguments") => call(jsonCall(layout, argsKey)),
    // The call list is a JSON array: its calls are laid out as its items.
    jsonCallList: (layout = ROOT) =>
      call(builder.add(container(layout, "[", (s) => repeat(call(jsonCall(s.child, "arguments")), s.sep), false))),
    repeat,
    textWithout,
  };
}
