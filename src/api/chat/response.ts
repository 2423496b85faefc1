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
}

export const usageOf = (promptTokens: number, completionTokens: number): Usage => ({
  prompt_tokens: promptTokens,
  completion_tokens: completionTokens,
  total_tokens: promptTokens + completionTokens,
});

interface ChoiceState {
  content: string;
  toolCalls: ToolCall[];
  logprobs: TokenLogprob[] | null;
  finishReason: FinishReason | null;
  completionTokens: number;
}

/** Folds the event stream of one generation into its choices. */
export class ChoiceAccumulator {
  readonly choices: ChoiceState[];

  constructor(n: number, logprobs: boolean) {
    this.choices = Array.from({ length: n }, () => ({
      content: "",
      toolCalls: [],
      logprobs: logprobs ? [] : null,
      finishReason: null,
      completionTokens: 0,
    }));
  }

  add(e: GenerationEvent): void {
    const c = this.choices[e.index]!;
    if (e.type === "content") {
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
    }
  }

  completionTokens(): number {
    return this.choices.reduce((s, c) => s + c.completionTokens, 0);
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
          refusal: null,
          ...(c.toolCalls.length > 0 ? { tool_calls: c.toolCalls } : {}),
        },
        logprobs: c.logprobs ? { content: c.logprobs, refusal: null } : null,
        finish_reason: c.finishReason ?? "stop",
      })),
      usage: usageOf(promptTokens, this.completionTokens()),
    };
  }
}

/** The `choices[0]` of a chunk for one event, in OpenAI's streaming shape. */
export function chunkChoice(e: GenerationEvent, logprobs: boolean) {
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
