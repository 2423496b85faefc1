export { detectToolCallSyntax, type ToolCallSyntax } from "./syntax.ts";
export type { RenderHints, ToolCallParser, ToolFormat, ToolStreamEvent } from "./format.ts";
export { detectToolFormat, implementedToolFormats, toolFormat } from "./formats/index.ts";
export { assemble, parseToolCalls, ToolCallStreamParser, type ParsedCompletion, type ParsedToolCall } from "./parse.ts";
export { toolCallGrammar, type ToolGrammarRequest } from "./grammar.ts";
