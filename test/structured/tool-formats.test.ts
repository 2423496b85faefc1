// Each tool-call format as data (src/structured/tools/formats/): its real-format strings parse into
// the calls they hold, streamed in any pieces they add up to the same, and its grammar, walked at
// random over a real vocabulary, only ever writes calls of the listed tools with schema-valid
// arguments (required, named) or an answer (auto with strict tools).
import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import type { FunctionTool } from "../../src/protocol/chat.ts";
import type { ToolFormatName } from "../../src/protocol/tools.ts";
import { assemble, detectToolCallSyntax, parseToolCalls, ToolCallStreamParser, toolCallGrammar } from "../../src/structured/tools/index.ts";
import { makeAjv, QWEN_EOS, qwenVocab, randomWalk } from "./helpers.ts";

const DS = { cs: "<｜tool▁calls▁begin｜>", ce: "<｜tool▁calls▁end｜>", c: "<｜tool▁call▁begin｜>", e: "<｜tool▁call▁end｜>", s: "<｜tool▁sep｜>" };
const KIMI = { sb: "<|tool_calls_section_begin|>", se: "<|tool_calls_section_end|>", b: "<|tool_call_begin|>", a: "<|tool_call_argument_begin|>", e: "<|tool_call_end|>" };

const CASES: Array<{ format: ToolFormatName; text: string; content: string; calls: Array<[string, unknown]> }> = [
  {
    // As DeepSeek V3's own chat template writes an assistant's two calls.
    format: "deepseek_v3",
    text: `Let me check.${DS.cs}${DS.c}function${DS.s}get_weather\n\`\`\`json\n{"city": "Oslo"}\n\`\`\`${DS.e}\n${DS.c}function${DS.s}add\n\`\`\`json\n{"a": 1, "b": {"c": "}"}}\n\`\`\`${DS.e}${DS.ce}`,
    content: "Let me check.",
    calls: [["get_weather", { city: "Oslo" }], ["add", { a: 1, b: { c: "}" } }]],
  },
  {
    format: "deepseek_v31",
    text: `Ok.${DS.cs}${DS.c}get_weather${DS.s}{"city": "Oslo"}${DS.e}${DS.c}add${DS.s}{"a": 1}${DS.e}${DS.ce}`,
    content: "Ok.",
    calls: [["get_weather", { city: "Oslo" }], ["add", { a: 1 }]],
  },
  { format: "deepseek_v3", text: `${DS.cs} not a call`, content: `${DS.cs} not a call`, calls: [] },
  {
    format: "deepseek_v3",
    text: `${DS.cs}${DS.c}function${DS.s}f\n\`\`\`json\n{}\n\`\`\`${DS.e}${DS.ce}\nAfter.`,
    content: "After.",
    calls: [["f", {}]],
  },
  {
    format: "kimi_k2",
    text: `${KIMI.sb}${KIMI.b}functions.get_weather:0${KIMI.a}{"city": "Paris"}${KIMI.e}${KIMI.b}functions.add:1${KIMI.a}{"a": 2}${KIMI.e}${KIMI.se}`,
    content: "",
    calls: [["get_weather", { city: "Paris" }], ["add", { a: 2 }]],
  },
  { format: "kimi_k2", text: `Hi ${KIMI.sb}${KIMI.b}oops`, content: `Hi ${KIMI.sb}${KIMI.b}oops`, calls: [] },
  {
    format: "phi4_mini",
    text: '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Rome"}}, {"name": "add", "arguments": {"a": 1}}]<|/tool_call|>',
    content: "",
    calls: [["get_weather", { city: "Rome" }], ["add", { a: 1 }]],
  },
  { format: "phi4_mini", text: 'Sure. functools[{"name": "f", "arguments": {}}]', content: "Sure.", calls: [["f", {}]] },
  { format: "granite", text: '<|tool_call|>[{"name": "f", "arguments": {"x": [1, 2]}}]', content: "", calls: [["f", { x: [1, 2] }]] },
  { format: "granite", text: "<|tool_call|> no list", content: "<|tool_call|> no list", calls: [] },
  {
    format: "json_envelope",
    text: '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Lima"}}, {"name": "add", "arguments": {"a": 3}}]}',
    content: "",
    calls: [["get_weather", { city: "Lima" }], ["add", { a: 3 }]],
  },
  { format: "json_envelope", text: '{"response": "Hello \\"you\\"\\n\\u00e9\\ud83d\\ude00!"}', content: 'Hello "you"\né😀!', calls: [] },
  { format: "json_envelope", text: "plain text", content: "plain text", calls: [] },
  {
    // As Qwen3-Coder's chat template writes two calls; `a` is not in any schema, so its value is JSON when it parses.
    format: "qwen3_xml",
    text: "Checking.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n<parameter=unit>\ncelsius\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=add>\n<parameter=a>\n5\n</parameter>\n<parameter=b>\n{\"x\": [1]}\n</parameter>\n</function>\n</tool_call>",
    content: "Checking.",
    calls: [["get_weather", { city: "New York", unit: "celsius" }], ["add", { a: 5, b: { x: [1] } }]],
  },
  { format: "qwen3_xml", text: "<tool_call>\n<function=f>\n</function>\n</tool_call> done", content: "done", calls: [["f", {}]] },
  { format: "qwen3_xml", text: "a <tool_call> b", content: "a <tool_call> b", calls: [] },
  {
    // As GLM-4.5's chat template writes two calls.
    format: "glm45",
    text: "Sure.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n<arg_key>unit</arg_key>\n<arg_value>celsius</arg_value>\n</tool_call>\n<tool_call>add\n<arg_key>a</arg_key>\n<arg_value>2</arg_value>\n</tool_call>",
    content: "Sure.",
    calls: [["get_weather", { city: "Beijing", unit: "celsius" }], ["add", { a: 2 }]],
  },
  { format: "glm45", text: "<tool_call>f\n</tool_call>", content: "", calls: [["f", {}]] },
  {
    format: "pythonic",
    text: '[get_weather(city="San Francisco", unit=\'celsius\'), add(a=1, b=-2.5e1, c=True, d=None, e=[1, {"k": (2, 3)}])]',
    content: "",
    calls: [["get_weather", { city: "San Francisco", unit: "celsius" }], ["add", { a: 1, b: -25, c: true, d: null, e: [1, { k: [2, 3] }] }]],
  },
  { format: "pythonic", text: "<|python_start|>[f()]<|python_end|> ok", content: "ok", calls: [["f", {}]] },
  { format: "pythonic", text: "[1, 2] is a list", content: "[1, 2] is a list", calls: [] },
  { format: "pythonic", text: "Hello [f()]", content: "Hello [f()]", calls: [] },
  // Harmony (gpt-oss): the output begins inside the header the prompt's `<|start|>assistant` opened.
  {
    format: "harmony",
    text: '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Oslo"}<|call|>',
    content: "",
    calls: [["get_weather", { city: "Oslo" }]],
  },
  {
    // The recipient before the channel, as gpt-oss's template writes earlier calls, after a preamble and an analysis.
    format: "harmony",
    text: '<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant to=functions.add<|channel|>commentary json<|message|>{"a": 1}<|call|>',
    content: "Need weather.Checking.",
    calls: [["add", { a: 1 }]],
  },
  { format: "harmony", text: "<|channel|>final<|message|>It is <b>12</b> <|degrees|>.<|return|>", content: "It is <b>12</b> <|degrees|>.", calls: [] },
  // A header that never reaches its body, and a marker inside a body, lose nothing.
  { format: "harmony", text: "<|channel|>final to=functions.f", content: "final to=functions.f", calls: [] },
  { format: "harmony", text: '<|channel|>commentary to=functions.f<|message|>{"a"<|start|>assistant<|channel|>final<|message|>ok', content: "ok", calls: [["f", '{"a"']] },
];

