// The model worker's scheduler rounds, on their way to the HTTP thread. Each post wakes that
// thread, and each chunk it writes wakes the client: on this two-core virtual machine a wake-up
// cost the HTTP thread about 160 µs of CPU and the openai client about 200 µs for a ~50M model
// (scratch measurement), on the core the model's own second ONNX Runtime thread uses. So the
// rounds that end within the stream interval of the last post are held and go with the next, in
// one message that holds each request's events once, its choices' text joined (see
// coalesceEvents), and the HTTP thread writes what came together as one chunk per choice.
// Urgent rounds go at once: a request's first token or its end, the scheduler going idle or
// about to read a prompt (see JobSink.endRound). A model slower than the interval per token
// posts every token as it comes.
import { coalesceEvents } from "../events.ts";
import type { RoundMessage } from "./protocol.ts";

/**
 * The longest a round's events wait for company, while rounds keep coming (serve
 * --stream-interval-ms). 10 ms: at most a hundred chunks a second per stream, which no reader
 * sees as less smooth; the HTTP thread's and the client's CPU per token halved for a ~50M model
 * against 1 ms (scratch measurement, interleaved on one server).
 */
export const POST_INTERVAL_MS = 10;

export class RoundBatcher {
  private pending: RoundMessage[] = [];
  private lastPost = -Infinity;

  constructor(
    private readonly post: (messages: RoundMessage[]) => void,
    /** Set when the model loads (WorkerOptions.streamIntervalMs). */
    public intervalMs = POST_INTERVAL_MS,
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
    this.post(messages.length > 1 ? joinRounds(messages) : messages);
  }
}

/**
 * Held rounds as one: each request's events in one message, where its first events were, their
 * text joined; a request's end stays after all its events.
 */
export function joinRounds(messages: RoundMessage[]): RoundMessage[] {
  const out: RoundMessage[] = [];
  /** Per request, its events message in `out` (until it ends). */
  const open = new Map<number, Extract<RoundMessage, { type: "events" }>>();
  for (const m of messages) {
    if (m.type === "done") {
      open.delete(m.rid);
      out.push(m);
      continue;
    }
    const joined = open.get(m.rid);
    if (joined) joined.events.push(...m.events);
    else {
      const copy = { type: "events" as const, rid: m.rid, events: [...m.events] };
      open.set(m.rid, copy);
      out.push(copy);
    }
  }
  for (const m of out) if (m.type === "events") m.events = coalesceEvents(m.events);
  return out;
}
