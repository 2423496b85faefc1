// The span of a generation, in OpenTelemetry's GenAI semantic conventions ("chat {model}", with
// gen_ai.request.*, gen_ai.usage.* and gen_ai.response.* attributes), and the engine's steps under
// it from the timings the engine reports (model load, prompt, schema compilation, queue, prefill,
// decode). Prompt and completion text go in only with --trace-content, as gen_ai.input.messages
// and gen_ai.output.messages (the conventions' JSON message shape).
import { SpanStatusCode, type Attributes, type Context, type Span } from "@opentelemetry/api";
import type { ChatMessage, ContentPart, GenerationTimings, Interval } from "../../engine/types.ts";
import type { ChatPlan } from "../chat/request.ts";
import type { ChoiceAccumulator } from "../chat/response.ts";
import type { RequestTrace } from "./request-trace.ts";

/** The request's parameters as gen_ai.request.* attributes (no client text among them). */
function requestAttributes(model: string, plan: ChatPlan, responseId: string, requestId: string): Attributes {
  const s = plan.sampling;
  const a: Attributes = {
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": "sluice",
    "gen_ai.request.model": model,
    "gen_ai.response.model": model,
    "gen_ai.response.id": responseId,
    "gen_ai.request.stream": plan.stream,
    "gen_ai.request.choice.count": plan.n,
    "gen_ai.request.frequency_penalty": s.frequencyPenalty,
    "gen_ai.request.presence_penalty": s.presencePenalty,
    "gen_ai.output.type": plan.responseFormat && plan.responseFormat.type !== "text" ? "json" : "text",
    "sluice.request_id": requestId,
  };
  if (plan.maxTokens !== undefined) a["gen_ai.request.max_tokens"] = plan.maxTokens;
  // What the request gave: a parameter it left out takes the model's default, in the engine.
  if (s.temperature !== undefined) a["gen_ai.request.temperature"] = s.temperature;
  if (s.topP !== undefined) a["gen_ai.request.top_p"] = s.topP;
  if (s.topK !== undefined && s.topK > 0) a["gen_ai.request.top_k"] = s.topK;
  if (s.seed !== undefined) a["gen_ai.request.seed"] = s.seed;
  if (plan.tools?.length) a["sluice.request.tools"] = plan.tools.length;
  if (plan.reasoningEffort) a["sluice.request.reasoning_effort"] = plan.reasoningEffort;
  return a;
}

type Part = Record<string, unknown>;

function contentParts(content: string | ContentPart[] | null): Part[] {
  if (content === null) return [];
  if (typeof content === "string") return [{ type: "text", content }];
  return content.map((p) => {
    if (p.type === "text") return { type: "text", content: p.text };
    // An inline image's bytes would swamp the span: its kind is kept, its data left out.
    const url = p.image_url.url;
    return { type: "uri", modality: "image", uri: url.startsWith("data:") ? `${url.slice(0, Math.max(0, url.indexOf(",")))},(omitted)` : url };
  });
}

/** The conversation as gen_ai.input.messages: role and parts (text, reasoning, tool calls, tool results). */
export function inputMessages(messages: ChatMessage[]): Part[] {
  return messages.map((m) => {
    const parts: Part[] = [];
    if (m.reasoning_content) parts.push({ type: "reasoning", content: m.reasoning_content });
    if (m.role === "tool") parts.push({ type: "tool_call_response", id: m.tool_call_id ?? null, response: typeof m.content === "string" ? m.content : contentParts(m.content) });
    else parts.push(...contentParts(m.content));
    for (const t of m.tool_calls ?? []) parts.push({ type: "tool_call", id: t.id, name: t.function.name, arguments: t.function.arguments });
    return { role: m.role, parts, ...(m.name ? { name: m.name } : {}) };
  });
}

