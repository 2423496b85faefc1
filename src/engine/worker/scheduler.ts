// The model's generation loop. Every active choice of every request advances one token per round,
// in admission order, so a long generation never starves a short one; new requests are admitted
// (prefilled) between rounds and cancelled ones are dropped at once.
import type { KvCache } from "../runtime/decoder.ts";
import { EngineRequestError, type GenerationEvent } from "../types.ts";
import { ChoiceStream } from "./choice.ts";
import type { ModelRunner } from "./model-runner.ts";
import type { WireRequest } from "./protocol.ts";

export interface JobSink {
  events(rid: number, events: GenerationEvent[]): void;
  done(rid: number, error?: string): void;
}

interface Running {
  stream: ChoiceStream;
  kv: KvCache;
  /** Logits for the choice's next token. */
  logits: Float32Array;
}

interface Job {
  rid: number;
  choices: Running[];
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
    const maxNew = Math.min(request.maxTokens ?? Number.MAX_SAFE_INTEGER, this.model.info.contextLength - prompt.length);
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
    const choices: Running[] = [];
    for (let index = 0; index < request.n; index++) {
      choices.push({
        stream: new ChoiceStream(index, request, this.model, maxNew),
        kv: index === 0 ? kv : decoder.cloneCache(kv),
        logits: index === 0 ? logits : logits.slice(),
      });
    }
    this.jobs.push({ rid, choices, cancelled: false, out: [] });
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
          if (job.cancelled) for (const c of job.choices) c.stream.finish("stop", job.out);
          else for (const c of job.choices) if (!c.stream.finished) await this.step(job, c);
        } catch (e) {
          this.retire(job, (e as Error).message);
          continue;
        }
        if (job.out.length) {
          this.sink.events(job.rid, job.out);
          job.out = [];
        }
        if (job.choices.every((c) => c.stream.finished)) this.retire(job);
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

  private async step(job: Job, c: Running) {
    const token = c.stream.advance(c.logits, job.out);
    if (token !== null) c.logits = await this.model.decoder.forward([token], c.kv);
  }
}
