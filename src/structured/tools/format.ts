// What a tool-call format is, as data: how a chat template shows it, which control tokens its
// calls use, how a completion in it is parsed (streamed), what grammar forces a call in it, and
// what its template needs from the conversation. One module per family under formats/.

import type { FunctionTool } from "../../protocol/chat.ts";
import type { ToolFormatName } from "../../protocol/tools.ts";
import type { Re } from "../automaton.ts";
import type { GrammarBuilder } from "../grammar.ts";
import type { Layout } from "../layout.ts";
import type { SchemaCompiler } from "../schema.ts";

export type ToolStreamEvent =
  | { readonly type: "content"; readonly text: string }
  | { readonly type: "tool_call"; readonly index: number; readonly name?: string; readonly argumentsDelta: string };

/** Text pieces in, content deltas and tool-call deltas (name first, then argument fragments) out. */
export interface ToolCallParser {
  push(text: string): ToolStreamEvent[];
  /** End of generation: whatever is still held back is resolved. */
  finish(): ToolStreamEvent[];
}

/** What a format's grammar is built from (grammar.ts fills it in for one request). */
export interface ToolGrammarContext {
  /** The tools a call may name (only the named one for a named tool_choice). */
  readonly tools: readonly FunctionTool[];
  /** More than one call allowed. */
  readonly parallel: boolean;
  readonly builder: GrammarBuilder;
  readonly compiler: SchemaCompiler;
  /** Tool i's arguments (its parameters schema) laid out as `layout` (from the root by default). */
  argsRe(i: number, layout?: Layout): Re;
  /** `{"name": <a tool>, "<argsKey>": <its arguments>}` laid out as `layout` ("arguments" by default). */
  jsonCallRe(layout: Layout, argsKey?: string): Re;
  /** A JSON list of such calls (one item unless parallel), laid out as `layout` (the root by default). */
  jsonCallList(layout?: Layout): Re;
  /** `one`, or with parallel calls `one (sep one)*`. */
  repeat(one: Re, sep: Re): Re;
  /** Free text that does not contain any of `markers` (and does not start with `forbiddenStart`). */
  textWithout(markers: readonly string[], forbiddenStart?: Re): Re;
}

export interface ToolGrammarParts {
  /** One or more calls, as the model writes them. */
  calls: Re;
  /**
   * With tool_choice auto and strict tools: what may be written instead of or before calls.
   * "text-then-calls": free text, then optionally calls; "text-or-calls": one or the other.
   */
  auto: { text: Re; order: "text-then-calls" | "text-or-calls" } | { whole: Re };
}

/** What the chat template needs from the conversation to render this format's history. */
export interface RenderHints {
  /** Tool-call arguments go to the template as the JSON text, not a mapping (DeepSeek concatenates them). */
  readonly argumentsAsText?: boolean;
  /** An assistant turn with tool calls keeps content null (DeepSeek's template tests `content is none`). */
  readonly nullContentWithCalls?: boolean;
  /** The call ids the family's template writes and its model was trained on (Kimi's `functions.NAME:INDEX`). */
  readonly callId?: (name: string, index: number) => string;
  /** The tools go to the template as the system message's `tools` field, as JSON text (Phi-4-mini). */
  readonly toolsInSystemMessage?: boolean;
}

/** A call as the history holds it: the name and the arguments' JSON text. */
export interface WrittenCall {
  readonly name: string;
  readonly arguments: string;
}

export interface ToolFormat {
  readonly name: ToolFormatName;
  /** Whether a chat template renders calls in this format. */
  detect(template: string): boolean;
  /** Control tokens its calls contain: the grammar must be able to produce them as text. */
  readonly controlTokens: readonly string[];
  /**
   * The end-of-turn token that ends a turn of calls (harmony's `<|call|>`, which is also one of the
   * model's stop tokens): under a grammar the engine allows no other stop token once a call has
   * begun, and not this one before.
   */
  readonly callEnd?: string;
  /** The answer is held to the grammar even for tool_choice auto without strict tools (json_envelope). */
  readonly alwaysConstrained?: boolean;
  parser(tools: readonly FunctionTool[]): ToolCallParser;
  grammar(ctx: ToolGrammarContext): ToolGrammarParts;
  readonly render: RenderHints;
  /**
   * How tools are described to the model when its template does not render `tools` itself (the
   * text goes at the end of the system turn), written as the family's own prompts describe them.
   */
  describeTools(tools: readonly FunctionTool[]): string;
  /** The calls as the model writes them (for templates that do not render an assistant's tool_calls). */
  writeCalls(calls: readonly WrittenCall[]): string;
}