function streamInPieces(text: string, cuts: number[], format: ToolFormatName) {
  const p = new ToolCallStreamParser(format, TOOLS);
  const events = [];
  let last = 0;
  for (const cut of [...new Set(cuts)].sort((a, b) => a - b)) {
    events.push(...p.push(text.slice(last, cut)));
    last = cut;
  }
  events.push(...p.push(text.slice(last)), ...p.finish());
  return events;
}

describe("real-format strings", () => {
  for (const c of CASES) {
    test(`${c.format}: ${JSON.stringify(c.text).slice(0, 70)}`, () => {
      const r = parseToolCalls(c.text, c.format, TOOLS);
      expect(r.content).toBe(c.content);
      expect(r.toolCalls.map((t, i) => [t.name, typeof c.calls[i]?.[1] === "string" ? t.arguments : JSON.parse(t.arguments)])).toEqual(c.calls);
      fc.assert(
        fc.property(fc.array(fc.integer({ min: 0, max: c.text.length }), { maxLength: 12 }), (cuts) => {
          expect(assemble(streamInPieces(c.text, cuts, c.format))).toEqual(r);
        }),
        { numRuns: 200 },
      );
    });
  }
});

describe("detection from templates", () => {
  test("each family's markers", () => {
    expect(detectToolCallSyntax(`{{'<｜Assistant｜>${DS.cs}${DS.c}' + tool['type'] + '${DS.s}'}}`)).toBe("deepseek_v3");
    expect(detectToolCallSyntax(`{{'<｜Assistant｜>${DS.cs}${DS.c}'+ tool['function']['name'] + '${DS.s}' + tool['function']['arguments'] + '${DS.e}'}}`)).toBe("deepseek_v31");
    expect(detectToolCallSyntax(`{{ '${KIMI.sb}' }}{{ '${KIMI.b}' + tool_call['id'] }}`)).toBe("kimi_k2");
    expect(detectToolCallSyntax("{% if tools %}<|system|>{{ system }}<|tool|>{{ tools | tojson }}<|/tool|><|end|>{% endif %}")).toBe("phi4_mini");
    expect(detectToolCallSyntax("<|start_of_role|>assistant<|end_of_role|>{% if m.tool_calls %}<|tool_call|>{{ m.tool_calls | tojson }}{% endif %}")).toBe("granite");
    expect(detectToolCallSyntax("{{- '<tool_call>\\n<function=' + tool_call.name + '>\\n' }}{{- '<parameter=' + args_name + '>\\n' }}")).toBe("qwen3_xml");
    expect(detectToolCallSyntax("{{ '<tool_call>' + tc.name }}{% for k, v in tc.arguments.items() %}<arg_key>{{ k }}</arg_key>\n<arg_value>{{ v }}</arg_value>{% endfor %}")).toBe("glm45");
    expect(detectToolCallSyntax("you MUST put it in the format of [func_name1(params_name1=params_value1, params_name2=params_value2...), func_name2(params)]")).toBe("pythonic");
    expect(detectToolCallSyntax('{{- "<|start|>assistant to=" }}{{- "functions." + tool_call.name + "<|channel|>commentary " }}{{- "<|call|>" }}')).toBe("harmony");
    expect(detectToolCallSyntax("<|start|>assistant to=functions.{{ call.name }}<|channel|>commentary json<|message|>")).toBe("harmony");
    expect(detectToolCallSyntax("<start_of_turn>model\n{{ content }}<end_of_turn>")).toBeNull();
  });
});

