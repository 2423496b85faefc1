// The wire shapes of the public API, in TypeBox: the one source used for request validation, the
// TypeScript types of the handlers, and the OpenAPI document.
import { type Static, type TSchema, Type as T } from "@sinclair/typebox";

const strict = { additionalProperties: false } as const;

export const TextPart = T.Object({ type: T.Literal("text"), text: T.String() }, strict);
export const ImagePart = T.Object(
  {
    type: T.Literal("image_url"),
    image_url: T.Object(
      {
        url: T.String({ minLength: 1 }),
        detail: T.Optional(T.Union([T.Literal("low"), T.Literal("high"), T.Literal("auto")])),
      },
      strict,
    ),
  },
  strict,
);
export const RefusalPart = T.Object({ type: T.Literal("refusal"), refusal: T.String() }, strict);

const Name = T.Optional(T.String({ minLength: 1, maxLength: 64 }));
const TextContent = T.Union([T.String(), T.Array(TextPart, { minItems: 1 })]);

export const ToolCallSchema = T.Object(
  {
    id: T.String({ minLength: 1 }),
    type: T.Literal("function"),
    function: T.Object({ name: T.String({ minLength: 1 }), arguments: T.String() }, strict),
  },
  strict,
);

export const SystemMessage = T.Object(
  { role: T.Union([T.Literal("system"), T.Literal("developer")]), content: TextContent, name: Name },
  strict,
);
export const UserMessage = T.Object(
  {
    role: T.Literal("user"),
    content: T.Union([T.String(), T.Array(T.Union([TextPart, ImagePart]), { minItems: 1 })]),
    name: Name,
  },
  strict,
);
export const AssistantMessage = T.Object(
  {
    role: T.Literal("assistant"),
    content: T.Optional(T.Union([T.String(), T.Null(), T.Array(T.Union([TextPart, RefusalPart]))])),
    name: Name,
    refusal: T.Optional(T.Union([T.String(), T.Null()])),
    tool_calls: T.Optional(T.Array(ToolCallSchema)),
    // The thinking of an earlier turn, as this API returned it: DeepSeek's and older vLLM's name, and
    // the one vLLM and OpenRouter use now. Given to the template (as reasoning_content).
    reasoning_content: T.Optional(T.Union([T.String(), T.Null()])),
    reasoning: T.Optional(T.Union([T.String(), T.Null()])),
  },
  strict,
);
export const ToolMessage = T.Object(
  { role: T.Literal("tool"), content: TextContent, tool_call_id: T.String({ minLength: 1 }) },
  strict,
);

/** Per role, so that a bad message is reported against the schema of its own role. */
export const MessageByRole = {
  system: SystemMessage,
  developer: SystemMessage,
  user: UserMessage,
  assistant: AssistantMessage,
  tool: ToolMessage,
} as const;

export const Message = T.Union([SystemMessage, UserMessage, AssistantMessage, ToolMessage]);

export const FunctionToolSchema = T.Object(
  {
    type: T.Literal("function"),
    function: T.Object(
      {
        name: T.String({ pattern: "^[a-zA-Z0-9_-]{1,64}$" }),
        description: T.Optional(T.String()),
        parameters: T.Optional(T.Record(T.String(), T.Unknown())),
        strict: T.Optional(T.Union([T.Boolean(), T.Null()])),
      },
      strict,
    ),
  },
  strict,
);

export const ToolChoiceSchema = T.Union([
  T.Literal("none"),
  T.Literal("auto"),
  T.Literal("required"),
  T.Object(
    { type: T.Literal("function"), function: T.Object({ name: T.String({ minLength: 1 }) }, strict) },
    strict,
  ),
]);

export const ResponseFormatSchema = T.Union([
  T.Object({ type: T.Literal("text") }, strict),
  T.Object({ type: T.Literal("json_object") }, strict),
  T.Object(
    {
      type: T.Literal("json_schema"),
      json_schema: T.Object(
        {
          name: T.String({ pattern: "^[a-zA-Z0-9_-]{1,64}$" }),
          description: T.Optional(T.String()),
          schema: T.Optional(T.Record(T.String(), T.Unknown())),
          strict: T.Optional(T.Union([T.Boolean(), T.Null()])),
        },
        strict,
      ),
    },
    strict,
  ),
]);

const Nullable = <S extends TSchema>(s: S) => T.Optional(T.Union([s, T.Null()]));

