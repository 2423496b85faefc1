// One request asked whole and streamed, for the reasoning tests: what the whole answer says, and
// what the stream's deltas add up to (reasoning_content, content, the order they came in, usage,
// finish_reason).
import type OpenAI from "openai";

export type ChatBody = Omit<OpenAI.ChatCompletionCreateParamsNonStreaming, "model" | "messages">;

/** The completion's counts (the prompt's cached tokens differ once the prefix cache holds it). */
export const completionCounts = (u: OpenAI.CompletionUsage) => ({ tokens: u.completion_tokens, reasoning: u.completion_tokens_details?.reasoning_tokens });
export const reasoningOf = (m: unknown) => (m as { reasoning_content?: string }).reasoning_content ?? "";

export async function wholeAndStreamed(client: OpenAI, model: string, messages: OpenAI.ChatCompletionMessageParam[], body: ChatBody) {
  const whole = await client.chat.completions.create({ model, messages, ...body });
  const stream = await client.chat.completions.create({ model, messages, ...body, stream: true, stream_options: { include_usage: true } });
  let reasoning = "";
  let content = "";
  const order: string[] = [];
  let usage: OpenAI.CompletionUsage | undefined;
  let finish: string | null = null;
  for await (const chunk of stream) {
    usage = chunk.usage ?? usage;
    const c = chunk.choices[0];
    if (!c) continue;
    const d = c.delta as { reasoning_content?: string; content?: string | null };
    if (d.reasoning_content) {
      reasoning += d.reasoning_content;
      if (order.at(-1) !== "reasoning") order.push("reasoning");
    }
    if (d.content) {
      content += d.content;
      if (order.at(-1) !== "content") order.push("content");
    }
    finish = c.finish_reason ?? finish;
  }
  return { whole, streamed: { reasoning, content, order, usage: usage!, finish } };
}
