// A GenerateRequest for engine-level tests: one user message, no tools, nothing to cancel it.
import { DEFAULT_SAMPLING } from "../../src/engine/sampling/index.ts";
import type { ChatMessage, GenerateRequest, SamplingParams } from "../../src/engine/types.ts";

export function chatRequest(modelId: string, content: ChatMessage["content"], maxTokens: number, sampling: Partial<SamplingParams> = { temperature: 0 }): GenerateRequest {
  return {
    requestId: "t",
    modelId,
    messages: [{ role: "user", content }],
    sampling: { ...DEFAULT_SAMPLING, ...sampling },
    maxTokens,
    stop: [],
    n: 1,
    logprobs: false,
    topLogprobs: 0,
    signal: new AbortController().signal,
  };
}
