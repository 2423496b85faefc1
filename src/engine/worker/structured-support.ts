// What constrained decoding and tool calling need from a model, computed once per model: its
// token bytes (for grammar masks), its tool-call syntax, and its end-of-turn ids; and, per
// request, the grammar and tool parsing that apply.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import {
  checkSchemaShape,
  GrammarError,
  GrammarMatcher,
  prepareVocabulary,
  responseFormatGrammar,
  SchemaLimitError,
  shareVocabulary,
  tokenVocabulary,
  UnsupportedSchemaError,
  type Grammar,
  type SharedVocabulary,
  type TokenVocabulary,
} from "../../structured/index.ts";
import { toolCallGrammar, toolFormat, type ToolCallSyntax } from "../../structured/tools/index.ts";
import { EngineRequestError, type FunctionTool, type ResponseFormat, type ToolChoice } from "../types.ts";
import type { ModelRunner } from "./model-runner.ts";
import type { WireRequest } from "./protocol.ts";

interface ModelStructure {
  vocab: TokenVocabulary;
  /** The same vocabulary's memory, for the compile thread (it prepares grammars' token budgets). */
  shared: SharedVocabulary;
  syntax: ToolCallSyntax | null;
}

const perModel = new WeakMap<ModelRunner, ModelStructure>();

/** Built on first use: models that never see a schema or tools never pay for the vocabulary. */
export function modelStructure(model: ModelRunner): ModelStructure {
  let s = perModel.get(model);
  if (!s) {
    const tokenizerJson = JSON.parse(readFileSync(join(model.info.dir, "tokenizer.json"), "utf8")) as object;
    // The format was settled when the model loaded (sluice.json, the template, or the fallback).
    const syntax = model.info.toolFormat;
    // Control tokens of its calls (Mistral's [TOOL_CALLS], DeepSeek's <｜tool▁calls▁begin｜>, …) are
    // text the grammar must be able to produce. In shared memory: the compile thread reads the same
    // tables without a copy.
    const textSpecialTokens = syntax ? [...toolFormat(syntax)!.controlTokens] : [];
    const { vocab, data: shared } = shareVocabulary(tokenVocabulary(tokenizerJson, { textSpecialTokens }));
    // Masks shared by all schemas (string contents, numbers, formats, json_object): computed here
    // once, so the first steps of each new schema do not walk the whole vocabulary.
    prepareVocabulary(vocab);
    s = { vocab, shared, syntax };
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

/** What to compile for a request: plain data, so it can go to the compile thread. */
export type StructureSpec =
  | { kind: "format"; format: ResponseFormat }
  | {
      kind: "tools";
      tools: FunctionTool[];
      toolChoice: ToolChoice | undefined;
      syntax: ToolCallSyntax;
      parallelToolCalls: boolean | undefined;
    };

/** A request's structure before compiling: the spec (null: free generation) and the tool syntax. */
export interface StructurePlan {
  spec: StructureSpec | null;
  toolSyntax: ToolCallSyntax | null;
}

const forcing = (r: WireRequest) => r.toolChoice === "required" || typeof r.toolChoice === "object";

/** Decides what a request needs (cheap); refuses what cannot be guaranteed, naming the param. */
export function planStructure(request: WireRequest, model: ModelRunner): StructurePlan {
  const wantsFormat = request.responseFormat !== undefined && request.responseFormat.type !== "text";
  const hasTools = (request.tools?.length ?? 0) > 0 && request.toolChoice !== "none";
  if (!wantsFormat && !hasTools) return { spec: null, toolSyntax: null };
  const { syntax } = modelStructure(model);
  if (hasTools && syntax === null) {
    throw new EngineRequestError(
      `The model '${model.info.id}' takes no tools: its sluice.json sets tool_format "none", or its chat template shows no tool-call format Sluice knows and its sluice.json turns the generic fallback off (tool_fallback: false). GET /v1/models shows each model's tool_format.`,
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
  if (wantsFormat && hasTools && syntax === "json_envelope") {
    // The envelope is itself the answer's JSON: a response_format could only be nested inside it.
    throw new EngineRequestError(
      `'response_format' cannot be combined with 'tools' on '${model.info.id}': its template has no tool syntax, so Sluice's JSON envelope (tool_format json_envelope) already shapes the answer. Send tool_choice "none" or leave out response_format.`,
      "response_format",
      "invalid_value",
    );
  }
  if (wantsFormat) return { spec: { kind: "format", format: request.responseFormat! }, toolSyntax: hasTools ? syntax : null };
  return {
    spec: { kind: "tools", tools: request.tools!, toolChoice: request.toolChoice, syntax: syntax!, parallelToolCalls: request.parallelToolCalls },
    toolSyntax: syntax,
  };
}

/** The request parameter a spec's schemas came from (named in refusals). */
export const specParam = (spec: StructureSpec) => (spec.kind === "format" ? "response_format.json_schema.schema" : "tools");

/**
 * The grammar of a spec, under the compile budget in force on this thread (if any). Throws
 * UnsupportedSchemaError, SchemaLimitError or CompileCancelledError.
 */
export function compileStructureSpec(spec: StructureSpec): Grammar | null {
  if (spec.kind === "format") {
    if (spec.format.type === "json_schema") checkSchemaShape(spec.format.json_schema.schema, "");
    return responseFormatGrammar(spec.format);
  }
  spec.tools.forEach((t, i) => checkSchemaShape(t.function.parameters, `/tools/${i}/function/parameters`));
  return toolCallGrammar({ tools: spec.tools, toolChoice: spec.toolChoice, syntax: spec.syntax, parallelToolCalls: spec.parallelToolCalls });
}

/** A compile failure as the 400 the client gets; null when it is not the schema's fault. */
export function schemaRefusal(e: unknown, param: string): EngineRequestError | null {
  if (e instanceof UnsupportedSchemaError) return new EngineRequestError(e.message, param, "unsupported_schema");
  if (e instanceof GrammarError) return new EngineRequestError(`the schema cannot be enforced: ${e.message}`, param, "unsupported_schema");
  if (e instanceof SchemaLimitError) return new EngineRequestError(`${cap(e.message)}.`, param, "schema_too_complex");
  return null;
}

const cap = (s: string) => s.charAt(0).toUpperCase() + s.slice(1);

/** Decides and compiles what a request needs, in this thread; refuses what cannot be guaranteed, naming the param. */
export function requestStructure(request: WireRequest, model: ModelRunner): RequestStructure {
  const plan = planStructure(request, model);
  if (!plan.spec) return { grammar: null, toolSyntax: null };
  try {
    return { grammar: compileStructureSpec(plan.spec), toolSyntax: plan.toolSyntax };
  } catch (e) {
    throw schemaRefusal(e, specParam(plan.spec)) ?? e;
  }
}

/** A fresh matcher for one choice; end-of-turn ids are allowed only once the value is complete. */
export function createMatcher(grammar: Grammar, model: ModelRunner): GrammarMatcher {
  return new GrammarMatcher(grammar, modelStructure(model).vocab, { stopTokenIds: [...model.tokenizer.eosTokenIds] });
}
