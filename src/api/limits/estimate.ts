// A request's token bound before it runs, as OpenAI estimates it for rate limits: the prompt
// (about four characters a token) plus the most it may generate. Settled with the real count after.
import type { ChatMessage, FunctionTool } from "../../engine/types.ts";

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
