export { detectToolCallSyntax, type ToolCallSyntax } from "./syntax.ts";
export { ToolCallStreamParser, type ToolStreamEvent } from "./stream.ts";
export { assemble, parseToolCalls, type ParsedCompletion, type ParsedToolCall } from "./parse.ts";
export { toolCallGrammar, type ToolGrammarRequest } from "./grammar.ts";
