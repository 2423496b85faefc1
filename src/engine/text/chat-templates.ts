// A model directory's chat templates and JSON files, read without its tokenizer: what discovery
// needs at start (a model's tool format comes from its template), in a module that does not load
// the tokenizers addon, since the CLI imports discovery for every command (the binary unpacks its
// native libraries when an addon is first imported, before --cache-dir has been read).
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";

/** Chat templates found in the model directory; `default` is what a plain chat renders with. */
export interface ChatTemplates {
  default: string | null;
  /** The template named "tool_use", used when tools are given (as transformers does). */
  toolUse: string | null;
  named: Record<string, string>;
}

export type Json = Record<string, unknown>;

export function readJson(path: string): Json | null {
  if (!existsSync(path)) return null;
  const parsed: unknown = JSON.parse(readFileSync(path, "utf8"));
  return parsed !== null && typeof parsed === "object" && !Array.isArray(parsed) ? (parsed as Json) : null;
}

/** The chat templates of a model directory, read without loading its tokenizer. */
export const chatTemplatesOf = (dir: string): ChatTemplates => readChatTemplates(dir, readJson(join(dir, "tokenizer_config.json")));

export function readChatTemplates(dir: string, tokenizerConfig: Json | null): ChatTemplates {
  const named: Record<string, string> = {};
  const raw = tokenizerConfig?.chat_template;
  let single: string | null = null;
  if (typeof raw === "string") single = raw;
  else if (Array.isArray(raw)) {
    for (const entry of raw) {
      if (entry && typeof entry === "object" && typeof entry.name === "string" && typeof entry.template === "string") {
        named[entry.name] = entry.template;
      }
    }
  }
  // Newer checkpoints ship the template as a separate file; transformers prefers it when present.
  const jinjaPath = join(dir, "chat_template.jinja");
  if (existsSync(jinjaPath)) single = readFileSync(jinjaPath, "utf8");
  const jsonPath = join(dir, "chat_template.json");
  if (single === null && Object.keys(named).length === 0 && existsSync(jsonPath)) {
    const t = readJson(jsonPath)?.chat_template;
    if (typeof t === "string") single = t;
  }
  return {
    default: single ?? named.default ?? null,
    toolUse: named.tool_use ?? null,
    named,
  };
}