/** The choices as gen_ai.output.messages. */
export function outputMessages(acc: ChoiceAccumulator): Part[] {
  return acc.choices.map((c) => {
    const parts: Part[] = [];
    if (c.reasoning) parts.push({ type: "reasoning", content: c.reasoning });
    if (c.content) parts.push({ type: "text", content: c.content });
    for (const t of c.toolCalls) parts.push({ type: "tool_call", id: t.id, name: t.function.name, arguments: t.function.arguments });
    return { role: "assistant", parts, finish_reason: c.finishReason ?? "error" };
  });
}

/** The engine's steps, in the order a request goes through them: span name and interval. */
const STEPS: [string, keyof GenerationTimings][] = [
  ["sluice.model_load", "modelLoad"],
  ["sluice.prompt", "prompt"],
  ["sluice.schema_compile", "compile"],
  ["sluice.queue", "queue"],
  ["sluice.prefill", "prefill"],
  ["sluice.decode", "decode"],
];

export class ChatSpan {
  private readonly span: Span;
  private readonly context: Context;
  private done = false;

  constructor(
    private readonly trace: RequestTrace,
    model: string,
    plan: ChatPlan,
    responseId: string,
    requestId: string,
  ) {
    ({ span: this.span, context: this.context } = trace.begin(`chat ${model}`, requestAttributes(model, plan, responseId, requestId)));
    if (trace.traceContent && this.span.isRecording()) {
      this.span.setAttribute("gen_ai.input.messages", JSON.stringify(inputMessages(plan.messages)));
      if (plan.tools?.length) this.span.setAttribute("gen_ai.tool.definitions", JSON.stringify(plan.tools));
      if (plan.stop.length) this.span.setAttribute("gen_ai.request.stop_sequences", plan.stop);
    }
  }

  /** The engine refused it before it ran; `code`: the answer's error code. */
  refused(code: string): void {
    if (this.done) return;
    this.done = true;
    this.span.setAttribute("error.type", code);
    this.span.setStatus({ code: SpanStatusCode.ERROR, message: code });
    this.span.end();
  }

  /** It ended (`status`: ok, cancelled, error, time_limit, …) with these tokens, its steps timed as the engine saw them. */
  finished(status: string, promptTokens: number, acc: ChoiceAccumulator, timings: GenerationTimings | undefined): void {
    if (this.done) return;
    this.done = true;
    const span = this.span;
    if (!span.isRecording()) return void span.end();
    span.setAttributes({
      "gen_ai.usage.input_tokens": promptTokens,
      "gen_ai.usage.output_tokens": acc.completionTokens(),
      "gen_ai.usage.cache_read.input_tokens": acc.cachedTokens,
      "gen_ai.usage.reasoning.output_tokens": acc.reasoningTokens(),
      "gen_ai.response.finish_reasons": acc.choices.map((c) => c.finishReason ?? status),
      "sluice.generation.status": status,
    });
    if (this.trace.traceContent) span.setAttribute("gen_ai.output.messages", JSON.stringify(outputMessages(acc)));
    if (status === "error") span.setStatus({ code: SpanStatusCode.ERROR, message: "generation failed" });
    if (timings) {
      span.setAttribute("sluice.preemptions", timings.preemptions);
      for (const [name, key] of STEPS) {
        const at = timings[key] as Interval | undefined;
        if (at) this.trace.step(name, at.start, at.end, stepAttributes(key, timings, acc, promptTokens), undefined, this.context);
      }
    }
    span.end();
  }
}

function stepAttributes(key: keyof GenerationTimings, timings: GenerationTimings, acc: ChoiceAccumulator, promptTokens: number): Attributes | undefined {
  if (key === "prefill") return { "gen_ai.usage.input_tokens": promptTokens, "gen_ai.usage.cache_read.input_tokens": acc.cachedTokens };
  if (key === "decode") return { "gen_ai.usage.output_tokens": acc.completionTokens(), "sluice.preemptions": timings.preemptions };
  return undefined;
}
