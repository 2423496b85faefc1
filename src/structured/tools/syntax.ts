// The tool-call syntaxes models are trained on, and how to recognise them from a chat template.

export type ToolCallSyntax = "hermes" | "llama3" | "mistral";

/** Markers that open tool calls in each syntax (Llama 3.1 may also open with a bare "{"). */
export const START_MARKERS: Record<ToolCallSyntax, readonly string[]> = {
  hermes: ["<tool_call>"],
  llama3: ["<|python_tag|>"],
  mistral: ["[TOOL_CALLS]"],
};

export const HERMES_END = "</tool_call>";

/**
 * The syntax a chat template renders tool calls in, found by its markers; null when the template
 * shows no tool-call syntax we know.
 */
export function detectToolCallSyntax(chatTemplate: string): ToolCallSyntax | null {
  if (chatTemplate.includes("<tool_call>")) return "hermes";
  if (chatTemplate.includes("[TOOL_CALLS]")) return "mistral";
  if (chatTemplate.includes("<|python_tag|>")) return "llama3";
  // Llama 3.x templates without built-in tools still describe the JSON call format.
  if (chatTemplate.includes("<|start_header_id|>") && /"parameters"/.test(chatTemplate)) return "llama3";
  return null;
}
