// How a conversation with tools is prepared for a format's template (src/structured/tools/render.ts).
import { describe, expect, test } from "bun:test";
import type { ChatMessage, FunctionTool } from "../../src/protocol/chat.ts";
import { toolFormat } from "../../src/structured/tools/index.ts";
import { toolConversation } from "../../src/structured/tools/render.ts";

const tools: FunctionTool[] = [{ type: "function", function: { name: "get_weather", description: "Weather", parameters: { type: "object", properties: { city: { type: "string" } } } } }];
const history: ChatMessage[] = [
  { role: "system", content: "Be brief." },
  { role: "user", content: "Weather in Oslo and Rome?" },
  {
    role: "assistant",
    content: null,
    tool_calls: [
      { id: "call_a", type: "function", function: { name: "get_weather", arguments: '{"city":"Oslo"}' } },
      { id: "call_b", type: "function", function: { name: "get_weather", arguments: '{"city":"Rome"}' } },
    ],
  },
  { role: "tool", tool_call_id: "call_a", content: "12 degrees" },
  { role: "tool", tool_call_id: "call_b", content: "25 degrees" },
  { role: "assistant", content: "Oslo 12, Rome 25." },
  { role: "user", content: "Thanks" },
];

describe("json_envelope", () => {
  const envelope = toolFormat("json_envelope")!;
  test("calls become the envelope, one turn's results one user turn, answers {response}; the tools end the system turn", () => {
    const c = toolConversation(envelope, history, tools, "auto", "{{ messages }}");
    expect(c.tools).toBeNull();
    expect(c.messages.map((m) => m.role)).toEqual(["system", "user", "assistant", "user", "assistant", "user"]);
    expect(c.messages[0]!.content).toStartWith("Be brief.\n\n# Tools");
    expect(c.messages[0]!.content).toContain('{"name":"get_weather","description":"Weather","parameters":');
    expect(JSON.parse(c.messages[2]!.content as string)).toEqual({ tool_calls: [{ name: "get_weather", arguments: { city: "Oslo" } }, { name: "get_weather", arguments: { city: "Rome" } }] });
    const results = (c.messages[3]!.content as string).split("\n");
    expect(results[0]).toBe("Tool results:");
    expect(results.slice(1).map((l) => JSON.parse(l))).toEqual([
      { name: "get_weather", tool_call_id: "call_a", result: "12 degrees" },
      { name: "get_weather", tool_call_id: "call_b", result: "25 degrees" },
    ]);
    expect(JSON.parse(c.messages[4]!.content as string)).toEqual({ response: "Oslo 12, Rome 25." });
  });

  test("tool_choice none: no tool instructions, plain answers stay plain, calls still render", () => {
    const c = toolConversation(envelope, history, tools, "none", "");
    expect(c.messages[0]!.content).toBe("Be brief.");
    expect(c.messages[4]!.content).toBe("Oslo 12, Rome 25.");
    expect(c.messages[2]!.content).toContain('"tool_calls"');
  });

  test("a conversation without a system turn gets one", () => {
    const c = toolConversation(envelope, [{ role: "user", content: "hi" }], tools, "required", "");
    expect(c.messages[0]!.role).toBe("system");
    expect(c.messages[0]!.content).toStartWith("# Tools");
  });
});

describe("native formats", () => {
  test("Kimi K2: call ids as functions.NAME:INDEX across the conversation, results following", () => {
    const c = toolConversation(toolFormat("kimi_k2")!, history, tools, "auto", "{{ tools }}{{ m.tool_calls }}");
    expect(c.messages[2]!.tool_calls!.map((t) => t.id)).toEqual(["functions.get_weather:0", "functions.get_weather:1"]);
    expect(c.messages.filter((m) => m.role === "tool").map((m) => m.tool_call_id)).toEqual(["functions.get_weather:0", "functions.get_weather:1"]);
    expect(c.tools).toEqual(tools);
  });

  test("a template that renders neither tools nor tool_calls: the family's description in the system turn, calls in its syntax in the content", () => {
    const c = toolConversation(toolFormat("deepseek_v3")!, history, tools, "auto", "{{ messages }}");
    expect(c.messages[0]!.content).toContain("## Tools");
    expect(c.messages[2]!.tool_calls).toBeUndefined();
    expect(c.messages[2]!.content).toBe(
      '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"city":"Oslo"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"city":"Rome"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    );
  });

  test("Mistral: call ids as the 9 characters its templates insist on, results following", () => {
    const c = toolConversation(toolFormat("mistral")!, history, tools, "auto", "{{ tools }}{{ m.tool_calls }}");
    expect(c.messages[2]!.tool_calls!.map((t) => t.id)).toEqual(["000000000", "000000001"]);
    expect(c.messages.filter((m) => m.role === "tool").map((m) => m.tool_call_id)).toEqual(["000000000", "000000001"]);
  });

  test("Phi-4-mini: the tools as the system message's tools field", () => {
    const c = toolConversation(toolFormat("phi4_mini")!, history.slice(1), tools, "auto", "{{ message['tools'] }}{{ tool_calls }}");
    expect(c.messages[0]!.role).toBe("system");
    expect(JSON.parse(c.systemFields!.tools as string)).toEqual([tools[0]!.function]);
  });

  test("harmony: a template that does not render tools gets gpt-oss's namespace functions in the system turn", () => {
    const weather: FunctionTool = {
      type: "function",
      function: {
        name: "get_weather",
        description: "Weather for a city",
        parameters: { type: "object", properties: { city: { type: "string", description: "The city" }, unit: { enum: ["C", "F"] }, days: { type: "array", items: { type: "integer" } } }, required: ["city"] },
      },
    };
    const c = toolConversation(toolFormat("harmony")!, history.slice(1), [weather, { type: "function", function: { name: "now" } }], "auto", "{{ m.tool_calls }}");
    expect(c.messages[0]!.content).toBe(
      '# Tools\n\n## functions\n\nnamespace functions {\n\n// Weather for a city\ntype get_weather = (_: {\n// The city\ncity: string,\nunit?: "C" | "F",\ndays?: number[],\n}) => any;\n\ntype now = () => any;\n\n} // namespace functions',
    );
  });
});