export const ChatCompletionRequest = T.Object(
  {
    model: T.String({ minLength: 1 }),
    messages: T.Array(Message, { minItems: 1 }),
    frequency_penalty: Nullable(T.Number({ minimum: -2, maximum: 2 })),
    presence_penalty: Nullable(T.Number({ minimum: -2, maximum: 2 })),
    logit_bias: T.Optional(T.Union([T.Record(T.String(), T.Number({ minimum: -100, maximum: 100 })), T.Null()])),
    logprobs: T.Optional(T.Union([T.Boolean(), T.Null()])),
    top_logprobs: Nullable(T.Integer({ minimum: 0, maximum: 20 })),
    max_tokens: Nullable(T.Integer({ minimum: 1 })),
    max_completion_tokens: Nullable(T.Integer({ minimum: 1 })),
    n: Nullable(T.Integer({ minimum: 1, maximum: 16 })),
    seed: Nullable(T.Integer({ minimum: -9007199254740991, maximum: 9007199254740991 })),
    stop: T.Optional(
      T.Union([T.String({ minLength: 1 }), T.Array(T.String({ minLength: 1 }), { maxItems: 4 }), T.Null()]),
    ),
    stream: T.Optional(T.Union([T.Boolean(), T.Null()])),
    stream_options: T.Optional(
      T.Union([
        T.Object(
          { include_usage: T.Optional(T.Boolean()), include_obfuscation: T.Optional(T.Literal(false)) },
          strict,
        ),
        T.Null(),
      ]),
    ),
    temperature: Nullable(T.Number({ minimum: 0, maximum: 2 })),
    top_p: Nullable(T.Number({ minimum: 0, maximum: 1 })),
    // vLLM / llama.cpp sampling extensions.
    top_k: Nullable(T.Integer({ minimum: -1 })),
    min_p: Nullable(T.Number({ minimum: 0, maximum: 1 })),
    tools: T.Optional(T.Array(FunctionToolSchema, { maxItems: 128 })),
    tool_choice: T.Optional(ToolChoiceSchema),
    parallel_tool_calls: T.Optional(T.Boolean()),
    response_format: T.Optional(ResponseFormatSchema),
    // Checked against the supported values in planChat, so the error can list them.
    reasoning_effort: Nullable(T.String()),
    // vLLM's extra chat template variables; checked against what the model's template reads.
    chat_template_kwargs: Nullable(T.Record(T.String(), T.Unknown())),
    user: T.Optional(T.String({ maxLength: 256 })),
    safety_identifier: T.Optional(T.String({ maxLength: 256 })),
    // Prefix caching is automatic for every request, so a cache key is honoured by construction.
    prompt_cache_key: T.Optional(T.String({ maxLength: 256 })),
    metadata: T.Optional(
      T.Union([T.Record(T.String({ maxLength: 64 }), T.String({ maxLength: 512 }), { maxProperties: 16 }), T.Null()]),
    ),
    store: T.Optional(T.Union([T.Literal(false), T.Null()])),
    modalities: T.Optional(T.Union([T.Array(T.Literal("text"), { minItems: 1, maxItems: 1 }), T.Null()])),
    service_tier: T.Optional(T.Union([T.Literal("auto"), T.Literal("default"), T.Null()])),
  },
  strict,
);
export type ChatCompletionRequest = Static<typeof ChatCompletionRequest>;

export const ModelObject = T.Object({
  id: T.String(),
  object: T.Literal("model"),
  created: T.Integer(),
  owned_by: T.String(),
  context_length: T.Integer(),
  max_model_len: T.Integer(),
  capabilities: T.Object({ tools: T.Boolean(), structured_output: T.Boolean(), images: T.Boolean() }),
  /**
   * Sluice's own facts about the model: tool_format is how its tool calls are written, parsed and
   * constrained (a family's name, "json_envelope" for the generic fallback, null: no tools).
   */
  sluice: T.Object({ tool_format: T.Union([T.String(), T.Null()]) }),
  pricing: T.Object({
    input_per_million_tokens: T.Number(),
    /** Prompt tokens served from the prefix cache (usage.prompt_tokens_details.cached_tokens). */
    cached_input_per_million_tokens: T.Number(),
    output_per_million_tokens: T.Number(),
  }),
});
export type ModelObject = Static<typeof ModelObject>;

export const ModelList = T.Object({ object: T.Literal("list"), data: T.Array(ModelObject) });

export const Integrations = T.Object({
  base_url: T.String(),
  models: T.Array(T.String()),
  api_key_env: T.String(),
  docs: T.String(),
});

export const ErrorBody = T.Object({
  error: T.Object({
    message: T.String(),
    type: T.String(),
    param: T.Union([T.String(), T.Null()]),
    code: T.Union([T.String(), T.Null()]),
  }),
});
