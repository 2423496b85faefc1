// Thinking blocks: which one a model writes, and splitting its output into reasoning and answer;
// harmony's channels (gpt-oss) for models that write those instead.
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
export {
  HARMONY_MARKERS,
  HarmonyStreamParser,
  harmonyFunctionName,
  harmonyTokens,
  isHarmonyTemplate,
  type HarmonyEvent,
  type HarmonyHeader,
  type HarmonyTokens,
} from "./harmony.ts";
