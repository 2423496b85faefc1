// Sluice's generic format for chat templates with no tool syntax (docs/TOOLS.md): the tools are
// described at the end of the system turn and the whole answer is held to a JSON envelope,
// {"response": "…"} or {"tool_calls": [{"name": …, "arguments": {…}}]}, so tool_choice and strict
// hold on every model. Assistant calls and tool results in the history are rendered as the same
// envelope and as user turns (render.ts), since such templates know no tool roles.
import { alt, call, lit, seq } from "../../automaton.ts";
import { container, ROOT } from "../../layout.ts";
import { ENVELOPE_CALLS_KEY, ENVELOPE_RESPONSE_KEY, EnvelopeParser } from "../envelope.ts";
import type { ToolFormat } from "../format.ts";
import { toolLines } from "./describe.ts";
import { callObject } from "./json-family.ts";

export const jsonEnvelope: ToolFormat = {
  name: "json_envelope",
  // Never detected: it is the fallback when no other format is (tool-format.ts decides).
  detect: () => false,
  controlTokens: [],
  // Without the grammar the answer would not be an envelope, and nothing could be parsed.
  alwaysConstrained: true,
  parser: () => new EnvelopeParser(),
  grammar: (ctx) => {
    const calls = container(ROOT, "{", (s) => seq(lit(`"${ENVELOPE_CALLS_KEY}"`), s.colon, ctx.jsonCallList(s.child)), false);
    const text = call(ctx.compiler.rule({ type: "string" }, { type: "string" }, "/response", ROOT));
    const response = container(ROOT, "{", (s) => seq(lit(`"${ENVELOPE_RESPONSE_KEY}"`), s.colon, text), false);
    return { calls, auto: { whole: alt(response, calls) } };
  },
  render: {},
  writeCalls: (calls) => JSON.stringify({ [ENVELOPE_CALLS_KEY]: calls.map((c) => JSON.parse(callObject(c)) as unknown) }),
  describeTools: (tools) => envelopeInstructions(tools),
};

/** The system-turn text that describes the tools and the envelope (documented in docs/TOOLS.md). */
export function envelopeInstructions(tools: readonly { function: { name: string; description?: string; parameters?: Record<string, unknown> } }[]): string {
  return [
    "# Tools",
    "",
    "You can call these functions. Each line is one function's name, description and JSON Schema parameters:",
    toolLines(tools as never),
    "",
    "Answer with exactly one JSON object and nothing else:",
    `- to call functions: {"${ENVELOPE_CALLS_KEY}": [{"name": "<function name>", "arguments": {<arguments>}}]}`,
    `- to answer the user: {"${ENVELOPE_RESPONSE_KEY}": "<your answer>"}`,
    "Function results come back in a user turn that starts with \"Tool results:\".",
  ].join("\n");
}
