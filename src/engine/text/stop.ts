// Stop strings over streamed text. Text that might be the start of a stop string is held back
// until the next piece settles it; a stop string itself is never emitted. The match chosen is the
// one completed first (smallest end; at equal ends the longest), which makes the result
// independent of how the text was split into pieces.

export interface StopResult {
  /** Text that is safe to emit now. */
  text: string;
  /** A stop string matched: `text` ends right before it and the generation should end. */
  stopped: boolean;
  /** Which stop string matched, when one did. */
  stop?: string;
}

export class StopMatcher {
  private readonly stops: string[];
  private held = "";
  private done = false;

  constructor(stops: readonly string[]) {
    this.stops = [...new Set(stops.filter((s) => s.length > 0))];
  }

  push(piece: string): StopResult {
    if (this.done) return { text: "", stopped: true };
    const buf = this.held + piece;
    if (this.stops.length === 0) {
      this.held = "";
      return { text: buf, stopped: false };
    }
    let bestEnd = Infinity;
    let bestStart = 0;
    let best: string | undefined;
    for (const s of this.stops) {
      const at = buf.indexOf(s);
      if (at < 0) continue;
      const end = at + s.length;
      if (end < bestEnd || (end === bestEnd && at < bestStart)) {
        bestEnd = end;
        bestStart = at;
        best = s;
      }
    }
    if (best !== undefined) {
      this.done = true;
      this.held = "";
      return { text: buf.slice(0, bestStart), stopped: true, stop: best };
    }
    const hold = this.heldLength(buf);
    this.held = buf.slice(buf.length - hold);
    return { text: buf.slice(0, buf.length - hold), stopped: false };
  }

  /** The generation ended for another reason: whatever was held back is plain text. */
  flush(): string {
    if (this.done) return "";
    const rest = this.held;
    this.held = "";
    return rest;
  }

  /** Longest suffix of `buf` that is a proper prefix of some stop string. */
  private heldLength(buf: string): number {
    let longest = 0;
    for (const s of this.stops) {
      for (let n = Math.min(buf.length, s.length - 1); n > longest; n--) {
        if (buf.endsWith(s.slice(0, n))) {
          longest = n;
          break;
        }
      }
    }
    return longest;
  }
}
