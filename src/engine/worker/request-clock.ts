// When a request's steps happened in the model's worker, for its trace and the latency histograms
// (see GenerationTimings): timing points the scheduler notes as it goes, sent with the request's
// end. Cheap enough for every token: a number per token, compared and pushed.
import type { GenerationTimings, Interval } from "../types.ts";

/**
 * Epoch milliseconds with a fraction: performance.timeOrigin + performance.now() is one clock in
 * every thread of the process (Date.now() has whole milliseconds only).
 */
export const epochMs = (): number => performance.timeOrigin + performance.now();

/** What the worker measures of a request: GenerationTimings less the host's model load. */
export type WorkerTimings = Omit<GenerationTimings, "modelLoad">;

export class RequestClock {
  private prompt?: Interval;
  private compile?: Interval;
  private readonly queued: number;
  private admitted = 0;
  private firstToken = 0;
  private preemptions = 0;
  /** Per choice: its first and latest token's time and how many rounds gave it tokens. */
  private readonly choices: { first: number; last: number; rounds: number; tokens: number }[] = [];
  private readonly gaps: number[] = [];

  constructor(
    /** When the request was queued for KV memory. */
    queuedAt: number,
    prompt: Interval,
    /** Absent when the request has no grammar. */
    compile: Interval | null,
  ) {
    this.queued = queuedAt;
    this.prompt = prompt;
    if (compile) this.compile = compile;
  }

  /** Admitted to run; the queue wait ends at the first admission (a resumed request's wait is a pause in its decode). */
  admit(at: number): void {
    if (this.admitted === 0) this.admitted = at;
  }

  preempted(): void {
    this.preemptions++;
  }

  /**
   * A round gave choice `index` `tokens` tokens at `at`. A round that gives several (accepted
   * drafts) counts as one gap, as it reaches the client together.
   */
  tokens(index: number, at: number, tokens = 1): void {
    if (this.firstToken === 0) this.firstToken = at;
    const c = this.choices[index];
    if (!c) {
      this.choices[index] = { first: at, last: at, rounds: 1, tokens };
      return;
    }
    this.gaps.push((at - c.last) / 1000);
    c.last = at;
    c.rounds++;
    c.tokens += tokens;
  }

  /** The timings, at the request's end (`at`). */
  timings(at: number): WorkerTimings {
    const out: WorkerTimings = { interTokenSeconds: this.gaps, timePerOutputTokenSeconds: [], preemptions: this.preemptions };
    if (this.prompt) out.prompt = this.prompt;
    if (this.compile) out.compile = this.compile;
    if (this.admitted > 0) {
      out.queue = { start: this.queued, end: this.admitted };
      out.prefill = { start: this.admitted, end: this.firstToken || at };
      if (this.firstToken > 0) out.decode = { start: this.firstToken, end: Math.max(this.firstToken, ...this.choices.filter(Boolean).map((c) => c.last)) };
    } else out.queue = { start: this.queued, end: at };
    for (const c of this.choices) {
      if (c && c.tokens > 1) out.timePerOutputTokenSeconds.push((c.last - c.first) / 1000 / (c.tokens - 1));
    }
    return out;
  }
}
