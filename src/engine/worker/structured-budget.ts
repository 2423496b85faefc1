// A constrained choice must be able to finish its document within its token budget: a budget
// below the shortest document the grammar allows (in this model's tokens, its stop token
// included) is refused before any generation, naming the minimum. Budgets that can hold a
// document always end with one: the matcher's masks close it in time (completion-budget.ts).
import { type GrammarMatcher, UNREACHABLE_TOKENS } from "../../structured/index.ts";
import { EngineRequestError } from "../types.ts";
import type { WireRequest } from "./protocol.ts";

export function refuseShortBudget(matcher: GrammarMatcher, maxNew: number, request: WireRequest): void {
  const need = matcher.tokensToFinish();
  if (need <= maxNew) {
    matcher.prepareBudget();
    return;
  }
  const what = request.responseFormat && request.responseFormat.type !== "text" ? "response_format" : "tool call";
  if (need >= UNREACHABLE_TOKENS) {
    throw new EngineRequestError(`No sequence of this model's tokens completes the ${what} the request asks for.`, "response_format", "unsupported_schema");
  }
  const fromMaxTokens = request.maxTokens !== undefined && request.maxTokens <= maxNew;
  const limit = fromMaxTokens
    ? `max_tokens is ${maxNew}`
    : `the prompt leaves room for only ${maxNew} completion tokens in the model's context`;
  throw new EngineRequestError(
    `${limit}, but the shortest answer the ${what} allows takes ${need} tokens of this model (its end token included). ` +
      (fromMaxTokens ? `Set max_tokens to at least ${need}.` : "Shorten the prompt."),
    fromMaxTokens ? "max_tokens" : "messages",
    "max_tokens_too_small",
  );
}
