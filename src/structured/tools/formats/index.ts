// Every tool-call format Sluice knows, in the order detection tries them (the more specific
// markers first: harmony's <|call|> before all; Qwen3-Coder's XML also shows <tool_call>, Granite's and Phi's share <|tool_call|>).
import type { ToolFormatName } from "../../../protocol/tools.ts";
import type { ToolFormat } from "../format.ts";
import { deepseekV3, deepseekV31 } from "./deepseek.ts";
import { glm45 } from "./glm45.ts";
import { harmony } from "./harmony.ts";
import { jsonEnvelope } from "./json-envelope.ts";
import { granite, hermes, llama3, mistral, phi4Mini } from "./json-family.ts";
import { kimiK2 } from "./kimi.ts";
import { pythonic } from "./pythonic.ts";
import { qwen3Xml } from "./qwen3-xml.ts";

const DETECTION_ORDER: readonly ToolFormat[] = [harmony, kimiK2, deepseekV31, deepseekV3, qwen3Xml, glm45, phi4Mini, granite, hermes, mistral, pythonic, llama3];

const BY_NAME = new Map<ToolFormatName, ToolFormat>([...DETECTION_ORDER, jsonEnvelope].map((f) => [f.name, f]));

/** The format a chat template renders tool calls in, or null when it shows none Sluice knows. */
export function detectToolFormat(chatTemplate: string): ToolFormat | null {
  return DETECTION_ORDER.find((f) => f.detect(chatTemplate)) ?? null;
}

/** The format of this name, or null when Sluice has none by that name (yet). */
export function toolFormat(name: ToolFormatName): ToolFormat | null {
  return BY_NAME.get(name) ?? null;
}

/** The names Sluice can parse and constrain. */
export const implementedToolFormats = (): ToolFormatName[] => [...BY_NAME.keys()];
