// The families whose calls are JSON objects {"name": …, "arguments": {…}} inside their markers:
// Hermes, Llama 3.1, Mistral, Phi-4-mini, Granite. They differ only in markers and framing.
import { alt, lit, opt, seq, star } from "../../automaton.ts";
import { WS_BYTES } from "../../json-text.ts";
import { ROOT } from "../../layout.ts";
import type { ToolFormat, WrittenCall } from "../format.ts";
import { JsonCallsParser } from "../stream.ts";
import { toolLines } from "./describe.ts";

/** A call as a JSON object, its arguments as the JSON they are (text kept when it is not JSON). */
export function callObject(c: WrittenCall, argsKey = "arguments"): string {
  let args: unknown = c.arguments;
  try {
    args = JSON.parse(c.arguments);
  } catch {
    // Kept as the text the client sent.
  }
  return JSON.stringify({ name: c.name, [argsKey]: args });
}

const callList = (calls: readonly WrittenCall[]) => `[${calls.map((c) => callObject(c)).join(", ")}]`;

export const HERMES_START = "<tool_call>";
export const HERMES_END = "</tool_call>";

export const hermes: ToolFormat = {
  name: "hermes",
  detect: (t) => t.includes(HERMES_START),
  controlTokens: [],
  parser: () => new JsonCallsParser({ markers: [HERMES_START], list: false, callEnd: HERMES_END }),
  grammar: (ctx) => {
    const one = seq(lit(HERMES_START), lit("\n"), ctx.jsonCallRe(ROOT), lit("\n"), lit(HERMES_END));
    return { calls: ctx.repeat(one, lit("\n")), auto: { text: ctx.textWithout([HERMES_START]), order: "text-then-calls" } };
  },
  render: {},
  writeCalls: (calls) => calls.map((c) => `${HERMES_START}\n${callObject(c)}\n${HERMES_END}`).join("\n"),
  describeTools: (tools) =>
    `# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n${toolLines(tools)}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>`,
};

const PYTHON_TAG = "<|python_tag|>";

export const llama3: ToolFormat = {
  name: "llama3",
  detect: (t) => t.includes(PYTHON_TAG) || (t.includes("<|start_header_id|>") && /"parameters"/.test(t)),
  controlTokens: [],
  parser: () => new JsonCallsParser({ markers: [PYTHON_TAG], list: false, bareAtStart: true, separator: ";" }),
  grammar: (ctx) => {
    // Each call is a document of its own; between two, a semicolon with at most one blank either side.
    const between = seq(opt(lit(" ")), lit(";"), opt(alt(lit(" "), lit("\n"))));
    // Free text must not open like a call (a leading "{" after whitespace).
    const text = ctx.textWithout([PYTHON_TAG], seq(star(WS_BYTES), lit("{")));
    return { calls: ctx.repeat(ctx.jsonCallRe(ROOT, "parameters"), between), auto: { text, order: "text-or-calls" } };
  },
  render: {},
  writeCalls: (calls) => `${PYTHON_TAG}${calls.map((c) => callObject(c, "parameters")).join("; ")}`,
  describeTools: (tools) =>
    `Given the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\n\nRespond in the format {"name": function name, "parameters": dictionary of argument name and its value}. Do not use variables.\n\n${toolLines(tools)}`,
};

const TOOL_CALLS = "[TOOL_CALLS]";

export const mistral: ToolFormat = {
  name: "mistral",
  detect: (t) => t.includes(TOOL_CALLS),
  // [TOOL_CALLS] is a control token the grammar must be able to produce as text.
  controlTokens: [TOOL_CALLS],
  parser: () => new JsonCallsParser({ markers: [TOOL_CALLS], list: true, compact: true }),
  grammar: (ctx) => ({ calls: seq(lit(TOOL_CALLS), ctx.jsonCallList()), auto: { text: ctx.textWithout([TOOL_CALLS]), order: "text-then-calls" } }),
  // Mistral's templates refuse call ids that are not 9 characters (mistral_common's are 9 letters and digits).
  render: { callId: (_name, index) => String(index).padStart(9, "0") },
  writeCalls: (calls) => `${TOOL_CALLS}${callList(calls)}`,
  describeTools: (tools) => `[AVAILABLE_TOOLS]${JSON.stringify(tools.map((t) => ({ type: "function", function: t.function })))}[/AVAILABLE_TOOLS]`,
};

const PHI_CALL = "<|tool_call|>";
const PHI_CALL_END = "<|/tool_call|>";
// Phi-4-mini-instruct's first release wrote its calls as `functools[…]` (vLLM's phi4_mini_json).
const FUNCTOOLS = "functools";

export const phi4Mini: ToolFormat = {
  name: "phi4_mini",
  detect: (t) => t.includes("<|tool|>") && t.includes("<|/tool|>"),
  controlTokens: [PHI_CALL, PHI_CALL_END],
  parser: () => new JsonCallsParser({ markers: [PHI_CALL, FUNCTOOLS], list: true, listEnd: PHI_CALL_END }),
  grammar: (ctx) => ({
    calls: seq(lit(PHI_CALL), ctx.jsonCallList(), lit(PHI_CALL_END)),
    auto: { text: ctx.textWithout([PHI_CALL, FUNCTOOLS]), order: "text-then-calls" },
  }),
  render: { toolsInSystemMessage: true },
  writeCalls: (calls) => `${PHI_CALL}${callList(calls)}${PHI_CALL_END}`,
  describeTools: (tools) => `<|tool|>${JSON.stringify(tools.map((t) => t.function))}<|/tool|>`,
};

export const granite: ToolFormat = {
  name: "granite",
  detect: (t) => t.includes(PHI_CALL) && t.includes("<|start_of_role|>"),
  controlTokens: [PHI_CALL],
  parser: () => new JsonCallsParser({ markers: [PHI_CALL], list: true }),
  grammar: (ctx) => ({ calls: seq(lit(PHI_CALL), ctx.jsonCallList()), auto: { text: ctx.textWithout([PHI_CALL]), order: "text-then-calls" } }),
  render: {},
  writeCalls: (calls) => `${PHI_CALL}${callList(calls)}`,
  describeTools: (tools) =>
    `You are a helpful assistant with access to the following function calls. Your task is to produce a list of function calls necessary to generate response to the user utterance. Use the following function calls as required.\n${toolLines(tools)}\n\nWrite the calls as ${PHI_CALL}[{"name": <function-name>, "arguments": <args-json-object>}].`,
};
