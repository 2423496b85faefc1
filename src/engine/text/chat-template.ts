// Chat templates rendered with @huggingface/jinja the way transformers.js's apply_chat_template
// renders them (same variables, same choice among named templates), plus the mapping from OpenAI
// chat messages to the message shape Hugging Face templates expect.

import { Template } from "@huggingface/jinja";
import type { RenderHints, ToolFormat } from "../../structured/tools/index.ts";
import { toolConversation } from "../../structured/tools/render.ts";
import type { ChatMessage, FunctionTool, ToolChoice } from "../types.ts";
import type { ChatTemplates } from "./tokenizer.ts";

export class ChatTemplateError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ChatTemplateError";
  }
}

const errorText = (err: unknown) => (err instanceof Error ? err.message : String(err));

/** Messages as templates read them: plain objects, content a string or a list of parts. */
export type TemplateMessage = Record<string, unknown>;

export interface RenderOptions {
  messages: readonly TemplateMessage[];
  /** Tools as Hugging Face templates expect them ({type: "function", function: {...}}). */
  tools?: readonly unknown[] | null;
  documents?: readonly unknown[] | null;
  addGenerationPrompt?: boolean;
  /** bos_token, eos_token, … (TextTokenizer.templateTokens). */
  specialTokens?: Readonly<Record<string, string>>;
  /** Extra template variables, e.g. { enable_thinking: false }. */
  kwargs?: Readonly<Record<string, unknown>>;
}

