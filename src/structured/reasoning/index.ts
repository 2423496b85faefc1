// Thinking blocks: which one a model writes, and splitting its output into reasoning and answer.
export {
  DEFAULT_BUDGETS,
  KNOWN_TAGS,
  ReasoningCardError,
  detectReasoningFormat,
  promptOpensBlock,
  type ReasoningBudgets,
  type ReasoningCard,
  type ReasoningFormat,
  type ReasoningTags,
} from "./format.ts";
export { ThinkBlockSplitter, type ThinkOptions, type ThinkStep, type ThinkTokens } from "./think-block.ts";
