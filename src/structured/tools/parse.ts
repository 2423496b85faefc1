import type { FunctionTool } from "../../protocol/chat.ts";
import type { ToolFormatName } from "../../protocol/tools.ts";
import type { ToolCallParser, ToolStreamEvent } from "./format.ts";
import { toolFormat } from "./formats/index.ts";

export interface ParsedToolCall {
  name: string;
  /** The arguments as the model wrote them (JSON text). */
  arguments: string;
}

export interface ParsedCompletion {
  content: string;
  toolCalls: ParsedToolCall[];
}

/** Streams one completion's text through its format's parser (content and call deltas out). */
export class ToolCallStreamParser implements ToolCallParser {
  private readonly inner: ToolCallParser;

  constructor(
    readonly syntax: ToolFormatName,
    /** The request's tools (formats that spell arguments their own way read the schemas). */
    tools: readonly FunctionTool[] = [],
  ) {
    const format = toolFormat(syntax);
    if (!format) throw new Error(`no tool-call format named ${syntax}`);
    this.inner = format.parser(tools);
  }

  push(text: string): ToolStreamEvent[] {
    return this.inner.push(text);
  }

  finish(): ToolStreamEvent[] {
    return this.inner.finish();
  }
}

/** Folds stream events into the whole result. */
export function assemble(events: Iterable<ToolStreamEvent>): ParsedCompletion {
  let content = "";
  const toolCalls: ParsedToolCall[] = [];
  for (const e of events) {
    if (e.type === "content") content += e.text;
    else {
      if (e.name !== undefined) toolCalls[e.index] = { name: e.name, arguments: "" };
      toolCalls[e.index]!.arguments += e.argumentsDelta;
    }
  }
  return { content, toolCalls };
}

/**
 * Splits a whole completion into content and tool calls. It runs the streaming parser over the
 * text in one piece, so a streamed response always adds up to exactly this result. Never throws
 * on malformed calls: they stay in the content.
 */
export function parseToolCalls(text: string, syntax: ToolFormatName, tools: readonly FunctionTool[] = []): ParsedCompletion {
  const p = new ToolCallStreamParser(syntax, tools);
  return assemble([...p.push(text), ...p.finish()]);
}
