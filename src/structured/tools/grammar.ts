// Grammars that make a model's tool calls parse: the syntax's markers around
// {"name": <one of the tools>, "arguments": <that tool's parameters schema>}.

import type { FunctionTool, ToolChoice } from "../../engine/types.ts";
import { alt, call, charSet, compileRe, complement, embed, intersect, lit, opt, type Re, seq, star } from "../automaton.ts";
import { canonicalJson } from "../canonical.ts";
import { cached } from "../compile.ts";
import { UnsupportedSchemaError } from "../errors.ts";
import { type Grammar, GrammarBuilder } from "../grammar.ts";
import { checkProgress } from "../left-recursion.ts";
import { WS_BYTES, ws } from "../json-text.ts";
import { DEFAULT_OPTIONS, SchemaCompiler } from "../schema.ts";
import { MAX_CODE_POINT, utf8Sequences } from "../utf8.ts";
import { HERMES_END, START_MARKERS, type ToolCallSyntax } from "./syntax.ts";

export interface ToolGrammarRequest {
  readonly tools: readonly FunctionTool[];
  readonly toolChoice?: ToolChoice;
  readonly syntax: ToolCallSyntax;
  /** More than one call allowed (OpenAI's parallel_tool_calls, default true). */
  readonly parallelToolCalls?: boolean;
  readonly maxWhitespace?: number;
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
  const maxWs = req.maxWhitespace ?? DEFAULT_OPTIONS.maxWhitespace;
  const key = `tools:${req.syntax}:${canonicalJson(choice)}:${parallel}:${maxWs}:${canonicalJson(tools)}`;
  return cached(key, () => build(tools, req.syntax, choice === "auto" ? "auto" : "forced", parallel, maxWs, key));
}

function build(
  tools: readonly FunctionTool[],
  syntax: ToolCallSyntax,
  mode: "auto" | "forced",
  parallel: boolean,
  maxWs: number,
  key: string,
): Grammar {
  const builder = new GrammarBuilder();
  const compiler = new SchemaCompiler(builder, { maxWhitespace: maxWs });
  const w = ws(maxWs);
  const argsKey = syntax === "llama3" ? "parameters" : "arguments";
  const calls: Re[] = tools.map((t, i) => {
    const params = t.function.parameters ?? { type: "object" };
    let rule: number;
    try {
      rule = compiler.rule(params, params, `/tools/${i}/function/parameters`);
    } catch (e) {
      // A non-strict tool is not promised schema-valid arguments: any object keeps the call parseable.
      if (!(e instanceof UnsupportedSchemaError) || t.function.strict === true) throw e;
      rule = compiler.anyObjectRule();
    }
    return seq(lit("{"), w, lit('"name"'), w, lit(":"), w, lit(JSON.stringify(t.function.name)), w, lit(","), w, lit(`"${argsKey}"`), w, lit(":"), w, call(rule), w, lit("}"));
  });
  const fn = builder.add(alt(...calls));
  let callsRe: Re;
  let text: Re;
  switch (syntax) {
    case "hermes": {
      const one = seq(lit(START_MARKERS.hermes[0]), lit("\n"), call(fn), lit("\n"), lit(HERMES_END));
      callsRe = parallel ? seq(one, star(seq(lit("\n"), one))) : one;
      text = textWithout(START_MARKERS.hermes);
      break;
    }
    case "mistral": {
      const list = parallel ? seq(call(fn), star(seq(w, lit(","), w, call(fn)))) : call(fn);
      callsRe = seq(lit(START_MARKERS.mistral[0]), lit("["), list, lit("]"));
      text = textWithout(START_MARKERS.mistral);
      break;
    }
    case "llama3": {
      callsRe = parallel ? seq(call(fn), star(seq(w, lit(";"), w, call(fn)))) : call(fn);
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
