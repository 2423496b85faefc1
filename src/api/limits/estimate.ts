// A request's token bound before it runs, as OpenAI estimates it for rate limits: the prompt
// (about four characters a token) plus the most it may generate. Settled with the real count after.
import type { ChatMessage, FunctionTool } from "../../protocol/chat.ts";

const CHARS_PER_TOKEN = 4;
// Role markers and separators of the chat template.
const PER_MESSAGE = 4;

function textOf(m: ChatMessage): number {
  let chars = 0;
  if (typeof m.content === "string") chars += m.content.length;
  else if (Array.isArray(m.content)) for (const p of m.content) chars += p.type === "text" ? p.text.length : 0;
  for (const c of m.tool_calls ?? []) chars += c.function.name.length + c.function.arguments.length;
  return chars;
}

export function estimatePromptTokens(messages: ChatMessage[], tools?: FunctionTool[]): number {
  let tokens = 0;
  for (const m of messages) tokens += PER_MESSAGE + Math.ceil(textOf(m) / CHARS_PER_TOKEN);
  if (tools?.length) tokens += Math.ceil(JSON.stringify(tools).length / CHARS_PER_TOKEN);
  return tokens;
}

/** Prompt estimate plus max_tokens per choice (or what the context leaves when it is not given). */
export function estimateRequestTokens(
  req: { messages: ChatMessage[]; tools?: FunctionTool[]; maxTokens?: number; n: number },
  contextLength: number,
): number {
  const prompt = estimatePromptTokens(req.messages, req.tools);
  const perChoice = req.maxTokens ?? Math.max(1, contextLength - prompt);
  return prompt + perChoice * Math.max(1, req.n);
}

// What a chat template may add around the messages: role markers per message, and a default
// system prompt some templates insert.
const TEMPLATE_TOKENS_PER_MESSAGE = 16;
const TEMPLATE_TOKENS = 64;
const utf8 = new TextEncoder();
const bytes = (s: string) => utf8.encode(s).length;

/**
 * The most tokens a request can be charged for, for the credit reserved before it runs: every
 * tokenizer served emits at most one token per byte of text (byte-level BPE, byte fallback), plus
 * the template's markers; an image may fill the context. Never above the context, per choice.
 */
export function worstCaseTokens(
  req: { messages: ChatMessage[]; tools?: FunctionTool[]; maxTokens?: number; n: number },
  contextLength: number,
): { prompt: number; completion: number } {
  let prompt = TEMPLATE_TOKENS;
  let images = false;
  for (const m of req.messages) {
    prompt += TEMPLATE_TOKENS_PER_MESSAGE;
    if (typeof m.content === "string") prompt += bytes(m.content);
    else if (Array.isArray(m.content)) for (const p of m.content) p.type === "text" ? (prompt += bytes(p.text)) : (images = true);
    for (const c of m.tool_calls ?? []) prompt += bytes(c.function.name) + bytes(c.function.arguments) + TEMPLATE_TOKENS_PER_MESSAGE;
  }
  if (req.tools?.length) prompt += bytes(JSON.stringify(req.tools));
  const perChoice = Math.min(req.maxTokens ?? contextLength, contextLength);
  return { prompt: images ? contextLength : Math.min(prompt, contextLength), completion: perChoice * Math.max(1, req.n) };
}