// A template that loops over a message's content handles lists of parts itself; any other
// template reads content as a string (as vLLM decides between its two content formats).
const LOOPS_OVER_CONTENT = /\{%-?\s*for\s+\w+\s+in\s+(?:\w+\.content|\w+\[\s*['"]content['"]\s*\]|content)\s*[-%|]/;

export class CompiledChatTemplate {
  private readonly template: Template;
  /** Whether message content may be given as a list of parts rather than a string. */
  readonly acceptsContentParts: boolean;

  constructor(readonly source: string) {
    try {
      this.template = new Template(source);
    } catch (err) {
      throw new ChatTemplateError(`invalid chat template: ${errorText(err)}`);
    }
    this.acceptsContentParts = LOOPS_OVER_CONTENT.test(source);
  }

  render(options: RenderOptions): string {
    try {
      return this.template.render({
        messages: options.messages,
        add_generation_prompt: options.addGenerationPrompt ?? false,
        tools: options.tools ?? null,
        documents: options.documents ?? null,
        ...options.specialTokens,
        ...options.kwargs,
      });
    } catch (err) {
      throw new ChatTemplateError(errorText(err));
    }
  }
}

const compiled = new Map<string, CompiledChatTemplate>();

/** Compiles once per distinct template source. */
export function compileChatTemplate(source: string): CompiledChatTemplate {
  let t = compiled.get(source);
  if (!t) {
    t = new CompiledChatTemplate(source);
    compiled.set(source, t);
  }
  return t;
}

/** transformers' rule: the "tool_use" template when tools are given and one exists, else default. */
export function selectChatTemplate(templates: ChatTemplates, withTools: boolean): string {
  const source = (withTools ? templates.toolUse : null) ?? templates.default;
  if (source === null) {
    const names = Object.keys(templates.named);
    throw new ChatTemplateError(
      names.length > 0
        ? `this model has chat templates (${names.sort().join(", ")}) but none named "default"`
        : "this model has no chat template",
    );
  }
  return source;
}

function parseArguments(args: string): unknown {
  // Templates (Llama 3.1, Hermes, …) pass arguments through `tojson`, expecting a mapping, as
  // transformers documents; a string that is not a JSON object is passed on unchanged.
  try {
    const parsed: unknown = JSON.parse(args);
    return parsed !== null && typeof parsed === "object" && !Array.isArray(parsed) ? parsed : args;
  } catch {
    return args;
  }
}

/**
 * OpenAI chat messages -> the shape Hugging Face templates read. Null content becomes "" (many
 * templates test `'x' in message.content`), "developer" becomes "system" (templates know no
 * developer role), and lists of parts are joined with "\n" unless the template loops over parts.
 */
export function toTemplateMessages(messages: readonly ChatMessage[], acceptsContentParts: boolean, hints: RenderHints = {}): TemplateMessage[] {
  return messages.map((m, i) => {
    const out: TemplateMessage = { role: m.role === "developer" ? "system" : m.role };
    const calls = (m.tool_calls?.length ?? 0) > 0;
    if (typeof m.content === "string") out.content = m.content;
    else if (m.content === null) out.content = hints.nullContentWithCalls && calls ? null : "";
    else if (acceptsContentParts) {
      out.content = m.content.map((p) =>
        p.type === "text" ? { type: "text", text: p.text } : { type: "image", image_url: p.image_url.url },
      );
    } else {
      if (m.content.some((p) => p.type !== "text")) {
        throw new ChatTemplateError(`messages[${i}]: this model's chat template takes text only`);
      }
      out.content = m.content.map((p) => (p.type === "text" ? p.text : "")).join("\n");
    }
    if (m.name !== undefined) out.name = m.name;
    if (m.tool_calls && m.tool_calls.length > 0) {
      out.tool_calls = m.tool_calls.map((c) => ({
        id: c.id,
        type: c.type,
        function: { name: c.function.name, arguments: hints.argumentsAsText ? c.function.arguments : parseArguments(c.function.arguments) },
      }));
    }
    if (m.tool_call_id !== undefined) out.tool_call_id = m.tool_call_id;
    // Under the name Qwen3's (and vLLM's) templates read; templates that do not read it drop it.
    if (typeof m.reasoning_content === "string") out.reasoning_content = m.reasoning_content;
    return out;
  });
}

/** Tools in the form templates expect; `strict` is an API flag the model never sees. */
export function toTemplateTools(tools: readonly FunctionTool[]): unknown[] {
  return tools.map((t) => {
    const fn: Record<string, unknown> = { name: t.function.name };
    if (t.function.description !== undefined) fn.description = t.function.description;
    if (t.function.parameters !== undefined) fn.parameters = t.function.parameters;
    return { type: "function", function: fn };
  });
}

export interface ChatPromptOptions {
  tools?: readonly FunctionTool[];
  /** The model's tool-call format: how tools, calls and results are put into its template. */
  toolFormat?: ToolFormat | null;
  toolChoice?: ToolChoice;
  addGenerationPrompt?: boolean;
  kwargs?: Readonly<Record<string, unknown>>;
}

/** Renders an OpenAI conversation into the prompt text with the model's chat template. */
export function renderChatPrompt(
  tokenizer: { chatTemplates: ChatTemplates; templateTokens: Readonly<Record<string, string>> },
  messages: readonly ChatMessage[],
  options: ChatPromptOptions = {},
): string {
  const withTools = options.tools !== undefined && options.tools.length > 0;
  const source = selectChatTemplate(tokenizer.chatTemplates, withTools);
  const template = compileChatTemplate(source);
  const format = options.toolFormat ?? null;
  const conversation = format
    ? toolConversation(format, messages, options.tools, options.toolChoice, source)
    : { messages, tools: withTools ? options.tools! : null, systemFields: null };
  const rendered = toTemplateMessages(conversation.messages, template.acceptsContentParts, format?.render);
  if (conversation.systemFields) {
    const system = rendered.find((m) => m.role === "system");
    if (system) Object.assign(system, conversation.systemFields);
  }
  return template.render({
    messages: rendered,
    tools: conversation.tools && conversation.tools.length > 0 ? toTemplateTools(conversation.tools) : null,
    addGenerationPrompt: options.addGenerationPrompt ?? true,
    specialTokens: tokenizer.templateTokens,
    kwargs: options.kwargs,
  });
}
