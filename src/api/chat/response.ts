// Builds OpenAI chat.completion objects and chat.completion.chunk events from engine events.
import type { FinishReason, GenerationEvent, TokenLogprob, ToolCall } from "../../engine/types.ts";

export interface CompletionMeta {
  id: string;
  created: number;
  model: string;
  systemFingerprint: string;
}

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  /** Prompt tokens the prefix cache served (charged at the cached-input price). */
  prompt_tokens_details: { cached_tokens: number };
  /** Completion tokens spent in thinking blocks (included in completion_tokens). */
  completion_tokens_details: { reasoning_tokens: number };
}

export const usageOf = (promptTokens: number, completionTokens: number, cachedTokens = 0, reasoningTokens = 0): Usage => ({
  prompt_tokens: promptTokens,
  completion_tokens: completionTokens,
  total_tokens: promptTokens + completionTokens,
  prompt_tokens_details: { cached_tokens: cachedTokens },
  completion_tokens_details: { reasoning_tokens: reasoningTokens },
});

interface ChoiceState {
  reasoning: string;
  content: string;
  toolCalls: ToolCall[];
  logprobs: TokenLogprob[] | null;
  finishReason: FinishReason | null;
  completionTokens: number;
  reasoningTokens: number;
}

/** Folds the event stream of one generation into its choices. */
export class ChoiceAccumulator {
  readonly choices: ChoiceState[];
  /** Prompt tokens the prefix cache served. */
  cachedTokens = 0;

  constructor(n: number, logprobs: boolean) {
    this.choices = Array.from({ length: n }, () => ({
      reasoning: "",
      content: "",
      toolCalls: [],
      logprobs: logprobs ? [] : null,
      finishReason: null,
      completionTokens: 0,
      reasoningTokens: 0,
    }));
  }

  add(e: GenerationEvent): void {
    if (e.type === "prompt") {
      this.cachedTokens = e.cachedTokens;
      return;
    }
    const c = this.choices[e.index]!;
    if (e.type === "reasoning") c.reasoning += e.text;
    else if (e.type === "content") {
      c.content += e.text;
      if (e.logprobs && c.logprobs) c.logprobs.push(...e.logprobs);
    } else if (e.type === "tool_call") {
      let call = c.toolCalls[e.toolIndex];
      if (!call) {
        call = { id: e.id ?? "", type: "function", function: { name: e.name ?? "", arguments: "" } };
        c.toolCalls[e.toolIndex] = call;
      }
      if (e.id) call.id = e.id;
      if (e.name) call.function.name = e.name;
      call.function.arguments += e.argumentsDelta;
    } else {
      c.finishReason = e.reason;
      c.completionTokens = e.completionTokens;
      c.reasoningTokens = e.reasoningTokens;
    }
  }

  completionTokens(): number {
    return this.choices.reduce((s, c) => s + c.completionTokens, 0);
  }

  reasoningTokens(): number {
    return this.choices.reduce((s, c) => s + c.reasoningTokens, 0);
  }

  usage(promptTokens: number): Usage {
    return usageOf(promptTokens, this.completionTokens(), this.cachedTokens, this.reasoningTokens());
  }

  /** The reason of the first choice, for the usage row. */
  finishReason(): FinishReason | null {
    return this.choices[0]?.finishReason ?? null;
  }

  toCompletion(meta: CompletionMeta, promptTokens: number) {
    return {
      id: meta.id,
      object: "chat.completion" as const,
      created: meta.created,
      model: meta.model,
      system_fingerprint: meta.systemFingerprint,
      service_tier: "default" as const,
      choices: this.choices.map((c, index) => ({
        index,
        message: {
          role: "assistant" as const,
          content: c.toolCalls.length > 0 && c.content === "" ? null : c.content,
          // Only when the model thought, under both names clients read: DeepSeek's (the AI SDK,
          // LangChain) and the one vLLM and OpenRouter moved to.
          ...(c.reasoning !== "" ? { reasoning_content: c.reasoning, reasoning: c.reasoning } : {}),
          refusal: null,
          ...(c.toolCalls.length > 0 ? { tool_calls: c.toolCalls } : {}),
        },
        logprobs: c.logprobs ? { content: c.logprobs, refusal: null } : null,
        finish_reason: c.finishReason ?? "stop",
      })),
      usage: this.usage(promptTokens),
    };
  }
}

/** The `choices[0]` of a chunk for one event, in OpenAI's streaming shape; null for events that make no chunk. */
export function chunkChoice(e: GenerationEvent, logprobs: boolean) {
  if (e.type === "prompt") return null;
  if (e.type === "reasoning") {
    return { index: e.index, delta: { reasoning_content: e.text, reasoning: e.text }, logprobs: null, finish_reason: null };
  }
  if (e.type === "content") {
    return {
      index: e.index,
      delta: { content: e.text },
      logprobs: logprobs ? { content: e.logprobs ?? [], refusal: null } : null,
      finish_reason: null,
    };
  }
  if (e.type === "tool_call") {
    return {
      index: e.index,
      delta: {
        tool_calls: [
          {
            index: e.toolIndex,
            ...(e.id ? { id: e.id, type: "function" as const } : {}),
            function: { ...(e.name ? { name: e.name } : {}), arguments: e.argumentsDelta },
          },
        ],
      },
      logprobs: null,
      finish_reason: null,
    };
  }
  return { index: e.index, delta: {}, logprobs: null, finish_reason: e.reason };
}
