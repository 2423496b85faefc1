// Kimi K2: calls between <|tool_calls_section_begin|> and <|tool_calls_section_end|>, each
// <|tool_call_begin|>functions.NAME:INDEX<|tool_call_argument_begin|>ARGS<|tool_call_end|>, as
// moonshotai/Kimi-K2-Instruct's chat template renders them (its tokenizer_config.json; the call id
// `functions.NAME:INDEX` is what the template writes for an assistant's tool_calls).
import { alt, byteClass, EMPTY, lit, rep, seq } from "../../automaton.ts";
import { DelimitedParser } from "../delimited.ts";
import type { ToolFormat } from "../format.ts";
import { toolLines } from "./describe.ts";

const SECTION_BEGIN = "<|tool_calls_section_begin|>";
const SECTION_END = "<|tool_calls_section_end|>";
const CALL_BEGIN = "<|tool_call_begin|>";
const ARGS_BEGIN = "<|tool_call_argument_begin|>";
const CALL_END = "<|tool_call_end|>";

export const kimiK2: ToolFormat = {
  name: "kimi_k2",
  detect: (t) => t.includes(SECTION_BEGIN),
  controlTokens: [SECTION_BEGIN, SECTION_END, CALL_BEGIN, ARGS_BEGIN, CALL_END],
  parser: () =>
    new DelimitedParser({
      start: SECTION_BEGIN,
      head: [{ ws: true }, { lit: CALL_BEGIN }, { lit: "functions." }, { name: /[^\s:<]/ }, { lit: ":" }, { skip: /[0-9]/ }, { ws: true }, { lit: ARGS_BEGIN }, { ws: true }],
      tail: [{ ws: true }, { lit: CALL_END }],
      next: [],
      end: [{ ws: true }, { lit: SECTION_END }],
    }),
  grammar: (ctx) => {
    // The index counts the turn's calls; the grammar allows any of up to two digits.
    const index = rep(byteClass([0x30, 0x39]), 1, 2);
    const one = alt(...ctx.tools.map((t, i) => seq(lit(`${CALL_BEGIN}functions.${t.function.name}:`), index, lit(ARGS_BEGIN), ctx.argsRe(i), lit(CALL_END))));
    return { calls: seq(lit(SECTION_BEGIN), ctx.repeat(one, EMPTY), lit(SECTION_END)), auto: { text: ctx.textWithout([SECTION_BEGIN]), order: "text-then-calls" } };
  },
  // Its template writes each call's id where the model wrote `functions.NAME:INDEX`, and the arguments as text.
  render: { argumentsAsText: true, callId: (name, index) => `functions.${name}:${index}` },
  writeCalls: (calls) =>
    `${SECTION_BEGIN}${calls.map((c, i) => `${CALL_BEGIN}functions.${c.name}:${i}${ARGS_BEGIN}${c.arguments}${CALL_END}`).join("")}${SECTION_END}`,
  describeTools: (tools) => `# Tools\n\n${toolLines(tools)}\n\nTo call tools, write ${SECTION_BEGIN}${CALL_BEGIN}functions.<name>:<index>${ARGS_BEGIN}<arguments as JSON>${CALL_END}${SECTION_END}.`,
};
