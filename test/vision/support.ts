// Shared by the vision tests: the engine's greedy text for one user message, a stream gathered
// into its text and usage, and the message of an expected ImageInputError.
import { expect } from "bun:test";
import type OpenAI from "openai";
import type { ContentPart, Engine } from "../../src/engine/types.ts";
import { ImageInputError } from "../../src/vision/errors.ts";
import { chatRequest } from "../helpers/engine-request.ts";

export async function engineGreedy(engine: Engine, modelId: string, content: ContentPart[], maxTokens: number): Promise<{ text: string; promptTokens: number }> {
  const g = await engine.start(chatRequest(modelId, content, maxTokens));
  let text = "";
  for await (const batch of g.events) for (const e of batch) if (e.type === "content") text += e.text;
  return { text, promptTokens: g.promptTokens };
}

export async function streamed(client: OpenAI, body: OpenAI.ChatCompletionCreateParamsNonStreaming): Promise<{ text: string; usage: OpenAI.CompletionUsage | null }> {
  let text = "";
  let usage: OpenAI.CompletionUsage | null = null;
  const stream = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    text += chunk.choices[0]?.delta.content ?? "";
  }
  return { text, usage };
}

export async function refusal(p: Promise<unknown>): Promise<string> {
  const e = await p.then(
    () => null,
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(ImageInputError);
  return (e as Error).message;
}
