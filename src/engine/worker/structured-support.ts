// What constrained decoding and tool calling need from a model, computed once per model: its
// token bytes (for grammar masks), its tool-call syntax, and its end-of-turn ids; and, per
// request, the grammar and tool parsing that apply.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import {
  GrammarMatcher,
  prepareVocabulary,
  responseFormatGrammar,
  tokenVocabulary,
  UnsupportedSchemaError,
  type Grammar,
  type TokenVocabulary,
} from "../../structured/index.ts";
import { detectToolCallSyntax, toolCallGrammar, type ToolCallSyntax } from "../../structured/tools/index.ts";
import { EngineRequestError } from "../types.ts";
import type { ModelRunner } from "./model-runner.ts";
import type { WireRequest } from "./protocol.ts";

interface ModelStructure {
  vocab: TokenVocabulary;
  syntax: ToolCallSyntax | null;
}

const perModel = new WeakMap<ModelRunner, ModelStructure>();

/** Built on first use: models that never see a schema or tools never pay for the vocabulary. */
export function modelStructure(model: ModelRunner): ModelStructure {
  let s = perModel.get(model);
  if (!s) {
    const tokenizerJson = JSON.parse(readFileSync(join(model.info.dir, "tokenizer.json"), "utf8")) as object;
    const templates = model.tokenizer.chatTemplates;
    const template = [templates.toolUse, templates.default, ...Object.values(templates.named)].filter((t): t is string => !!t).join("\n");
    const syntax = detectToolCallSyntax(template);
    // Mistral's [TOOL_CALLS] is a control token the grammar must be able to produce as text.
    const vocab = tokenVocabulary(tokenizerJson, { textSpecialTokens: syntax === "mistral" ? ["[TOOL_CALLS]"] : [] });
    // Masks shared by all schemas (string contents, numbers, formats, json_object): computed here
    // once, so the first steps of each new schema do not walk the whole vocabulary.
    prepareVocabulary(vocab);
    s = { vocab, syntax };
    perModel.set(model, s);
  }
  return s;
}

export interface RequestStructure {
  /** Constrains every token, or null for free generation. */
  grammar: Grammar | null;
  /** Parse the output for tool calls in this syntax, or null to leave it all as content. */
  toolSyntax: ToolCallSyntax | null;
}

const forcing = (r: WireRequest) => r.toolChoice === "required" || typeof r.toolChoice === "object";

/** Decides and compiles what a request needs; refuses what cannot be guaranteed, naming the param. */
export function requestStructure(request: WireRequest, model: ModelRunner): RequestStructure {
  const wantsFormat = request.responseFormat !== undefined && request.responseFormat.type !== "text";
  const hasTools = (request.tools?.length ?? 0) > 0 && request.toolChoice !== "none";
  if (!wantsFormat && !hasTools) return { grammar: null, toolSyntax: null };
  const { syntax } = modelStructure(model);
  if (hasTools && syntax === null) {
    throw new EngineRequestError(
      `The model '${model.info.id}' has no tool-call format Sluice can parse (its chat template shows no Hermes, Llama 3.1 or Mistral tool calls), so 'tools' cannot be honoured.`,
      "tools",
      "tools_not_supported",
    );
  }
  if (wantsFormat && hasTools && forcing(request)) {
    throw new EngineRequestError(
      "'response_format' cannot be combined with a tool_choice that forces a call: the answer would have to be both.",
      "response_format",
      "invalid_value",
    );
  }
  try {
    if (wantsFormat) {
      return { grammar: responseFormatGrammar(request.responseFormat), toolSyntax: hasTools ? syntax : null };
    }
    const grammar = toolCallGrammar({
      tools: request.tools!,
      toolChoice: request.toolChoice,
      syntax: syntax!,
      parallelToolCalls: request.parallelToolCalls,
    });
    return { grammar, toolSyntax: syntax };
  } catch (e) {
    if (e instanceof UnsupportedSchemaError) {
      const param = wantsFormat ? "response_format.json_schema.schema" : "tools";
      throw new EngineRequestError(e.message, param, "unsupported_schema");
    }
    throw e;
  }
}

/** A fresh matcher for one choice; end-of-turn ids are allowed only once the value is complete. */
export function createMatcher(grammar: Grammar, model: ModelRunner): GrammarMatcher {
  return new GrammarMatcher(grammar, modelStructure(model).vocab, { stopTokenIds: [...model.tokenizer.eosTokenIds] });
}
