// One choice's token pipeline, independent of how the model is run: sample from the logits the
// scheduler hands in, then detokenise, match stop strings and produce the OpenAI events. The
// scheduler owns the model runs and KV caches; this owns everything per token after them.
import type { Detokenizer } from "../text/detokenizer.ts";
import { StopMatcher } from "../text/stop.ts";
import type { FinishReason, GenerationEvent, TokenLogprob } from "../types.ts";
import type { ModelRunner } from "./model-runner.ts";
import type { WireRequest } from "./protocol.ts";
import { createChoiceSampler, tokenLogprob, type ChoiceSampler } from "./sampling-bridge.ts";

export class ChoiceStream {
  private readonly sampler: ChoiceSampler;
  private readonly detok: Detokenizer;
  private readonly stop: StopMatcher;
  private pendingLogprobs: TokenLogprob[] = [];
  generated = 0;
  finished = false;

  constructor(
    readonly index: number,
    private readonly request: WireRequest,
    private readonly model: ModelRunner,
    /** Completion tokens this choice may produce (max_tokens and the context's room). */
    private readonly maxNew: number,
  ) {
    this.sampler = createChoiceSampler(request.sampling, model.tokenizer.vocabSize, index);
    this.detok = model.tokenizer.createDetokenizer();
    this.stop = new StopMatcher(request.stop);
  }

  /**
   * Picks the next token from `logits` and appends this choice's events to `out`. Returns the
   * token to feed to the model next, or null when the choice has finished.
   */
  advance(logits: Float32Array, out: GenerationEvent[]): number | null {
    const { tokenizer } = this.model;
    const token = this.sampler.sample(logits);
    if (this.request.logprobs) {
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
    const piece = this.stop.push(this.detok.push(token));
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
      const tail = this.stop.push(this.detok.finish());
      this.emit(tail.stopped ? tail.text : tail.text + this.stop.flush(), out);
    }
    this.finished = true;
    out.push({ type: "finish", index: this.index, reason, completionTokens: this.generated });
  }

  private emit(text: string, out: GenerationEvent[]) {
    if (text === "" && this.pendingLogprobs.length === 0) return;
    const e: GenerationEvent = { type: "content", index: this.index, text };
    if (this.request.logprobs) {
      e.logprobs = this.pendingLogprobs;
      this.pendingLogprobs = [];
    }
    out.push(e);
  }
}
