// GLM-4.5's XML calls: `<tool_call>NAME\n<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>\n…</tool_call>`,
// as zai-org/GLM-4.5's chat template renders an assistant's tool_calls (and vLLM's glm45 parser
// reads them). String values raw, others JSON; the XML parser shared with Qwen3-Coder reads them.
import { alt, lit, seq } from "../../automaton.ts";
import type { ToolFormat, WrittenCall } from "../format.ts";
import { toolLines } from "./describe.ts";
import { GLM_PARAM, GLM_XML, parametersRe, XmlCallsParser, xmlParameters } from "./qwen3-xml.ts";

const START = "<tool_call>";
const END = "</tool_call>";

export const glm45: ToolFormat = {
  name: "glm45",
  detect: (t) => t.includes("<arg_key>") && t.includes("<arg_value>"),
  controlTokens: [],
  parser: (tools) => new XmlCallsParser(tools, GLM_XML),
  grammar: (ctx) => {
    const one = alt(...ctx.tools.map((t, i) => seq(lit(`${START}${t.function.name}\n`), parametersRe(ctx, i, GLM_PARAM), lit(END))));
    return { calls: ctx.repeat(one, lit("\n")), auto: { text: ctx.textWithout([START]), order: "text-then-calls" } };
  },
  render: {},
  writeCalls: (calls: readonly WrittenCall[]) =>
    calls
      .map((c) => {
        const params = xmlParameters(c.arguments).map(([k, v]) => `<arg_key>${k}</arg_key>\n<arg_value>${v}</arg_value>\n`);
        return `${START}${c.name}\n${params.join("")}${END}`;
      })
      .join("\n"),
  describeTools: (tools) =>
    `# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n${toolLines(tools)}\n</tools>\n\nFor each function call, output the function name and arguments within the following XML format:\n${START}{function-name}\n<arg_key>{arg-key-1}</arg_key>\n<arg_value>{arg-value-1}</arg_value>\n...\n${END}`,
};
