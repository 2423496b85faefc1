// Which tool-call format a model's calls are written, parsed and constrained in: sluice.json's
// `tool_format` when it names one, else the family its chat template shows, else Sluice's generic
// JSON envelope (docs/TOOLS.md) unless sluice.json's `tool_fallback` is false.
import { isToolFormatName, TOOL_FORMAT_NAMES, type ToolFormatName } from "../protocol/tools.ts";
import { detectToolFormat, toolFormat, type ToolFormat } from "../structured/tools/index.ts";
import type { ChatTemplates } from "./text/tokenizer.ts";

export interface ToolFormatCard {
  /** A format's name (protocol/tools.ts), or "none": the model takes no tools. */
  tool_format?: unknown;
  /** false: a template with no known tool syntax takes no tools rather than the JSON envelope. */
  tool_fallback?: unknown;
}

/** Why a card's tool settings cannot be used, or null. */
export function toolCardProblem(card: ToolFormatCard): string | null {
  const f = card.tool_format;
  if (f !== undefined && f !== "none" && !(isToolFormatName(f) && toolFormat(f))) {
    return `sluice.json's tool_format ${JSON.stringify(f)} is not one of none, ${TOOL_FORMAT_NAMES.filter((n) => toolFormat(n)).join(", ")}`;
  }
  if (card.tool_fallback !== undefined && typeof card.tool_fallback !== "boolean") return "sluice.json's tool_fallback must be true or false";
  return null;
}

/** Every template a model has, as one text to look for markers in. */
export const templateText = (t: ChatTemplates): string => [t.toolUse, t.default, ...Object.values(t.named)].filter((x): x is string => !!x).join("\n");

/** The model's tool format, or null: requests with tools are refused (tools_not_supported). */
export function resolveToolFormat(card: ToolFormatCard, templates: ChatTemplates): ToolFormat | null {
  const problem = toolCardProblem(card);
  if (problem) throw new Error(problem);
  if (card.tool_format === "none") return null;
  if (card.tool_format !== undefined) return toolFormat(card.tool_format as ToolFormatName);
  const detected = detectToolFormat(templateText(templates));
  if (detected) return detected;
  return card.tool_fallback === false ? null : toolFormat("json_envelope");
}
