// Public surface of structured output: response formats and tool calls to grammars, grammars to
// token masks. The engine applies GrammarMatcher.fillNextTokenBitmask as a logits processor.

export { UnsupportedSchemaError } from "./errors.ts";
export { GrammarError, type Grammar } from "./grammar.ts";
export { compileJsonSchema, jsonObjectGrammar, prepareVocabulary } from "./compile.ts";
export type { SchemaCompileOptions } from "./schema.ts";
export { GrammarMatcher, allocateTokenBitmask, applyTokenBitmask, type MatcherOptions, UNREACHABLE_TOKENS } from "./matcher.ts";
export {
  shareVocabulary,
  tokenVocabulary,
  vocabularyFromBytes,
  vocabularyFromShared,
  type SharedVocabulary,
  type TokenVocabulary,
  type VocabularyOptions,
} from "./token-bytes.ts";
export { adoptCompletionTables, completionTablesBytes, prepareCompletionFacts, type CompletionTables } from "./completion-budget.ts";
export { builtInSearches, prepareBuiltInTables, type BuiltInPart } from "./built-in-tables.ts";
export { adoptRuleTables, ruleTablesBytes, type RuleTables } from "./rule-tables.ts";
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
export { configureGrammarCache } from "./compile.ts";
export {
  CompileCancelledError,
  DEFAULT_COMPILE_LIMITS,
  LIMIT_FLAGS,
  SchemaLimitError,
  checkSchemaShape,
  withCompileBudget,
  type CompileLimits,
  type CompileShare,
  type LimitName,
} from "./compile-budget.ts";
export { canonicalJson, canonicalJsonWithin } from "./canonical.ts";
