// Generation events joined for the trip to the client: what arrives together goes as one.
import type { GenerationEvent } from "./types.ts";

/**
 * Events of one generation with each choice's consecutive text joined: one content (or reasoning)
 * event per run of them, its logprobs those of all its tokens in order. The worker posts held
 * rounds so, and a stream sends one chunk for the tokens that arrived together instead of one
 * each, as vLLM does when a step makes several. Each choice keeps its events' order; the choices
 * are independent streams, so one choice's events may pass another's.
 */
export function coalesceEvents(events: GenerationEvent[]): GenerationEvent[] {
  if (events.length < 2) return events;
  const out: GenerationEvent[] = [];
  /** Per choice index, the position in `out` of its last event. */
  const last = new Map<number, number>();
  /** Positions in `out` of events made here, whose text and logprobs may be added to in place. */
  const joined = new Set<number>();
  for (const e of events) {
    if (e.type === "prompt") {
      out.push(e);
      continue;
    }
    const at = last.get(e.index);
    const prev = at === undefined ? undefined : out[at];
    if (prev?.type === "content" && e.type === "content") {
      // The first join copies (the events given are left as they are); later ones append, so a
      // batch of n tokens costs n, not n² copied logprobs.
      if (!joined.has(at!)) {
        joined.add(at!);
        out[at!] = { ...prev, ...(prev.logprobs ? { logprobs: [...prev.logprobs] } : {}) };
      }
      const into = out[at!] as typeof prev;
      into.text += e.text;
      if (e.logprobs) (into.logprobs ??= []).push(...e.logprobs);
    } else if (prev?.type === "reasoning" && e.type === "reasoning") {
      out[at!] = { ...prev, text: prev.text + e.text };
    } else {
      last.set(e.index, out.length);
      out.push(e);
    }
  }
  return out;
}
