// One streamed greedy chat completion through the openai client, timed on the client's side:
// the request shape and the timing every HTTP benchmark reads (bench/concurrency.ts,
// bench/runner-process.ts, bench/decode.ts's streaming cost).
import type OpenAI from "openai";

export interface StreamResult {
  /** From the request to the first content chunk, ms. */
  ttft: number;
  /** Between consecutive content chunks, ms. A chunk may hold several tokens: those the server made within its stream interval. */
  gaps: number[];
  /** From the first content chunk to the last, ms. */
  span: number;
  /** Completion and prompt tokens, from the usage chunk. */
  tokens: number;
  promptTokens: number;
}

export interface StreamOptions {
  system?: string;
  logitBias?: Record<number, number>;
}

export async function streamChat(client: OpenAI, model: string, content: string, maxTokens: number, options: StreamOptions = {}): Promise<StreamResult> {
  const t0 = performance.now();
  const messages: OpenAI.ChatCompletionMessageParam[] = options.system
    ? [{ role: "system", content: options.system }, { role: "user", content }]
    : [{ role: "user", content }];
  const s = await client.chat.completions.create({
    model,
    messages,
    temperature: 0,
    max_tokens: maxTokens,
    stream: true,
    stream_options: { include_usage: true },
    ...(options.logitBias ? { logit_bias: options.logitBias } : {}),
  });
  let last = 0;
  let firstAt = NaN;
  let ttft = NaN;
  const gaps: number[] = [];
  let tokens = 0;
  let promptTokens = 0;
  for await (const chunk of s) {
    if (chunk.usage) {
      tokens = chunk.usage.completion_tokens;
      promptTokens = chunk.usage.prompt_tokens;
    }
    if (!chunk.choices[0]?.delta.content) continue;
    const now = performance.now();
    if (Number.isNaN(ttft)) {
      ttft = now - t0;
      firstAt = now;
    } else gaps.push(now - last);
    last = now;
  }
  return { ttft, gaps, span: last - firstAt, tokens, promptTokens };
}

/** Time per output token after the first, ms (vLLM's TPOT): the stream's span over the tokens after the first. */
export const tpot = (r: StreamResult): number => r.span / Math.max(1, r.tokens - 1);

const WORDS = "the cat sat on a mat and looked at the big red ball that rolled down the green hill".split(" ");

/** `n` words of plain prose, starting at a word the seed picks (20 seeds, then they repeat): prompts of a chosen length. */
export const prose = (n: number, seed: number) => Array.from({ length: n }, (_, i) => WORDS[(i * 7 + seed * 3) % WORDS.length]).join(" ");
