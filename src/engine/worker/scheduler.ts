// The model's generation loop. Every active choice of every request advances one token per round,
// in admission order, so a long generation never starves a short one; new requests are admitted
// (prefilled) between rounds and cancelled ones are dropped at once.
import type { KvCache } from "../runtime/decoder.ts";
import { StopMatcher } from "../text/stop.ts";
import type { Detokenizer } from "../text/detokenizer.ts";
import { EngineRequestError, type FinishReason, type GenerationEvent, type TokenLogprob } from "../types.ts";
import type { ModelRunner } from "./model-runner.ts";
import type { WireRequest } from "./protocol.ts";
import { createChoiceSampler, tokenLogprob, type ChoiceSampler } from "./sampling-bridge.ts";

export interface JobSink {
  events(rid: number, events: GenerationEvent[]): void;
  done(rid: number, error?: string): void;
}

interface Choice {
  index: number;
  kv: KvCache;
  logits: Float32Array;
  sampler: ChoiceSampler;
  detok: Detokenizer;
  stop: StopMatcher;
  generated: number;
  pendingLogprobs: TokenLogprob[];
  finished: boolean;
}

interface Job {
  rid: number;
  request: WireRequest;
  maxNew: number;
  choices: Choice[];
  cancelled: boolean;
  out: GenerationEvent[];
}

export class Scheduler {
  private jobs: Job[] = [];
  private waiting: (() => void) | null = null;
  private running = true;

  constructor(
    private readonly model: ModelRunner,
    private readonly sink: JobSink,
  ) {}

  /** Validates and prefills; resolves with the prompt's token count or throws a request error. */
  async admit(rid: number, request: WireRequest): Promise<number> {
    const prompt = await this.model.promptIds(request);
    const context = this.model.info.contextLength;
    const maxNew = Math.min(request.maxTokens ?? Number.MAX_SAFE_INTEGER, context - prompt.length);
    if (request.responseFormat && request.responseFormat.type !== "text") {
      throw new EngineRequestError(
        `response_format type '${request.responseFormat.type}' is not supported by this server yet.`,
        "response_format",
        "unsupported_parameter",
      );
    }
    if (request.toolChoice === "required" || typeof request.toolChoice === "object") {
      throw new EngineRequestError(
        "tool_choice 'required' or a named function is not supported by this server yet.",
        "tool_choice",
        "unsupported_parameter",
      );
    }
    const decoder = this.model.decoder;
    const kv = decoder.emptyCache();
    const logits = await decoder.forward(prompt, kv);
    const choices: Choice[] = [];
    for (let index = 0; index < request.n; index++) {
      choices.push({
        index,
        kv: index === 0 ? kv : decoder.cloneCache(kv),
        logits: index === 0 ? logits : logits.slice(),
        sampler: createChoiceSampler(request.sampling, this.model.tokenizer.vocabSize, index),
        detok: this.model.tokenizer.createDetokenizer(),
        stop: new StopMatcher(request.stop),
        generated: 0,
        pendingLogprobs: [],
        finished: false,
      });
    }
    this.jobs.push({ rid, request, maxNew, choices, cancelled: false, out: [] });
    this.waiting?.();
    return prompt.length;
  }

  cancel(rid: number): void {
    const job = this.jobs.find((j) => j.rid === rid);
    if (job) job.cancelled = true;
  }

  stop(): void {
    this.running = false;
    this.waiting?.();
  }

  async run(): Promise<void> {
    while (this.running) {
      if (this.jobs.length === 0) {
        await new Promise<void>((resolve) => (this.waiting = resolve));
        this.waiting = null;
        continue;
      }
      for (const job of [...this.jobs]) {
        try {
          if (job.cancelled) this.finishAll(job, "stop");
          else for (const c of job.choices) if (!c.finished) await this.step(job, c);
        } catch (e) {
          this.retire(job, (e as Error).message);
          continue;
        }
        if (job.out.length) {
          this.sink.events(job.rid, job.out);
          job.out = [];
        }
        if (job.choices.every((c) => c.finished)) this.retire(job);
      }
      // Let cancel and start messages in between rounds.
      await new Promise<void>((r) => setImmediate(r));
    }
  }

  private retire(job: Job, error?: string) {
    this.jobs = this.jobs.filter((j) => j !== job);
    if (job.out.length) this.sink.events(job.rid, job.out);
    job.out = [];
    this.sink.done(job.rid, error);
  }

  private finishAll(job: Job, reason: FinishReason) {
    for (const c of job.choices) if (!c.finished) this.finish(job, c, reason);
  }

  private emit(job: Job, c: Choice, text: string) {
    if (text === "" && c.pendingLogprobs.length === 0) return;
    const e: GenerationEvent = { type: "content", index: c.index, text };
    if (job.request.logprobs) {
      e.logprobs = c.pendingLogprobs;
      c.pendingLogprobs = [];
    }
    job.out.push(e);
  }

  /** `flush`: emit what the detokeniser and stop matcher still hold (not after a stop string). */
  private finish(job: Job, c: Choice, reason: FinishReason, flush = true) {
    if (flush) {
      const tail = c.stop.push(c.detok.finish());
      this.emit(job, c, tail.stopped ? tail.text : tail.text + c.stop.flush());
    }
    c.finished = true;
    job.out.push({ type: "finish", index: c.index, reason, completionTokens: c.generated });
  }

  private async step(job: Job, c: Choice) {
    const { tokenizer } = this.model;
    const token = c.sampler.sample(c.logits);
    if (job.request.logprobs) c.pendingLogprobs.push(tokenLogprob(c.sampler, c.logits, token, job.request.topLogprobs, tokenizer));
    c.generated++;
    if (tokenizer.isEos(token)) {
      // The end token is counted, as OpenAI counts it, but never shown.
      c.pendingLogprobs = [];
      this.finish(job, c, "stop");
      return;
    }
    c.sampler.accept(token);
    const piece = c.stop.push(c.detok.push(token));
    this.emit(job, c, piece.text);
    if (piece.stopped) {
      this.finish(job, c, "stop", false);
      return;
    }
    if (c.generated >= job.maxNew) {
      this.finish(job, c, "length");
      return;
    }
    c.logits = await this.model.decoder.forward([token], c.kv);
  }
}
