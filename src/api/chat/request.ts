// From a schema-valid request body to the engine's GenerateRequest, with the checks that a
// schema cannot express. Anything that cannot be honoured is refused here, naming its param.
import { REASONING_EFFORTS, type ChatMessage, type FunctionTool, type GenerateRequest, type ReasoningEffort, type ResponseFormat, type ToolChoice } from "../../engine/types.ts";
import type { CatalogModel } from "../../store/index.ts";
import { badRequest } from "../errors.ts";
import type { ChatCompletionRequest } from "../schemas.ts";

export type ChatPlan = Omit<GenerateRequest, "requestId" | "signal"> & {
  stream: boolean;
  includeUsage: boolean;
  user: string | null;
  metadata: Record<string, string> | null;
};

/**
 * The messages as the engine reads them: an assistant message may leave its content out (it is
 * then null, as when sent as null), and its refusal parts are what it said, so they are text.
 */
function engineMessages(messages: ChatCompletionRequest["messages"]): ChatMessage[] {
  return messages.map((m, i) => {
    if (m.role !== "assistant") return m as ChatMessage;
    const content = m.content === undefined ? null : Array.isArray(m.content) ? m.content.map((p) => (p.type === "refusal" ? { type: "text" as const, text: p.refusal } : p)) : m.content;
    const { reasoning, ...rest } = m;
    if (reasoning != null && m.reasoning_content != null && reasoning !== m.reasoning_content) {
      throw badRequest(`messages[${i}] has both 'reasoning' and 'reasoning_content', and they differ; send one.`, `messages[${i}].reasoning`);
    }
    return { ...rest, content, reasoning_content: m.reasoning_content ?? reasoning ?? undefined } as ChatMessage;
  });
}

export function planChat(body: ChatCompletionRequest, model: CatalogModel): ChatPlan {
  const stream = body.stream === true;
  if (body.stream_options && !stream) {
    throw badRequest("'stream_options' is only allowed when 'stream' is true.", "stream_options");
  }
  if (body.top_logprobs != null && body.top_logprobs > 0 && body.logprobs !== true) {
    throw badRequest("'top_logprobs' requires 'logprobs' to be true.", "top_logprobs");
  }
  if (body.max_tokens != null && body.max_completion_tokens != null && body.max_tokens !== body.max_completion_tokens) {
    throw badRequest(
      "'max_tokens' and 'max_completion_tokens' disagree; send only one of them.",
      "max_completion_tokens",
    );
  }
  const logitBias: Record<number, number> = {};
  for (const [key, bias] of Object.entries(body.logit_bias ?? {})) {
    if (!/^(0|[1-9][0-9]{0,9})$/.test(key)) {
      throw badRequest(`Invalid key in 'logit_bias': ${JSON.stringify(key)} is not a token id.`, "logit_bias");
    }
    logitBias[Number(key)] = bias;
  }
  body.messages.forEach((m, i) => {
    if (m.role !== "user" || typeof m.content === "string") return;
    m.content.forEach((part, j) => {
      if (part.type === "image_url" && !model.supportsImages) {
        throw badRequest(
          `The model '${model.id}' does not accept image input (messages[${i}].content[${j}]).`,
          `messages[${i}].content[${j}]`,
          "image_input_not_supported",
        );
      }
    });
  });
  const tools = body.tools as FunctionTool[] | undefined;
  const names = new Set<string>();
  tools?.forEach((t, i) => {
    if (names.has(t.function.name)) {
      throw badRequest(`Duplicate function name '${t.function.name}'.`, `tools[${i}].function.name`);
    }
    names.add(t.function.name);
  });
  const toolChoice = body.tool_choice as ToolChoice | undefined;
  if (toolChoice !== undefined && toolChoice !== "none" && !tools?.length) {
    throw badRequest("'tool_choice' is only allowed when 'tools' are specified.", "tool_choice");
  }
  if (typeof toolChoice === "object" && !names.has(toolChoice.function.name)) {
    throw badRequest(
      `'tool_choice' names the function '${toolChoice.function.name}', which is not in 'tools'.`,
      "tool_choice.function.name",
    );
  }
  if (body.parallel_tool_calls !== undefined && !tools?.length) {
    throw badRequest("'parallel_tool_calls' is only allowed when 'tools' are specified.", "parallel_tool_calls");
  }
  const responseFormat = body.response_format as ResponseFormat | undefined;
  if (responseFormat?.type === "json_schema" && responseFormat.json_schema.schema === undefined) {
    throw badRequest("'response_format.json_schema.schema' is required.", "response_format.json_schema.schema");
  }
  const effort = body.reasoning_effort ?? undefined;
  if (effort !== undefined && !REASONING_EFFORTS.includes(effort as ReasoningEffort)) {
    const values = REASONING_EFFORTS.map((e) => `'${e}'`);
    throw badRequest(
      `Unsupported value: 'reasoning_effort' does not support '${effort}'. Supported values are: ${values.slice(0, -1).join(", ")} and ${values.at(-1)}.`,
      "reasoning_effort",
      "unsupported_value",
    );
  }
  const stop = body.stop == null ? [] : typeof body.stop === "string" ? [body.stop] : body.stop;
  return {
    modelId: model.id,
    messages: engineMessages(body.messages),
    tools,
    toolChoice,
    parallelToolCalls: body.parallel_tool_calls,
    responseFormat,
    sampling: {
      // Left out (or null): the engine takes the model's default, else the API's.
      temperature: body.temperature ?? undefined,
      topP: body.top_p ?? undefined,
      topK: body.top_k ?? undefined,
      minP: body.min_p ?? undefined,
      presencePenalty: body.presence_penalty ?? 0,
      frequencyPenalty: body.frequency_penalty ?? 0,
      logitBias,
      seed: body.seed ?? undefined,
    },
    maxTokens: body.max_completion_tokens ?? body.max_tokens ?? undefined,
    maxTokensFrom: body.max_completion_tokens != null ? "max_completion_tokens" : body.max_tokens != null ? "max_tokens" : undefined,
    stop,
    n: body.n ?? 1,
    logprobs: body.logprobs === true,
    topLogprobs: body.top_logprobs ?? 0,
    reasoningEffort: effort as ReasoningEffort | undefined,
    chatTemplateKwargs: body.chat_template_kwargs ?? undefined,
    stream,
    includeUsage: body.stream_options?.include_usage === true,
    user: body.user ?? body.safety_identifier ?? null,
    metadata: body.metadata ?? null,
  };
}