const TOOLS: FunctionTool[] = [
  {
    type: "function",
    function: {
      name: "get_weather",
      strict: true,
      parameters: { type: "object", properties: { city: { type: "string", maxLength: 20 }, unit: { enum: ["celsius", "fahrenheit"] } }, required: ["city", "unit"], additionalProperties: false },
    },
  },
  {
    type: "function",
    function: { name: "add", parameters: { type: "object", properties: { a: { type: "integer", minimum: -100, maximum: 100 }, b: { type: "integer" } }, required: ["a", "b"], additionalProperties: false } },
  },
];

const GRAMMAR_FORMATS: ToolFormatName[] = ["deepseek_v3", "deepseek_v31", "kimi_k2", "phi4_mini", "granite", "qwen3_xml", "glm45", "pythonic", "harmony", "json_envelope"];

describe("grammars", () => {
  const ajv = makeAjv();
  const validators = new Map(TOOLS.map((t) => [t.function.name, ajv.compile(t.function.parameters!)]));
  const checkCalls = (calls: Array<{ name: string; arguments: string }>) => {
    for (const c of calls) {
      const v = validators.get(c.name);
      if (!v) throw new Error(`unknown tool ${c.name}`);
      if (!v(JSON.parse(c.arguments))) throw new Error(`arguments ${c.arguments} invalid for ${c.name}`);
    }
  };

  for (const format of GRAMMAR_FORMATS) {
    test(`${format}: required, named and single calls always parse into schema-valid calls`, async () => {
      const qwen = await qwenVocab();
      for (const [choice, expectName, parallel] of [
        ["required", undefined, true],
        ["required", undefined, false],
        [{ type: "function" as const, function: { name: "add" } }, "add", true],
      ] as const) {
        const g = toolCallGrammar({ tools: TOOLS, toolChoice: choice, syntax: format, parallelToolCalls: parallel })!;
        for (let seed = 1; seed <= 5; seed++) {
          const walk = randomWalk(g, qwen, QWEN_EOS, seed * 37, 30);
          expect(walk.mismatches).toEqual([]);
          const parsed = parseToolCalls(walk.text, format, TOOLS);
          expect(parsed.content).toBe("");
          expect(parsed.toolCalls.length).toBeGreaterThan(0);
          if (!parallel || expectName) expect(parsed.toolCalls).toHaveLength(1);
          if (expectName) expect(parsed.toolCalls.map((c) => c.name)).toEqual([expectName]);
          checkCalls(parsed.toolCalls);
        }
      }
    });

    test(`${format}: auto with a strict tool gives an answer or valid calls`, async () => {
      const qwen = await qwenVocab();
      const g = toolCallGrammar({ tools: TOOLS, toolChoice: "auto", syntax: format })!;
      expect(g).not.toBeNull();
      for (let seed = 1; seed <= 6; seed++) {
        const walk = randomWalk(g, qwen, QWEN_EOS, seed * 131, 20);
        expect(walk.mismatches).toEqual([]);
        checkCalls(parseToolCalls(walk.text, format, TOOLS).toolCalls);
      }
    });
  }

  test("json_envelope holds auto to the envelope even without strict tools", () => {
    expect(toolCallGrammar({ tools: [TOOLS[1]!], toolChoice: "auto", syntax: "json_envelope" })).not.toBeNull();
    expect(toolCallGrammar({ tools: [TOOLS[1]!], toolChoice: "auto", syntax: "deepseek_v3" })).toBeNull();
  });
});
