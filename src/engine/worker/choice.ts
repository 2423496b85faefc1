// One choice's token pipeline, independent of how the model is run: sample from the logits the
// scheduler hands in, then detokenise, match stop strings and produce the OpenAI events. The
// scheduler owns the model runs and KV caches; this owns everything per token after them.
import { allocateTokenBitmask, type GrammarMatcher } from "../../structured/index.ts";
import { ToolCallStreamParser, toolFormat, type ToolStreamEvent } from "../../structured/tools/index.ts";
import type { Detokenizer } from "../text/detokenizer.ts";
import { StopMatcher } from "../text/stop.ts";
import { withModelDefaults } from "../sampling/defaults.ts";
import type { FinishReason, GenerationEvent, TokenLogprob } from "../types.ts";
import type { ModelRunner } from "./model-runner.ts";
import type { WireRequest } from "./protocol.ts";
import { createChoiceSampler, tokenLogprob, type ChoiceSampler } from "./sampling-bridge.ts";
import { answerThinkingBudget, refuseShortBudget } from "./structured-budget.ts";
import { createMatcher, type RequestStructure } from "./structured-support.ts";
import { HarmonyStage } from "./harmony-stage.ts";
import { setBit, ThinkingStage, type ReasoningStage, type SplitText, type ThinkingPlan } from "./thinking.ts";

const ID_CHARS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
const callId = () => {
  let id = "call_";
  for (const b of crypto.getRandomValues(new Uint8Array(24))) id += ID_CHARS[b % 62];
  return id;
};

export class ChoiceStream {
  private readonly sampler: ChoiceSampler;
  private readonly detok: Detokenizer;
  private readonly stop: StopMatcher;
  private pendingLogprobs: TokenLogprob[] = [];
  /** The grammar that every token must keep valid (response_format, forced or strict tools). */
  private readonly matcher: GrammarMatcher | null;
  private readonly mask: Uint32Array | null;
  /** Splits tool calls out of the text when the request has tools. */
  private readonly tools: ToolCallStreamParser | null;
  /** Splits a thinking block off the answer, for models that write one. */
  private readonly thinking: ReasoningStage | null;
  private toolCalls = 0;
  /** The stop token that must end a turn of calls (harmony's <|call|>), under a grammar; else null. */
  private readonly callEnd: number | null;
  generated = 0;
  finished = false;
  /** Whether a grammar constrains the tokens (the mask, not logit_bias alone, may leave nothing). */
  get constrained(): boolean {
    return this.matcher !== null;
  }

  constructor(
    readonly index: number,
    private readonly request: WireRequest,
    private readonly model: ModelRunner,
    /** Completion tokens this choice may produce (max_tokens and the context's room). */
    private readonly maxNew: number,
    /** The request's grammar and tool syntax, compiled before admission (see structure-compiler.ts). */
    structure: RequestStructure,
    thinking: ThinkingPlan | null = null,
  ) {
    this.sampler = createChoiceSampler(withModelDefaults(request.sampling, model.info.samplingDefaults), model.tokenizer.vocabSize, index);
    // A tool format's control tokens are text its parser reads, even where the tokenizer marks them special.
    this.detok = model.tokenizer.createDetokenizer(structure.toolSyntax ? (toolFormat(structure.toolSyntax)?.controlTokens ?? []) : []);
    this.stop = new StopMatcher(request.stop);
    this.matcher = structure.grammar ? createMatcher(structure.grammar, model) : null;
    const plan = thinking && model.reasoning ? thinking : null;
    const harmony = model.reasoning?.harmony ?? null;
    // A constrained answer must fit after any thinking: the block closes in time to leave it room
    // (harmony: at least the answer's channel header comes first).
    const before = harmony ? harmony.openFinal.length : plan?.startsInside ? model.reasoning!.tokens.end.length : 0;
    if (this.matcher) refuseShortBudget(this.matcher, maxNew, request, before);
    this.mask = this.matcher ? allocateTokenBitmask(model.tokenizer.vocabSize) : null;
    this.tools = structure.toolSyntax ? new ToolCallStreamParser(structure.toolSyntax, request.tools ?? []) : null;
    const format = structure.toolSyntax ? toolFormat(structure.toolSyntax) : null;
    // Harmony's own calls: the answer goes to the tool parser framed, and a tools grammar writes the headers.
    const harmonyCalls = format?.name === "harmony";
    const toolsGrammar = this.matcher !== null && !(request.responseFormat && request.responseFormat.type !== "text");
    this.thinking = !plan
      ? null
      : harmony
        ? // After the thinking's <|end|> the answer needs its header, then the shortest document.
          new HarmonyStage(model.tokenizer, harmony, answerThinkingBudget(plan, this.matcher, maxNew - harmony.nextFinal.length), this.matcher !== null, {
            framed: harmonyCalls,
            grammarHeaders: harmonyCalls && toolsGrammar,
          })
        : new ThinkingStage(model.tokenizer, model.reasoning!, answerThinkingBudget(plan, this.matcher, maxNew), this.matcher !== null);
    const callEnd = format?.callEnd ? model.tokenizer.tokenToId(format.callEnd) : null;
    this.callEnd = this.matcher && callEnd !== null && model.tokenizer.isEos(callEnd) ? callEnd : null;
  }

