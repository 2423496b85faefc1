// A model's thinking block (found when it loads) and, per request, what reasoning_effort and
// chat_template_kwargs ask of the chat template and the thinking budget.
import {
  detectReasoningFormat,
  harmonyTokens,
  isHarmonyTemplate,
  type HarmonyTokens,
  type ReasoningCard,
  type ReasoningFormat,
  type ThinkTokens,
} from "../../structured/reasoning/index.ts";
import { templateVariables } from "../text/template-variables.ts";
import type { TextTokenizer } from "../text/tokenizer.ts";
import { EngineRequestError, type ReasoningEffort } from "../types.ts";
import type { WireRequest } from "./protocol.ts";

export interface ModelReasoning {
  format: ReasoningFormat;
  /** The tags as the tokenizer encodes them. */
  tokens: ThinkTokens;
  /** The template variable that switches thinking on and off (Qwen3's enable_thinking), if any. */
  switch: string | null;
  /** Harmony's channels instead of a block (gpt-oss): the markers and the headers the engine writes. */
  harmony: HarmonySetup | null;
}

export interface HarmonySetup {
  tokens: HarmonyTokens;
  /** `<|channel|>analysis<|message|>`: the turn's first message, thinking. */
  openAnalysis: number[];
  /** `<|channel|>final<|message|>`: the turn's first message when there is no thinking. */
  openFinal: number[];
  /** `<|start|>assistant<|channel|>final<|message|>`: the answer after the thinking's `<|end|>`. */
  nextFinal: number[];
}

/** What the chat templates read, and what the server itself sets (never a client's kwarg). */
export interface TemplateContext {
  variables: ReadonlySet<string>;
  reserved: ReadonlySet<string>;
}

/** Template variables that turn thinking on or off, in the order they are looked for. */
const SWITCHES = ["enable_thinking", "thinking"];

export function templateContext(tokenizer: TextTokenizer): TemplateContext {
  const t = tokenizer.chatTemplates;
  const variables = new Set<string>();
  for (const source of [t.default, t.toolUse, ...Object.values(t.named)]) {
    if (!source) continue;
    try {
      for (const v of templateVariables(source)) variables.add(v);
    } catch {
      // A template that does not parse fails when it is rendered, with its own error.
    }
  }
  const reserved = new Set(["messages", "tools", "documents", "add_generation_prompt", ...Object.keys(tokenizer.templateTokens)]);
  return { variables, reserved };
}

export async function modelReasoning(tokenizer: TextTokenizer, card: ReasoningCard | undefined, context: TemplateContext): Promise<ModelReasoning | null> {
  const t = tokenizer.chatTemplates;
  const templates = [t.default, t.toolUse, ...Object.values(t.named)].filter((s): s is string => !!s);
  const harmony = card === false ? null : await harmonySetup(tokenizer, templates);
  if (harmony) {
    // The card may still set budgets (checked as for a block); harmony's "tags" are its analysis
    // header and end marker.
    const budgets = card && typeof card === "object" ? card.budgets : undefined;
    const format = detectReasoningFormat([], new Set(), { start: "<|channel|>analysis<|message|>", end: "<|end|>", budgets })!;
    return { format, tokens: { start: harmony.openAnalysis, end: [harmony.tokens.end] }, switch: null, harmony };
  }
  const format = detectReasoningFormat(templates, new Set(tokenizer.addedTokens.map((a) => a.content)), card);
  if (!format) return null;
  const start = await tokenizer.encode(format.tags.start);
  const end = await tokenizer.encode(format.tags.end);
  if (start.length === 0 || end.length === 0) throw new Error(`the thinking tags ${format.tags.start} ${format.tags.end} encode to no tokens`);
  return { format, tokens: { start, end }, switch: SWITCHES.find((s) => context.variables.has(s)) ?? null, harmony: null };
}

