// The model worker's scheduler driven in the test's process: requests in, every event out, for
// comparing what a model produces with speculative decoding and without it.
import { DEFAULT_SAMPLING } from "../../../src/engine/sampling/index.ts";
import type { GenerationEvent } from "../../../src/engine/types.ts";
import { ModelRunner } from "../../../src/engine/worker/model-runner.ts";
import type { WireRequest } from "../../../src/engine/worker/protocol.ts";
import { Scheduler, type SchedulerOptions } from "../../../src/engine/worker/scheduler.ts";

export type TestRequest = Partial<Omit<WireRequest, "sampling">> & { sampling?: Partial<WireRequest["sampling"]>; content?: string };

export interface Outcome {
  events: GenerationEvent[];
  error?: string;
}

export class SchedulerHarness {
  private rid = 0;
  private readonly waiting = new Map<number, { events: GenerationEvent[]; done: (error?: string) => void }>();
  readonly scheduler: Scheduler;

  constructor(
    readonly runner: ModelRunner,
    opts: SchedulerOptions,
  ) {
    this.scheduler = new Scheduler(runner, {
      events: (rid, events) => this.waiting.get(rid)?.events.push(...events),
      done: (rid, error) => this.waiting.get(rid)?.done(error),
    }, opts);
    void this.scheduler.run();
  }

  static load(dir: string, id: string): Promise<ModelRunner> {
    return ModelRunner.load({ id, dir, device: "cpu", threads: 1, kvBudgetBytes: 0, maxQueue: 0 });
  }

  request(r: TestRequest): WireRequest {
    const { content, sampling, ...rest } = r;
    return {
      requestId: `test-${this.rid + 1}`,
      modelId: this.runner.info.id,
      messages: [{ role: "user", content: content ?? "Once upon a time" }],
      sampling: { ...DEFAULT_SAMPLING, temperature: 0, ...sampling },
      stop: [],
      n: 1,
      logprobs: false,
      topLogprobs: 0,
      ...rest,
    };
  }

  /** Admits the request; resolves with its events once it has ended. */
  async start(r: TestRequest): Promise<{ rid: number; done: Promise<Outcome> }> {
    const rid = ++this.rid;
    const events: GenerationEvent[] = [];
    let done!: (o: Outcome) => void;
    const finished = new Promise<Outcome>((resolve) => (done = resolve));
    this.waiting.set(rid, { events, done: (error) => done({ events, error }) });
    await this.scheduler.admit(rid, this.request(r));
    return { rid, done: finished };
  }

  async run(r: TestRequest): Promise<Outcome> {
    return (await (await this.start(r)).done);
  }

  stop(): void {
    this.scheduler.stop();
  }
}

/** The events with what differs by design between runs removed (tool call ids are random). */
export function comparable(events: GenerationEvent[]): unknown[] {
  return events.map((e) => (e.type === "tool_call" && e.id !== undefined ? { ...e, id: "call" } : e));
}

/** The text of choice `index`. */
export function textOf(events: GenerationEvent[], index = 0): string {
  return events
    .filter((e): e is Extract<GenerationEvent, { type: "content" }> => e.type === "content" && e.index === index)
    .map((e) => e.text)
    .join("");
}
