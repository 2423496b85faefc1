// The model worker's own code driven in the benchmark's process, without the HTTP server, the
// messages between threads and the client: what the engine alone does on this machine.
import { DEFAULT_SAMPLING } from "../src/engine/sampling/index.ts";
import type { GenerateRequest, GenerationEvent, SpeculateMode } from "../src/engine/types.ts";
import { ModelRunner } from "../src/engine/worker/model-runner.ts";
import { Scheduler } from "../src/engine/worker/scheduler.ts";

export interface Measure {
  /** Time to first token, ms. */
  ttftMs: number;
  /** Decode rate from the first to the last token. */
  tokPerS: number;
}

/**
 * The model worker's own code (scheduler, KV cache, sampling, detokenisation) driven in this
 * process, without the HTTP thread, the message to it and the client: the like-for-like
 * counterpart of transformers.js's in-process generate().
 */
export class InProcessEngine {
  private rid = 0;
  /** Time spent inside the decoder's ONNX Runtime runs, ms, since load. */
  onnxMs = 0;
  private waiting = new Map<number, { times: number[]; tokens: number; text: string; finish: string; done: (error?: string) => void }>();
  private constructor(
    private readonly scheduler: Scheduler,
    private readonly runner: ModelRunner,
    private readonly oneAccount: boolean,
  ) {}

  /**
   * `oneAccount`: every request from one account, whose earlier answers then serve as drafts for
   * its next (src/engine/speculation/history.ts). By default each request comes from an account of
   * its own: a benchmark that sends one prompt again and again would otherwise measure decoding
   * drafted from its own earlier answer.
   */
  static async load(dir: string, id: string, opts: { speculate?: SpeculateMode; oneAccount?: boolean; batchInvariant?: boolean } = {}): Promise<InProcessEngine> {
    const runner = await ModelRunner.load({ id, dir, device: "cpu", threads: 0, kvBudgetBytes: 0, maxQueue: 0, batchInvariant: opts.batchInvariant });
    let self: InProcessEngine | null = null;
    const scheduler = new Scheduler(runner, {
      events: (rid, events) => self!.events(rid, events),
      done: (rid, error) => self!.waiting.get(rid)?.done(error),
    }, { speculate: opts.speculate });
    self = new InProcessEngine(scheduler, runner, opts.oneAccount ?? false);
    // How much of the engine's time is ONNX Runtime's own: the decoder's runs, timed around.
    const decoder = runner.decoder;
    const timed = <A extends unknown[], R>(run: (...args: A) => Promise<R>) => async (...args: A): Promise<R> => {
      const t = performance.now();
      try {
        return await run(...args);
      } finally {
        self!.onnxMs += performance.now() - t;
      }
    };
    decoder.runPool = timed(decoder.runPool.bind(decoder));
    decoder.runPadded = timed(decoder.runPadded.bind(decoder));
    void scheduler.run();
    return self;
  }

  private events(rid: number, events: GenerationEvent[]) {
    const w = this.waiting.get(rid);
    if (!w) return;
    const now = performance.now();
    for (const e of events) {
      if (e.type === "content" && e.text) {
        w.times.push(now);
        w.text += e.text;
      }
      if (e.type === "finish") {
        w.tokens = e.completionTokens;
        w.finish = e.reason;
      }
    }
  }

  /** One greedy request of exactly `tokens` tokens (EOS banned); its TTFT and decode rate. */
  async run(prompt: string, eos: number[], tokens: number): Promise<Measure> {
    const start = performance.now();
    const w = await this.request(prompt, tokens, Object.fromEntries(eos.map((e) => [e, -100])));
    if (w.tokens !== tokens) throw new Error(`expected ${tokens} tokens, got ${w.tokens}`);
    const [first, last] = [w.times[0]!, w.times.at(-1)!];
    return { ttftMs: first - start, tokPerS: (w.times.length - 1) / ((last - first) / 1000) };
  }

  /** One greedy request of at most `maxTokens` tokens, as a client would send it; tokens made. */
  async generate(prompt: string, maxTokens: number): Promise<number> {
    return (await this.request(prompt, maxTokens, {})).tokens;
  }

  /** Runs one greedy request to its end: when each piece of text came, and how many tokens. */
  private request(prompt: string, maxTokens: number, logitBias: Record<number, number>): Promise<{ times: number[]; tokens: number }> {
    return this.complete({ messages: [{ role: "user", content: prompt }], sampling: { ...DEFAULT_SAMPLING, temperature: 0, logitBias }, maxTokens });
  }

  /** One request of one choice run to its end: its text, finish reason and token count. */
  async complete(req: Pick<GenerateRequest, "messages" | "sampling" | "maxTokens"> & Partial<Pick<GenerateRequest, "responseFormat">>): Promise<{ times: number[]; tokens: number; text: string; finish: string }> {
    const rid = ++this.rid;
    const w = { times: [] as number[], tokens: 0, text: "", finish: "", done: (_?: string) => {} };
    const finished = new Promise<void>((resolve, reject) => (w.done = (error) => (error ? reject(new Error(error)) : resolve())));
    this.waiting.set(rid, w);
    const fairnessKey = this.oneAccount ? "bench" : `bench-${rid}`;
    await this.scheduler.admit(rid, { requestId: `bench-${rid}`, modelId: this.runner.info.id, stop: [], n: 1, logprobs: false, topLogprobs: 0, fairnessKey, ...req });
    await finished;
    this.waiting.delete(rid);
    return w;
  }

  async close(): Promise<void> {
    this.scheduler.stop();
    await this.runner.decoder.release();
  }
}
