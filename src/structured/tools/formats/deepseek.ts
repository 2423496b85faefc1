// DeepSeek V3 and R1 (and R1's distills that keep its template): calls between
// <｜tool▁calls▁begin｜> and <｜tool▁calls▁end｜>, each
// <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>, as the model's own
// chat template (tokenizer_config.json of deepseek-ai/DeepSeek-V3) renders assistant tool calls.
import { alt, EMPTY, lit, seq } from "../../automaton.ts";
import { DelimitedParser } from "../delimited.ts";
import type { ToolFormat } from "../format.ts";
import { toolLines } from "./describe.ts";

const CALLS_BEGIN = "<｜tool▁calls▁begin｜>";
const CALLS_END = "<｜tool▁calls▁end｜>";
const CALL_BEGIN = "<｜tool▁call▁begin｜>";
const CALL_END = "<｜tool▁call▁end｜>";
const SEP = "<｜tool▁sep｜>";

export const deepseekV3: ToolFormat = {
  name: "deepseek_v3",
  detect: (t) => t.includes(CALLS_BEGIN),
  controlTokens: [CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP],
  parser: () =>
    new DelimitedParser({
      start: CALLS_BEGIN,
      head: [{ ws: true }, { lit: CALL_BEGIN }, { skip: /[a-z_]/ }, { lit: SEP }, { name: /[^\s<｜`]/ }, { ws: true }, { lit: "```json" }, { ws: true }],
      tail: [{ ws: true }, { lit: "```" }, { ws: true }, { lit: CALL_END }],
      next: [],
      end: [{ ws: true }, { lit: CALLS_END }],
    }),
  grammar: (ctx) => {
    const one = alt(...ctx.tools.map((t, i) => seq(lit(`${CALL_BEGIN}function${SEP}${t.function.name}\n\`\`\`json\n`), ctx.argsRe(i), lit(`\n\`\`\`${CALL_END}`))));
    return { calls: seq(lit(CALLS_BEGIN), ctx.repeat(one, lit("\n")), lit(CALLS_END)), auto: { text: ctx.textWithout([CALLS_BEGIN]), order: "text-then-calls" } };
  },
  // The template concatenates the arguments into the prompt and tests `content is none`.
  render: { argumentsAsText: true, nullContentWithCalls: true },
  writeCalls: (calls) =>
    `${CALLS_BEGIN}${calls.map((c) => `${CALL_BEGIN}function${SEP}${c.name}\n\`\`\`json\n${c.arguments}\n\`\`\`${CALL_END}`).join("\n")}${CALLS_END}`,
  describeTools: (tools) =>
    `## Tools\n\nYou have the following functions available:\n\n${toolLines(tools)}\n\nTo call functions, write:\n${CALLS_BEGIN}${CALL_BEGIN}function${SEP}<function name>\n\`\`\`json\n<arguments as a JSON object>\n\`\`\`${CALL_END}${CALLS_END}`,
};

/**
 * DeepSeek V3.1 (and V3.2's chat format): the same markers without the type and the fenced block,
 * `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>`, as deepseek-ai/DeepSeek-V3.1's chat
 * template renders them. Detected before V3 (its template shows the name right after the call's
 * opening marker).
 */
export const deepseekV31: ToolFormat = {
  name: "deepseek_v31",
  detect: (t) => t.includes(CALLS_BEGIN) && /tool▁call▁begin｜>'\s*\+\s*tool\[?\.?['"]?function/.test(t),
  controlTokens: [CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP],
  parser: () =>
    new DelimitedParser({
      start: CALLS_BEGIN,
      head: [{ ws: true }, { lit: CALL_BEGIN }, { name: /[^\s<｜`]/ }, { lit: SEP }, { ws: true }],
      tail: [{ ws: true }, { lit: CALL_END }],
      next: [],
      end: [{ ws: true }, { lit: CALLS_END }],
    }),
  grammar: (ctx) => {
    const one = alt(...ctx.tools.map((t, i) => seq(lit(`${CALL_BEGIN}${t.function.name}${SEP}`), ctx.argsRe(i), lit(CALL_END))));
    return { calls: seq(lit(CALLS_BEGIN), ctx.repeat(one, EMPTY), lit(CALLS_END)), auto: { text: ctx.textWithout([CALLS_BEGIN]), order: "text-then-calls" } };
  },
  render: { argumentsAsText: true, nullContentWithCalls: true },
  writeCalls: (calls) => `${CALLS_BEGIN}${calls.map((c) => `${CALL_BEGIN}${c.name}${SEP}${c.arguments}${CALL_END}`).join("")}${CALLS_END}`,
  describeTools: (tools) =>
    `## Tools\n\nYou have access to the following tools:\n\n${toolLines(tools)}\n\nTo call tools, write:\n${CALLS_BEGIN}${CALL_BEGIN}<tool name>${SEP}<arguments as a JSON object>${CALL_END}${CALLS_END}`,
};
