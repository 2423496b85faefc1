// Public surface of structured output: response formats and tool calls to grammars, grammars to
// token masks. The engine applies GrammarMatcher.fillNextTokenBitmask as a logits processor.

export { UnsupportedSchemaError } from "./errors.ts";
export type { Grammar } from "./grammar.ts";
export { compileJsonSchema, jsonObjectGrammar, prepareVocabulary } from "./compile.ts";
export type { SchemaCompileOptions } from "./schema.ts";
export { GrammarMatcher, allocateTokenBitmask, applyTokenBitmask, type MatcherOptions, UNREACHABLE_TOKENS } from "./matcher.ts";
export { tokenVocabulary, vocabularyFromBytes, type TokenVocabulary, type VocabularyOptions } from "./token-bytes.ts";
export { responseFormatGrammar } from "./response-format.ts";
export {
  assemble,
  detectToolCallSyntax,
  parseToolCalls,
  ToolCallStreamParser,
  toolCallGrammar,
  type ParsedCompletion,
  type ParsedToolCall,
  type ToolCallSyntax,
  type ToolGrammarRequest,
  type ToolStreamEvent,
} from "./tools/index.ts";
