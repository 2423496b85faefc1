// Grammars that make a model's tool calls parse: the syntax's markers around
// {"name": <one of the tools>, "arguments": <that tool's parameters schema>}.

import type { FunctionTool, ToolChoice } from "../../protocol/chat.ts";
import { alt, call, charSet, compileRe, complement, embed, intersect, lit, opt, type Re, seq, star } from "../automaton.ts";
import { canonicalJson } from "../canonical.ts";
import { cached } from "../compile.ts";
import { UnsupportedSchemaError } from "../errors.ts";
import { type Grammar, GrammarBuilder } from "../grammar.ts";
import { checkProgress } from "../left-recursion.ts";
import { WS_BYTES } from "../json-text.ts";
import { container, type Layout, layoutKey, ROOT } from "../layout.ts";
import { SchemaCompiler } from "../schema.ts";
import { MAX_CODE_POINT, utf8Sequences } from "../utf8.ts";
import { HERMES_END, START_MARKERS, type ToolCallSyntax } from "./syntax.ts";

export interface ToolGrammarRequest {
  readonly tools: readonly FunctionTool[];
  readonly toolChoice?: ToolChoice;
  readonly syntax: ToolCallSyntax;
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
 * "none", or "auto" without strict tools). "required" and a named function force a call;
 * "auto" with strict tools allows free text or calls whose arguments match the schemas.
 * Throws UnsupportedSchemaError for a strict or forced tool whose schema cannot be enforced.
 */
export function toolCallGrammar(req: ToolGrammarRequest): Grammar | null {
  const choice = req.toolChoice ?? "auto";
  if (choice === "none" || req.tools.length === 0) return null;
  let tools = req.tools;
  if (typeof choice === "object") {
    tools = req.tools.filter((t) => t.function.name === choice.function.name);
    if (tools.length === 0) throw new UnsupportedSchemaError("tool_choice", "", `no tool named ${JSON.stringify(choice.function.name)}`);
  }
  const strictOnly = choice === "auto";
  if (strictOnly && !tools.some((t) => t.function.strict === true)) return null;
  const parallel = (req.parallelToolCalls ?? true) && typeof choice !== "object";
  const key = `tools:${req.syntax}:${canonicalJson(choice)}:${parallel}:${canonicalJson(tools)}`;
  return cached(key, () => build(tools, req.syntax, choice === "auto" ? "auto" : "forced", parallel, key));
}

function build(
  tools: readonly FunctionTool[],
  syntax: ToolCallSyntax,
  mode: "auto" | "forced",
  parallel: boolean,
  key: string,
): Grammar {
  const builder = new GrammarBuilder();
  const compiler = new SchemaCompiler(builder);
  const argsKey = syntax === "llama3" ? "parameters" : "arguments";
  const args = (i: number, layout: Layout): number => {
    const t = tools[i];
    const params = t.function.parameters ?? { type: "object" };
    try {
      return compiler.rule(params, params, `/tools/${i}/function/parameters`, layout);
    } catch (e) {
      // A non-strict tool is not promised schema-valid arguments: any object keeps the call parseable.
      if (!(e instanceof UnsupportedSchemaError) || t.function.strict === true) throw e;
      return compiler.anyObjectRule(layout);
    }
  };
  // {"name": <tool>, "arguments": <its parameters>}: a JSON object like any other, with the same
  // whitespace policy (layout.ts) as response formats; one rule per layout it stands in.
  const fnRules = new Map<string, number>();
  const fn = (layout: Layout): number => {
    let id = fnRules.get(layoutKey(layout));
    if (id === undefined) {
      const calls = tools.map((t, i) =>
        container(layout, "{", (s) => seq(lit('"name"'), s.colon, lit(JSON.stringify(t.function.name)), s.sep, lit(`"${argsKey}"`), s.colon, call(args(i, s.child))), false),
      );
      id = builder.add(alt(...calls));
      fnRules.set(layoutKey(layout), id);
    }
    return id;
  };
  let callsRe: Re;
  let text: Re;
  switch (syntax) {
    case "hermes": {
      const one = seq(lit(START_MARKERS.hermes[0]), lit("\n"), call(fn(ROOT)), lit("\n"), lit(HERMES_END));
      callsRe = parallel ? seq(one, star(seq(lit("\n"), one))) : one;
      text = textWithout(START_MARKERS.hermes);
      break;
    }
    case "mistral": {
      // The call list is a JSON array: its calls are laid out as its items.
      const list = builder.add(container(ROOT, "[", (s) => (parallel ? seq(call(fn(s.child)), star(seq(s.sep, call(fn(s.child))))) : call(fn(s.child))), false));
      callsRe = seq(lit(START_MARKERS.mistral[0]), call(list));
      text = textWithout(START_MARKERS.mistral);
      break;
    }
    case "llama3": {
      // Each call is a document of its own; between two, a semicolon with at most one blank either side.
      const between = seq(opt(lit(" ")), lit(";"), opt(alt(lit(" "), lit("\n"))));
      callsRe = parallel ? seq(call(fn(ROOT)), star(seq(between, call(fn(ROOT))))) : call(fn(ROOT));
      // Free text must not open like a call (a leading "{" after whitespace).
      text = textWithout(START_MARKERS.llama3, seq(star(WS_BYTES), lit("{")));
      break;
    }
  }
  let root: Re;
  if (mode === "forced") root = callsRe;
  else if (syntax === "llama3") root = alt(callsRe, text);
  else root = seq(text, opt(callsRe));
  const grammar = builder.build(builder.add(root), key);
  checkProgress(grammar, (r) => compiler.pointers[r]);
  return grammar;
}