  /**
   * Picks the next token from `logits` and appends this choice's events to `out`. Returns the
   * token to feed to the model next, or null when the choice has finished.
   */
  advance(logits: Float32Array, out: GenerationEvent[]): number | null {
    const { tokenizer } = this.model;
    // At its budget a thinking block is closed by the engine: its tag is fed, not sampled.
    const token = this.thinking?.forced() ?? this.sampler.sample(logits, this.nextMask());
    // The grammar and logprobs cover the answer; thinking is free text, as OpenAI's is hidden.
    const answer = this.thinking?.isAnswer(token) ?? true;
    if (this.matcher && answer && !this.matcher.acceptToken(token)) throw new Error(`grammar refused token ${token} it allowed`);
    if (this.request.logprobs && answer) {
      this.pendingLogprobs.push(tokenLogprob(this.sampler, logits, token, this.request.topLogprobs, tokenizer));
    }
    this.generated++;
    if (tokenizer.isEos(token)) {
      // The end token counts as a completion token, as OpenAI counts it, but is never shown.
      this.pendingLogprobs = [];
      this.finish("stop", out);
      return null;
    }
    this.sampler.accept(token);
    const piece = this.stop.push(this.thinking ? this.split(this.thinking.push(token), out) : this.detok.push(token));
    this.emit(piece.text, out);
    if (piece.stopped) {
      this.finish("stop", out, false);
      return null;
    }
    if (this.generated >= this.maxNew) {
      this.finish("length", out);
      return null;
    }
    return token;
  }

  /** Ends the choice; `flush` emits what the detokeniser and stop matcher still hold. */
  finish(reason: FinishReason, out: GenerationEvent[], flush = true): void {
    if (this.finished) return;
    if (flush) {
      const tail = this.stop.push(this.thinking ? this.split(this.thinking.finish(), out) : this.detok.finish());
      this.emit(tail.stopped ? tail.text : tail.text + this.stop.flush(), out);
    }
    if (this.tools) this.route(this.tools.finish(), out);
    this.finished = true;
    // A turn that ended in tool calls says so, as OpenAI does.
    const finish = reason === "stop" && this.toolCalls > 0 ? "tool_calls" : reason;
    out.push({ type: "finish", index: this.index, reason: finish, completionTokens: this.generated, reasoningTokens: this.thinking?.reasoningTokens ?? 0 });
  }

  /** The grammar's mask for an answer token, as the thinking stage adjusts it (or null). */
  private nextMask(): Uint32Array | null {
    let mask: Uint32Array | null = null;
    if (this.matcher && !this.thinking?.thinking) {
      // The budget left counts this token; the mask keeps only tokens that still let the document end in time.
      this.matcher.fillNextTokenBitmask(this.mask!, this.maxNew - this.generated);
      mask = this.mask;
      if (this.callEnd !== null) {
        // A call ends the turn with its own stop token, an answer with any other.
        const calling = this.toolCalls > 0;
        for (const id of this.model.tokenizer.eosTokenIds) if ((id === this.callEnd) !== calling) setBit(this.mask!, id, false);
      }
    }
    return this.thinking ? this.thinking.mask(mask) : mask;
  }

  /** Emits the thinking's text and returns the answer's. */
  private split(text: SplitText, out: GenerationEvent[]): string {
    if (text.reasoning) out.push({ type: "reasoning", index: this.index, text: text.reasoning });
    // Logprobs stay in step with the content: a token trimmed from it loses its entry.
    if (text.trimmed) this.pendingLogprobs.pop();
    return text.content;
  }

  private emit(text: string, out: GenerationEvent[]) {
    if (this.tools) {
      this.route(this.tools.push(text), out);
      return;
    }
    this.emitContent(text, out);
  }

  /** Tool-call parser events to OpenAI events: content stays content, calls get ids. */
  private route(events: readonly ToolStreamEvent[], out: GenerationEvent[]) {
    for (const e of events) {
      if (e.type === "content") this.emitContent(e.text, out);
      else if (e.name !== undefined) {
        this.toolCalls = Math.max(this.toolCalls, e.index + 1);
        out.push({ type: "tool_call", index: this.index, toolIndex: e.index, id: callId(), name: e.name, argumentsDelta: e.argumentsDelta });
      } else out.push({ type: "tool_call", index: this.index, toolIndex: e.index, argumentsDelta: e.argumentsDelta });
    }
  }

  private emitContent(text: string, out: GenerationEvent[]) {
    if (text === "" && this.pendingLogprobs.length === 0) return;
    const e: GenerationEvent = { type: "content", index: this.index, text };
    if (this.request.logprobs) {
      e.logprobs = this.pendingLogprobs;
      this.pendingLogprobs = [];
    }
    out.push(e);
  }
}
