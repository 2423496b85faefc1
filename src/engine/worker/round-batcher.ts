// The model worker's scheduler rounds, on their way to the HTTP thread. Each post wakes that
// thread: on a virtual machine the wake-up (an interrupt to the other core) cost about a tenth of
// a small model's decode step, and the HTTP thread's own CPU per token halved when it woke every
// few tokens instead of every token. So a round that ends within POST_INTERVAL_MS of the last post
// is held and goes with the next one, unless it is urgent: a request's first token or its end,
// or the scheduler going idle or about to read a prompt (see JobSink.endRound).
import type { RoundMessage } from "./protocol.ts";

/** The longest a round's events wait for company, while rounds keep coming. */
export const POST_INTERVAL_MS = 1;

export class RoundBatcher {
  private pending: RoundMessage[] = [];
  private lastPost = -Infinity;

  constructor(
    private readonly post: (messages: RoundMessage[]) => void,
    private readonly intervalMs = POST_INTERVAL_MS,
    private readonly now: () => number = () => performance.now(),
  ) {}

  add(message: RoundMessage): void {
    this.pending.push(message);
  }

  /** A round ended: posts everything pending when urgent or when the interval has passed. */
  endRound(urgent: boolean): void {
    if (this.pending.length === 0) return;
    const now = this.now();
    if (!urgent && now - this.lastPost < this.intervalMs) return;
    this.lastPost = now;
    const messages = this.pending;
    this.pending = [];
    this.post(messages);
  }
}
