// A constrained choice must be able to finish its document within its token budget: a budget
// below the shortest document the grammar allows (in this model's tokens, its stop token
// included) is refused before any generation, naming the minimum. Budgets that can hold a
// document always end with one: the matcher's masks close it in time (completion-budget.ts),
// and a thinking block before it closes early enough to leave it room.
import { type GrammarMatcher, UNREACHABLE_TOKENS } from "../../structured/index.ts";
import { EngineRequestError } from "../types.ts";
import type { WireRequest } from "./protocol.ts";
import type { ThinkingPlan } from "./thinking.ts";

/**
 * Throws the 400 for a budget that cannot hold the shortest answer; `before` counts tokens that
 * must come first (the closing tag of a thinking block the prompt opened).
 */
export function refuseShortBudget(matcher: GrammarMatcher, maxNew: number, request: WireRequest, before = 0): void {
  const answer = matcher.tokensToFinish();
  const need = answer >= UNREACHABLE_TOKENS ? answer : answer + before;
  if (need <= maxNew) {
    matcher.prepareBudget();
    return;
  }
  const what = request.responseFormat && request.responseFormat.type !== "text" ? "response_format" : "tool call";
  if (need >= UNREACHABLE_TOKENS) {
    const param = what === "response_format" ? "response_format.json_schema.schema" : "tools";
    throw new EngineRequestError(`No sequence of this model's tokens completes the ${what} the request asks for.`, param, "unsupported_schema");
  }
  const { limit, fix, param } = budgetLimit(request, maxNew, need);
  const thinking = before > 0 ? ", the closing tag of its thinking block" : "";
  throw new EngineRequestError(
    `${limit}, but the shortest answer the ${what} allows takes ${need} tokens of this model (its end token${thinking} included). ${fix}`,
    param,
    "max_tokens_too_small",
  );
}

/**
 * What set a budget of maxNew tokens, for the refusal: the client's max_tokens or
 * max_completion_tokens, the operator's --max-tokens-cap (filled in when the request named none),
 * or the room the prompt leaves in the context. The operator's cap is no parameter of the
 * request: its param is null.
 */
function budgetLimit(request: WireRequest, maxNew: number, need: number): { limit: string; fix: string; param: string | null } {
  if (request.maxTokens === undefined || request.maxTokens > maxNew) {
    return { limit: `the prompt leaves room for only ${maxNew} completion tokens in the model's context`, fix: "Shorten the prompt.", param: "messages" };
  }
  if (request.maxTokensFrom === "max_tokens_cap") {
    return {
      limit: `this server allows at most ${maxNew} completion tokens per request (its operator's --max-tokens-cap), and the request named no max_tokens`,
      fix: "Ask for a shorter answer, or ask the operator to raise the cap.",
      param: null,
    };
  }
  const name = request.maxTokensFrom ?? "max_tokens";
  return { limit: `${name} is ${maxNew}`, fix: `Set ${name} to at least ${need}.`, param: name };
}

/** The thinking budget, lowered so that the block ends with room left for the shortest answer. */
export function answerThinkingBudget(plan: ThinkingPlan, matcher: GrammarMatcher | null, maxNew: number): ThinkingPlan {
  if (!matcher) return plan;
  return { ...plan, budget: Math.max(0, Math.min(plan.budget, maxNew - matcher.tokensToFinish())) };
}
