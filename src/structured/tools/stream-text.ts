// What every streamed tool-call parser does with the text around the calls: which part of the text
// held so far can go out as the answer while a call's start marker may still be arriving, and how
// one feed's events are coalesced before they go out as OpenAI deltas.
import type { ToolStreamEvent } from "./format.ts";

export const isWs = (c: string | undefined) => c === " " || c === "\n" || c === "\r" || c === "\t";

/**
 * How much of `tail` (text not yet given out) is the answer for certain: all but the longest
 * suffix that could still become one of `markers`, and the whitespace before it (framing when a
 * call follows, given back with the text if none does).
 */
export function releasableLength(tail: string, markers: readonly string[]): number {
  let keep = 0;
  for (const m of markers) {
    for (let k = Math.min(m.length - 1, tail.length); k > keep; k--) {
      if (tail.endsWith(m.slice(0, k))) {
        keep = k;
        break;
      }
    }
  }
  let cut = tail.length - keep;
  while (cut > 0 && isWs(tail[cut - 1])) cut--;
  return cut;
}

/** `text` ending in a start marker of length `marker`: the answer before it, and the whitespace between them. */
export function beforeMarker(text: string, marker: number): { content: string; ws: string } {
  const before = text.slice(0, text.length - marker);
  const content = before.replace(/[ \t\r\n]+$/, "");
  return { content, ws: before.slice(content.length) };
}

/** Neighbouring content, and argument deltas of one call, joined (a call's name keeps its own event, as OpenAI's first delta does). */
export function coalesce(events: ToolStreamEvent[]): ToolStreamEvent[] {
  const merged: ToolStreamEvent[] = [];
  for (const e of events) {
    const last = merged[merged.length - 1];
    if (last?.type === "content" && e.type === "content") merged[merged.length - 1] = { type: "content", text: last.text + e.text };
    else if (last?.type === "tool_call" && e.type === "tool_call" && last.index === e.index && e.name === undefined && last.name === undefined) {
      merged[merged.length - 1] = { ...last, argumentsDelta: last.argumentsDelta + e.argumentsDelta };
    } else merged.push(e);
  }
  return merged;
}

/**
 * The events a streamed parser's feed completes, batched: the answer's text, and the current
 * call's argument text gathered per feed (one delta per feed, not per character).
 */
export abstract class ToolEventStream {
  protected readonly out: ToolStreamEvent[] = [];
  /** The current call's index among the message's calls (-1 before the first). */
  protected index = -1;
  protected argBuf = "";

  protected drain(): ToolStreamEvent[] {
    return coalesce(this.out.splice(0));
  }

  protected content(text: string): void {
    if (text) this.out.push({ type: "content", text });
  }

  protected flushArgs(): void {
    if (this.argBuf) {
      this.out.push({ type: "tool_call", index: this.index, argumentsDelta: this.argBuf });
      this.argBuf = "";
    }
  }
}
