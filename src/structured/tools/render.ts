// The conversation as a format's chat template needs it when tools are in play: the tools
// described in the system turn when the template does not render `tools` itself, and, for the
// JSON envelope, assistant calls and tool results written as that envelope and as user turns
// (templates without tool syntax know no tool roles, and many insist that user and assistant
// alternate).
import type { ChatMessage, FunctionTool, ToolChoice } from "../../protocol/chat.ts";
import type { ToolFormat } from "./format.ts";
import { ENVELOPE_CALLS_KEY, ENVELOPE_RESPONSE_KEY } from "./envelope.ts";

/** Whether a chat template renders the `tools` variable (else the tools go into the system turn). */
export const templateRendersTools = (source: string): boolean => /\btools\b/.test(source);

export interface ToolConversation {
  messages: ChatMessage[];
  /** The tools to hand to the template's `tools` variable (null: the template is not given them). */
  tools: readonly FunctionTool[] | null;
}

const textOf = (content: ChatMessage["content"]): string =>
  content === null ? "" : typeof content === "string" ? content : content.map((p) => (p.type === "text" ? p.text : "")).join("\n");

/** Appends `text` to the system turn, making one at the start when there is none. */
function withSystemText(messages: ChatMessage[], text: string): ChatMessage[] {
  const i = messages.findIndex((m) => m.role === "system" || m.role === "developer");
  if (i < 0) return [{ role: "system", content: text }, ...messages];
  const m = messages[i]!;
  const prior = textOf(m.content);
  return messages.map((x, j) => (j === i ? { ...m, role: "system", content: prior ? `${prior}\n\n${text}` : text } : x));
}

function argumentsValue(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/**
 * Envelope history: calls as {"tool_calls": …}, results as user turns, and (when tools are
 * offered, so the answer will be an envelope too) answers as {"response": …}.
 */
function envelopeHistory(messages: readonly ChatMessage[], wrapAnswers: boolean): ChatMessage[] {
  const out: ChatMessage[] = [];
  const names = new Map<string, string>();
  for (const m of messages) {
    if (m.role === "assistant") {
      const calls = m.tool_calls ?? [];
      for (const c of calls) names.set(c.id, c.function.name);
      const text = textOf(m.content);
      if (calls.length === 0 && !wrapAnswers) {
        out.push(m);
        continue;
      }
      const envelope =
        calls.length > 0
          ? { [ENVELOPE_CALLS_KEY]: calls.map((c) => ({ name: c.function.name, arguments: argumentsValue(c.function.arguments) })) }
          : { [ENVELOPE_RESPONSE_KEY]: text };
      out.push({ role: "assistant", content: JSON.stringify(envelope) });
    } else if (m.role === "tool") {
      const name = (m.tool_call_id && names.get(m.tool_call_id)) ?? m.name ?? "tool";
      const line = `${JSON.stringify({ name, tool_call_id: m.tool_call_id ?? null, result: textOf(m.content) })}`;
      const last = out[out.length - 1];
      // Results of one turn's calls go together into one user turn, after "Tool results:".
      if (last?.role === "user" && typeof last.content === "string" && last.content.startsWith("Tool results:")) {
        out[out.length - 1] = { ...last, content: `${last.content}\n${line}` };
      } else out.push({ role: "user", content: `Tool results:\n${line}` });
    } else out.push(m);
  }
  return out;
}

/**
 * The messages and tools to render for a request in `format`. With tool_choice "none" and the
 * envelope, the tools are not offered (the answer is free text), but the history still renders.
 */
export function toolConversation(
  format: ToolFormat,
  messages: readonly ChatMessage[],
  tools: readonly FunctionTool[] | undefined,
  toolChoice: ToolChoice | undefined,
  templateSource: string,
): ToolConversation {
  const offered = tools && tools.length > 0 ? tools : null;
  if (format.name === "json_envelope") {
    const offer = offered !== null && toolChoice !== "none";
    const history = envelopeHistory(messages, offer);
    return { messages: offer ? withSystemText(history, format.describeTools(offered)) : history, tools: null };
  }
  if (!offered || templateRendersTools(templateSource)) return { messages: [...messages], tools: offered };
  return { messages: withSystemText([...messages], format.describeTools(offered)), tools: offered };
}