/** Harmony's markers and headers, when the template writes channels and the tokenizer has the markers. */
async function harmonySetup(tokenizer: TextTokenizer, templates: readonly string[]): Promise<HarmonySetup | null> {
  if (!templates.some(isHarmonyTemplate)) return null;
  const special = new Map(tokenizer.addedTokens.map((a) => [a.content, a.id]));
  const tokens = harmonyTokens((c) => special.get(c));
  if (!tokens) return null;
  const text = async (s: string) => tokenizer.encode(s, { addSpecialTokens: false });
  const [assistant, analysis, final] = [await text("assistant"), await text("analysis"), await text("final")];
  return {
    tokens,
    openAnalysis: [tokens.channel, ...analysis, tokens.message],
    openFinal: [tokens.channel, ...final, tokens.message],
    nextFinal: [tokens.start, ...assistant, tokens.channel, ...final, tokens.message],
  };
}

export interface TemplateSettings {
  /** Variables for the chat template beyond the messages and tools. */
  kwargs: Record<string, unknown>;
  /** Most reasoning tokens (Infinity: up to max_tokens). */
  budget: number;
}

/**
 * Checks chat_template_kwargs against what the template reads and turns reasoning_effort into a
 * template switch and a thinking budget. Refuses, naming the model, what its template cannot do.
 */
export function templateSettings(req: WireRequest, modelId: string, context: TemplateContext, reasoning: ModelReasoning | null): TemplateSettings {
  const kwargs: Record<string, unknown> = { ...req.chatTemplateKwargs };
  for (const key of Object.keys(kwargs)) {
    if (context.reserved.has(key)) {
      throw new EngineRequestError(`'chat_template_kwargs.${key}' is set by the server from the request; it cannot be passed to the chat template.`, `chat_template_kwargs.${key}`, "invalid_value");
    }
    if (!context.variables.has(key)) {
      const known = [...context.variables].filter((v) => !context.reserved.has(v)).sort();
      throw new EngineRequestError(
        `The chat template of '${modelId}' does not read '${key}' (it reads ${known.length ? known.map((k) => `'${k}'`).join(", ") : "no other variables"}).`,
        `chat_template_kwargs.${key}`,
        "invalid_value",
      );
    }
  }
  const effort = req.reasoningEffort;
  // A template that reads reasoning_effort itself (gpt-oss style) gets it as sent.
  if (effort !== undefined && context.variables.has("reasoning_effort") && !("reasoning_effort" in kwargs)) kwargs.reasoning_effort = effort;
  const switchName = reasoning?.switch ?? null;
  const switched = switchName !== null ? kwargs[switchName] : undefined;
  if (effort === undefined) return { kwargs, budget: switched === false ? 0 : Infinity };
  if (!reasoning) {
    throw new EngineRequestError(`The model '${modelId}' does not think (its chat template and tokenizer have no thinking block), so 'reasoning_effort' cannot be honoured.`, "reasoning_effort", "unsupported_value");
  }
  const off = effort === "none" || effort === "minimal";
  if (off && reasoning.harmony) {
    // Harmony's template knows low, medium and high; no thinking is the engine's: the answer's
    // channel is opened at once.
    if ("reasoning_effort" in kwargs && req.chatTemplateKwargs?.reasoning_effort === undefined) kwargs.reasoning_effort = "low";
    return { kwargs, budget: 0 };
  }
  if (off) {
    if (switchName === null) {
      throw new EngineRequestError(
        `The model '${modelId}' cannot switch thinking off: its chat template has no enable_thinking switch. Use reasoning_effort 'low', 'medium' or 'high' to bound the thinking instead.`,
        "reasoning_effort",
        "unsupported_value",
      );
    }
    if (switched === true) throw conflict(effort, switchName, true);
    kwargs[switchName] = false;
    return { kwargs, budget: 0 };
  }
  if (switchName !== null) {
    if (switched === false) throw conflict(effort, switchName, false);
    kwargs[switchName] = true;
  }
  return { kwargs, budget: reasoning.format.budgets[effort as Exclude<ReasoningEffort, "none" | "minimal">] };
}

const conflict = (effort: string, name: string, value: boolean) =>
  new EngineRequestError(`'reasoning_effort' is '${effort}' but 'chat_template_kwargs.${name}' is ${value}; send one or make them agree.`, `chat_template_kwargs.${name}`, "invalid_value");
