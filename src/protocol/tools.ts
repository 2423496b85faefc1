// Tool-call formats: the names a model directory's sluice.json (`tool_format`), the catalog and
// /v1/models use for the way a model writes its calls. Each is one module under
// structured/tools/formats/; the names are here, below every room, because the api and the store
// show them and the engine picks them.

export const TOOL_FORMAT_NAMES = [
  "hermes",
  "llama3",
  "mistral",
  "deepseek_v3",
  "deepseek_v31",
  "kimi_k2",
  "phi4_mini",
  "granite",
  "qwen3_xml",
  "glm45",
  "pythonic",
  "harmony",
  "json_envelope",
] as const;

/**
 * hermes: `<tool_call>{"name", "arguments"}</tool_call>` (Qwen 2.5/3, Hermes); llama3: Llama 3.1's
 * JSON object with "parameters"; mistral: `[TOOL_CALLS][…]`; deepseek_v3: DeepSeek V3/R1's
 * `<｜tool▁calls▁begin｜>…`; deepseek_v31: V3.1's `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}`; kimi_k2: Kimi K2's `<|tool_calls_section_begin|>…`; phi4_mini:
 * `<|tool_call|>[…]<|/tool_call|>`; granite: Granite 3's `<|tool_call|>[…]`; qwen3_xml: Qwen3-Coder
 * `<function=…><parameter=…>`; glm45: GLM-4.5's `<tool_call>NAME<arg_key>…<arg_value>…`; pythonic: Llama 4's `[f(a=1)]`; harmony: gpt-oss's
 * `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{…}<|call|>`; json_envelope:
 * Sluice's fallback for templates with no tool syntax (docs/TOOLS.md).
 */
export type ToolFormatName = (typeof TOOL_FORMAT_NAMES)[number];

export const isToolFormatName = (v: unknown): v is ToolFormatName => typeof v === "string" && (TOOL_FORMAT_NAMES as readonly string[]).includes(v);
