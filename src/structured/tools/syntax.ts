// Which tool-call format a chat template shows (formats/index.ts holds the families).
import type { ToolFormatName } from "../../protocol/tools.ts";
import { detectToolFormat } from "./formats/index.ts";

export type ToolCallSyntax = ToolFormatName;

/** The format a chat template renders tool calls in; null when it shows none Sluice knows. */
export function detectToolCallSyntax(chatTemplate: string): ToolCallSyntax | null {
  return detectToolFormat(chatTemplate)?.name ?? null;
}
