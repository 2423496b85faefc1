import { ToolCallStreamParser, type ToolStreamEvent } from "./stream.ts";
import type { ToolCallSyntax } from "./syntax.ts";

export interface ParsedToolCall {
  name: string;
  /** The arguments as the model wrote them (JSON text). */
  arguments: string;
}

export interface ParsedCompletion {
  content: string;
  toolCalls: ParsedToolCall[];
}

/** Folds stream events into the whole result. */
export function assemble(events: Iterable<ToolStreamEvent>): ParsedCompletion {
  let content = "";
  const toolCalls: ParsedToolCall[] = [];
  for (const e of events) {
    if (e.type === "content") content += e.text;
    else {
      if (e.name !== undefined) toolCalls[e.index] = { name: e.name, arguments: "" };
      toolCalls[e.index].arguments += e.argumentsDelta;
    }
  }
  return { content, toolCalls };
}

/**
 * Splits a whole completion into content and tool calls. It runs the streaming parser over the
 * text in one piece, so a streamed response always adds up to exactly this result. Never throws
 * on malformed calls: they stay in the content.
 */
export function parseToolCalls(text: string, syntax: ToolCallSyntax): ParsedCompletion {
  const p = new ToolCallStreamParser(syntax);
  return assemble([...p.push(text), ...p.finish()]);
}
