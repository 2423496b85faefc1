import { beforeAll, describe, expect, test } from "bun:test";
import { AutoTokenizer, env } from "@huggingface/transformers";
import {
  ChatTemplateError,
  CompiledChatTemplate,
  compileChatTemplate,
  renderChatPrompt,
  selectChatTemplate,
  toTemplateMessages,
  type TemplateMessage,
} from "../../../src/engine/text/chat-template.ts";
import { TextTokenizer } from "../../../src/engine/text/tokenizer.ts";
import type { ChatMessage, FunctionTool } from "../../../src/engine/types.ts";
import { QWEN3_DIR, tempDir } from "./fixtures.ts";
import { cpSync } from "node:fs";
import { join } from "node:path";

// transformers.js is the reference: it runs under Bun, loading the fixture from a local dir.
type Reference = {
  apply_chat_template(messages: unknown[], options: Record<string, unknown>): unknown;
};
let reference: Reference;
const ours = TextTokenizer.load(QWEN3_DIR);

beforeAll(async () => {
  const root = tempDir("sluice-tjs-");
  cpSync(QWEN3_DIR, join(root, "qwen3"), { recursive: true });
  env.allowRemoteModels = false;
  env.allowLocalModels = true;
  env.localModelPath = root + "/";
  reference = (await AutoTokenizer.from_pretrained("qwen3")) as unknown as Reference;
});

const weatherTool: FunctionTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Current weather for a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
};
const hfTools = [{ type: "function", function: weatherTool.function }];

const conversations: [string, TemplateMessage[], unknown[] | null, Record<string, unknown>][] = [
  ["system + user", [{ role: "system", content: "Be brief." }, { role: "user", content: "Hi there" }], null, {}],
  [
    "multi-turn with thinking in history",
    [
      { role: "user", content: "What is 2+2?" },
      { role: "assistant", content: "<think>\nadd\n</think>\n\n4" },
      { role: "user", content: "And 3+3?" },
    ],
    null,
    {},
  ],
  ["user, thinking disabled", [{ role: "user", content: "Hello" }], null, { enable_thinking: false }],
  ["with tools", [{ role: "system", content: "You help." }, { role: "user", content: "Weather in Paris?" }], hfTools, {}],
  [
    "assistant tool_calls and tool results",
    [
      { role: "user", content: "Weather in Paris and Rome?" },
      {
        role: "assistant",
        content: "",
        tool_calls: [
          { id: "c1", type: "function", function: { name: "get_weather", arguments: { city: "Paris" } } },
          { id: "c2", type: "function", function: { name: "get_weather", arguments: '{"city": "Rome"}' } },
        ],
      },
      { role: "tool", tool_call_id: "c1", content: '{"temp": 21}' },
      { role: "tool", tool_call_id: "c2", content: '{"temp": 25}' },
      { role: "assistant", content: "Paris 21°C, Rome 25°C." },
      { role: "user", content: "Thanks 😀" },
    ],
    hfTools,
    {},
  ],
];

describe("chat template matches transformers.js on Qwen3", () => {
  for (const [name, messages, tools, kwargs] of conversations) {
    test(name, () => {
      const expected = reference.apply_chat_template(messages, {
        tokenize: false,
        add_generation_prompt: true,
        tools,
        ...kwargs,
      });
      const template = compileChatTemplate(selectChatTemplate(ours.chatTemplates, tools !== null));
      const actual = template.render({
        messages,
        tools,
        addGenerationPrompt: true,
        specialTokens: ours.templateTokens,
        kwargs,
      });
      expect(typeof expected).toBe("string");
      expect(actual).toBe(expected as string);
      if (name.includes("tool_calls")) expect(actual).toContain('<tool_call>\n{"name": "get_weather", "arguments": ');
      if (tools) expect(actual).toContain('"name": "get_weather"');
    });
  }

  test("OpenAI messages (null content, string arguments, text parts) render as their HF equivalents", () => {
    const openai: ChatMessage[] = [
      { role: "developer", content: [{ type: "text", text: "Be" }, { type: "text", text: "brief." }] },
      { role: "user", content: "Weather in Paris?" },
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "c1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }],
      },
      { role: "tool", tool_call_id: "c1", content: [{ type: "text", text: "21C" }] },
    ];
    const hf = [
      { role: "system", content: "Be\nbrief." },
      { role: "user", content: "Weather in Paris?" },
      {
        role: "assistant",
        content: "",
        tool_calls: [{ id: "c1", type: "function", function: { name: "get_weather", arguments: { city: "Paris" } } }],
      },
      { role: "tool", tool_call_id: "c1", content: "21C" },
    ];
    const expected = reference.apply_chat_template(hf, { tokenize: false, add_generation_prompt: true, tools: hfTools });
    expect(renderChatPrompt(ours, openai, { tools: [{ ...weatherTool, function: { ...weatherTool.function, strict: true } }] })).toBe(
      expected as string,
    );
  });
});

describe("chat template errors and content parts", () => {
  test("raise_exception becomes a ChatTemplateError with its message", () => {
    const t = new CompiledChatTemplate("{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}ok");
    expect(t.render({ messages: [{ role: "user", content: "x" }] })).toBe("ok");
    expect(() => t.render({ messages: [{ role: "system", content: "x" }] })).toThrow(
      new ChatTemplateError("first must be user"),
    );
  });

  test("a malformed template is a ChatTemplateError", () => {
    expect(() => new CompiledChatTemplate("{% for m in messages %}{{ m.content }")).toThrow(ChatTemplateError);
  });

  test("templates that loop over content get the parts; others get joined text", () => {
    const partsTemplate =
      "{% for m in messages %}{% if m.content is string %}{{ m.content }}{% else %}{% for c in m.content %}[{{ c.type }}:{{ c.text }}]{% endfor %}{% endif %}{% endfor %}";
    const t = new CompiledChatTemplate(partsTemplate);
    expect(t.acceptsContentParts).toBe(true);
    const msgs: ChatMessage[] = [{ role: "user", content: [{ type: "text", text: "a" }, { type: "text", text: "b" }] }];
    expect(t.render({ messages: toTemplateMessages(msgs, true) })).toBe("[text:a][text:b]");
    expect(compileChatTemplate(ours.chatTemplates.default!).acceptsContentParts).toBe(false);
    expect(toTemplateMessages(msgs, false)).toEqual([{ role: "user", content: "a\nb" }]);
    expect(() =>
      toTemplateMessages([{ role: "user", content: [{ type: "image_url", image_url: { url: "data:x" } }] }], false),
    ).toThrow(ChatTemplateError);
  });

  test("named templates: tool_use only with tools, missing default is an error", () => {
    const templates = { default: "D", toolUse: "T", named: { default: "D", tool_use: "T" } };
    expect(selectChatTemplate(templates, false)).toBe("D");
    expect(selectChatTemplate(templates, true)).toBe("T");
    expect(() => selectChatTemplate({ default: null, toolUse: null, named: { rag: "R" } }, false)).toThrow(
      ChatTemplateError,
    );
  });
});
