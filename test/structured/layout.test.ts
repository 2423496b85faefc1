// The whitespace policy of every JSON grammar (layout.ts): nothing around the document; between
// tokens nothing, one space after ':' or ',', or a newline and the indentation of the depth, the
// unit fixed by the newline after the root's opening bracket.
import { describe, expect, test } from "bun:test";
import type { FunctionTool } from "../../src/engine/types.ts";
import { ISSUE_SCHEMA } from "./helpers.ts";
import { compileJsonSchema, GrammarMatcher, jsonObjectGrammar, type Grammar, parseToolCalls, toolCallGrammar, vocabularyFromBytes } from "../../src/structured/index.ts";

const bytes = vocabularyFromBytes(Array.from({ length: 256 }, (_, b) => Uint8Array.of(b)));
const accepts = (g: Grammar, text: string) => {
  const m = new GrammarMatcher(g, bytes);
  return m.acceptString(text) && m.isComplete();
};

const DOC = { name: "Bo", age: 3, pets: [{ kind: "cat", name: "x" }, { kind: "dog" }], mood: null };

describe("whitespace layout", () => {
  const g = compileJsonSchema(ISSUE_SCHEMA);

  test("compact and the usual pretty-printed forms are accepted", () => {
    for (const text of [
      JSON.stringify(DOC),
      JSON.stringify(DOC, null, 2),
      JSON.stringify(DOC, null, 4),
      JSON.stringify(DOC, null, "\t"),
      '{"name": "Bo", "age": 3, "pets": [], "mood": "sad"}',
      // Pretty-printed with short arrays and objects kept on one line.
      '{\n  "name": "Bo",\n  "age": 3,\n  "pets": [{"kind": "cat"}, {"kind": "dog"}],\n  "mood": "sad"\n}',
      '{\n  "name": "Bo", "age": 3,\n  "pets": [\n    {"kind": "cat"}\n  ], "mood": null}',
    ]) {
      if (!accepts(g, text)) throw new Error(`refused ${JSON.stringify(text)}`);
    }
  });

  test("whitespace anywhere else is refused", () => {
    const compact = JSON.stringify(DOC);
    for (const text of [
      ` ${compact}`,
      `\n${compact}`,
      `${compact} `,
      `${compact}\n`,
      '{ "name": "Bo", "age": 3, "pets": [], "mood": "sad"}',
      '{"name" : "Bo", "age": 3, "pets": [], "mood": "sad"}',
      '{"name":  "Bo", "age": 3, "pets": [], "mood": "sad"}',
      '{"name": "Bo", "age": 3, "pets": [ ], "mood": "sad"}',
      '{"name": "Bo", "age": 3 , "pets": [], "mood": "sad"}',
      // A newline only in a document that opened with one, and then with the depth's indentation.
      '{"name": "Bo",\n  "age": 3, "pets": [], "mood": "sad"}',
      '{\n  "name": "Bo",\n    "age": 3,\n  "pets": [],\n  "mood": "sad"\n}',
      '{\n  "name": "Bo",\n\n  "age": 3,\n  "pets": [],\n  "mood": "sad"\n}',
      '{\n  "name": "Bo",\n  "age": 3,\n  "pets": [\n     {"kind": "cat"}\n  ],\n  "mood": "sad"\n}',
      // The unit is fixed by the first newline.
      '{\n    "name": "Bo",\n  "age": 3,\n  "pets": [],\n  "mood": "sad"\n}',
      '{\n\t"name": "Bo",\n  "age": 3,\n\t"pets": [],\n\t"mood": "sad"\n}',
      '{\n  "name":\n  "Bo",\n  "age": 3,\n  "pets": [],\n  "mood": "sad"\n}',
    ]) {
      if (accepts(g, text)) throw new Error(`accepted ${JSON.stringify(text)}`);
    }
  });

  test("json_object: the same policy, at any depth; pretty-printing is followed eight levels deep", () => {
    const jo = jsonObjectGrammar();
    const deep = { a: [1, { b: [], c: { d: { e: { f: { g: { h: 1 } } } } } }] };
    for (const text of ["{}", '{"a": [1, {"b": []}]}', JSON.stringify(deep, null, 2), JSON.stringify(deep, null, 4)]) expect(accepts(jo, text)).toBe(true);
    for (const text of ["[]", "{ }", "{\n}", ' {"a": 1}', '{"a": 1} ', '{"a":\t1}', '{\n  "a": [\n   1\n  ]\n}']) expect(accepts(jo, text)).toBe(false);
  });

  const tools: FunctionTool[] = [
    { type: "function", function: { name: "get_weather", strict: true, parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"], additionalProperties: false } } },
  ];
  const call = { name: "get_weather", arguments: { city: "Oslo" } };

  test("tool calls: the wrappers and the arguments follow it in every syntax", () => {
    const hermes = toolCallGrammar({ tools, toolChoice: "required", syntax: "hermes" })!;
    for (const body of [JSON.stringify(call), JSON.stringify(call, null, 2), '{"name": "get_weather", "arguments": {"city": "Oslo"}}']) {
      expect(accepts(hermes, `<tool_call>\n${body}\n</tool_call>`)).toBe(true);
    }
    for (const body of [` ${JSON.stringify(call)}`, `${JSON.stringify(call)} `, '{"name": "get_weather", "arguments": { "city": "Oslo"}}', '{"name":  "get_weather", "arguments": {"city": "Oslo"}}']) {
      expect(accepts(hermes, `<tool_call>\n${body}\n</tool_call>`)).toBe(false);
    }
    const mistral = toolCallGrammar({ tools, toolChoice: "required", syntax: "mistral" })!;
    const list = [call, call];
    for (const text of [JSON.stringify(list), JSON.stringify(list, null, 2), '[{"name": "get_weather", "arguments": {"city": "Oslo"}}, {"name": "get_weather", "arguments": {"city": "Rome"}}]']) {
      expect(accepts(mistral, `[TOOL_CALLS]${text}`)).toBe(true);
      expect(parseToolCalls(`[TOOL_CALLS]${text}`, "mistral").toolCalls).toHaveLength(2);
    }
    expect(accepts(mistral, `[TOOL_CALLS] ${JSON.stringify(list)}`)).toBe(false);
    expect(accepts(mistral, `[TOOL_CALLS][ ${JSON.stringify(call)}]`)).toBe(false);
    const llama = toolCallGrammar({ tools, toolChoice: "required", syntax: "llama3" })!;
    const one = JSON.stringify({ name: "get_weather", parameters: { city: "Oslo" } });
    for (const text of [one, `${one}; ${one}`, `${one};\n${one}`, JSON.stringify({ name: "get_weather", parameters: { city: "Oslo" } }, null, 4)]) expect(accepts(llama, text)).toBe(true);
    for (const text of [` ${one}`, `${one} `, `${one}  ;${one}`, `${one};\n\n${one}`]) expect(accepts(llama, text)).toBe(false);
  });
});
