// The conversation as a format's chat template needs it when tools are in play: the tools
// described in the system turn when the template does not render `tools` itself, and, for the
// JSON envelope, assistant calls and tool results written as that envelope and as user turns
// (templates without tool syntax know no tool roles, and many insist that user and assistant
// alternate).
import type { ChatMessage, FunctionTool, ToolChoice } from "../../protocol/chat.ts";
import type { ToolFormat } from "./format.ts";
import { ENVELOPE_RESPONSE_KEY } from "./envelope.ts";

/** Whether a chat template renders the `tools` variable (else the tools go into the system turn). */
export const templateRendersTools = (source: string): boolean => /\btools\b/.test(source);

export interface ToolConversation {
  messages: ChatMessage[];
  /** The tools to hand to the template's `tools` variable (null: the template is not given them). */
  tools: readonly FunctionTool[] | null;
  /** Fields for the first system message as the template reads it (Phi-4-mini's `tools`). */
  systemFields: Record<string, unknown> | null;
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

/**
 * Envelope history: calls as {"tool_calls": …}, results as user turns, and (when tools are
 * offered, so the answer will be an envelope too) answers as {"response": …}.
 */
function envelopeHistory(format: ToolFormat, messages: readonly ChatMessage[], wrapAnswers: boolean): ChatMessage[] {
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
      const envelope = calls.length > 0 ? format.writeCalls(calls.map((c) => c.function)) : JSON.stringify({ [ENVELOPE_RESPONSE_KEY]: text });
      out.push({ role: "assistant", content: envelope });
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
    const history = envelopeHistory(format, messages, offer);
    return { messages: offer ? withSystemText(history, format.describeTools(offered)) : history, tools: null, systemFields: null };
  }
  let history = renameCalls(format, messages);
  // A template that does not render an assistant's tool_calls gets them written into its content.
  if (!/\btool_calls\b/.test(templateSource)) {
    history = history.map((m) => {
      if (m.role !== "assistant" || !m.tool_calls?.length) return m;
      const { tool_calls: calls, ...rest } = m;
      return { ...rest, content: textOf(m.content) + format.writeCalls(calls.map((c) => c.function)) };
    });
  }
  if (!offered) return { messages: history, tools: null, systemFields: null };
  if (format.render.toolsInSystemMessage) {
    if (!history.some((m) => m.role === "system" || m.role === "developer")) history = [{ role: "system", content: "" }, ...history];
    return { messages: history, tools: offered, systemFields: { tools: JSON.stringify(offered.map((t) => toolDeclaration(t))) } };
  }
  if (templateRendersTools(templateSource)) return { messages: history, tools: offered, systemFields: null };
  return { messages: withSystemText(history, format.describeTools(offered)), tools: offered, systemFields: null };
}

const toolDeclaration = (t: FunctionTool) => ({ name: t.function.name, ...(t.function.description ? { description: t.function.description } : {}), parameters: t.function.parameters ?? { type: "object" } });

/** Call ids as the family's template writes them (Kimi's `functions.NAME:INDEX`), tool results following. */
function renameCalls(format: ToolFormat, messages: readonly ChatMessage[]): ChatMessage[] {
  const callId = format.render.callId;
  if (!callId) return [...messages];
  const renamed = new Map<string, string>();
  let n = 0;
  return messages.map((m) => {
    if (m.role === "assistant" && m.tool_calls?.length) {
      return {
        ...m,
        tool_calls: m.tool_calls.map((c) => {
          const id = callId(c.function.name, n++);
          renamed.set(c.id, id);
          return { ...c, id };
        }),
      };
    }
    if (m.role === "tool" && m.tool_call_id && renamed.has(m.tool_call_id)) return { ...m, tool_call_id: renamed.get(m.tool_call_id)! };
    return m;
  });
}
