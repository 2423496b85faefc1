// Tool descriptions for templates that do not render `tools` themselves: each function's name,
// description and parameters as JSON, the way the families' own system prompts list them.
import type { FunctionTool } from "../../../protocol/chat.ts";

/** One JSON line per tool: {"name", "description", "parameters"}. */
export function toolLines(tools: readonly FunctionTool[]): string {
  return tools
    .map((t) => JSON.stringify({ name: t.function.name, ...(t.function.description ? { description: t.function.description } : {}), parameters: t.function.parameters ?? { type: "object" } }))
    .join("\n");
}
