// Guards around a running generation: a wall-time limit (the generation is ended and reported with
// finish_reason "length") and the time to its first token.
import type { GenerationEvent } from "../../engine/types.ts";

export interface WatchedGeneration {
  events: AsyncIterable<GenerationEvent[]>;
  /** True once the wall-time limit ended the generation. */
  timedOut(): boolean;
  /** Stops the timer (the request is over). */
  clear(): void;
}

export function watchGeneration(
  events: AsyncIterable<GenerationEvent[]>,
  opts: { maxMs: number; abort: AbortController; onFirstToken?: () => void },
): WatchedGeneration {
  let timedOut = false;
  const timer =
    opts.maxMs > 0
      ? setTimeout(() => {
          timedOut = true;
          opts.abort.abort();
        }, opts.maxMs)
      : null;
  let first = true;
  async function* relabel(): AsyncGenerator<GenerationEvent[]> {
    for await (const batch of events) {
      if (first && batch.some((e) => e.type !== "finish" && e.type !== "prompt")) {
        first = false;
        opts.onFirstToken?.();
      }
      // The engine ends an aborted choice with "stop"; cut short by the time limit it is "length".
      yield timedOut ? batch.map((e) => (e.type === "finish" && e.reason === "stop" ? { ...e, reason: "length" as const } : e)) : batch;
    }
  }
  return {
    events: relabel(),
    timedOut: () => timedOut,
    clear: () => {
      if (timer) clearTimeout(timer);
    },
  };
}

/**
 * Notices a stream consumer that stopped reading: armed after each chunk is handed over, disarmed
 * when the consumer asks for the next one. The time the engine takes to produce does not count.
 */
export class IdleWatch {
  private timer: ReturnType<typeof setTimeout> | null = null;
  constructor(
    private readonly idleMs: number,
    private readonly onIdle: () => void,
  ) {}

  arm(): void {
    this.disarm();
    if (this.idleMs > 0) this.timer = setTimeout(this.onIdle, this.idleMs);
  }

  disarm(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }
}
