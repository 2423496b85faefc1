// Streaming parser for families that frame each call with their own markers around a bare name and
// a JSON arguments object: DeepSeek V3/R1 (`<｜tool▁call▁begin｜>function<｜tool▁sep｜>name\n```json\n{…}\n```<｜tool▁call▁end｜>`),
// Kimi K2 (`<|tool_call_begin|>functions.name:0<|tool_call_argument_begin|>{…}<|tool_call_end|>`).
// A format describes its framing as pieces; the parser holds back what could still be framing,
// gives back as content a header that turns out not to be one, and streams the arguments as written.

import type { ToolCallParser, ToolStreamEvent } from "./format.ts";
import { beforeMarker, isWs, releasableLength, ToolEventStream } from "./stream-text.ts";

export type Piece =
  | { readonly lit: string }
  /** Any run of whitespace, possibly empty. */
  | { readonly ws: true }
  /** The function's name: one or more characters matching `chars` (tested one at a time). */
  | { readonly name: RegExp }
  /** One or more characters matching `chars`, read and dropped (Kimi's call index). */
  | { readonly skip: RegExp };

export interface DelimitedSyntax {
  /** Opens the calls in free text. */
  readonly start: string;
  /** After `start` (and after `next`): up to the arguments' "{". */
  readonly head: readonly Piece[];
  /** After the arguments' closing "}". */
  readonly tail: readonly Piece[];
  /** Between two calls, before the next call's `head` (may be empty). */
  readonly next: readonly Piece[];
  /** Closes the calls (may be empty). */
  readonly end: readonly Piece[];
}

type Match = { status: "partial" } | { status: "fail" } | { status: "ok"; end: number; name: string | null };
const MAX_HELD = 4096;

/** Matches `pieces` at s[from..]; "partial" when s ends before they are decided. */
export function matchPieces(s: string, from: number, pieces: readonly Piece[]): Match {
  let i = from;
  let name: string | null = null;
  for (const p of pieces) {
    if ("lit" in p) {
      for (let k = 0; k < p.lit.length; k++, i++) {
        if (i >= s.length) return { status: "partial" };
        if (s[i] !== p.lit[k]) return { status: "fail" };
      }
    } else if ("ws" in p) {
      while (i < s.length && isWs(s[i]!)) i++;
      if (i >= s.length) return { status: "partial" };
    } else {
      const chars = "name" in p ? p.name : p.skip;
      const start = i;
      while (i < s.length && chars.test(s[i]!)) i++;
      if (i >= s.length) return i - start > 256 ? { status: "fail" } : { status: "partial" };
      if (i === start) return { status: "fail" };
      if ("name" in p) name = s.slice(start, i);
    }
  }
  return { status: "ok", end: i, name };
}

type Mode = "text" | "head" | "args" | "tail" | "after";

export class DelimitedParser extends ToolEventStream implements ToolCallParser {
  private mode: Mode = "text";
  /** Free text not yet given out: a possible prefix of `start` and whitespace before it. */
  private tail = "";
  /** Framing text held back until it is decided. */
  private held = "";
  /** The marker (start or the text of `next`) the held header follows, given back if it fails. */
  private opener = "";
  private dropWs = false;
  private depth = 0;
  private inString = false;
  private escaped = false;

  constructor(readonly syntax: DelimitedSyntax) {
    super();
  }

  push(text: string): ToolStreamEvent[] {
    for (const c of text) this.char(c);
    this.flushArgs();
    return this.drain();
  }

  finish(): ToolStreamEvent[] {
    this.flushArgs();
    if (this.mode === "head") this.content(this.opener + this.held);
    else if (this.mode === "text") this.content(this.tail);
    // In tail/after what is held is a finished call's framing cut short: never an answer.
    this.mode = "text";
    this.tail = this.held = this.opener = "";
    return this.drain();
  }

  private char(c: string): void {
    switch (this.mode) {
      case "text":
        return this.textChar(c);
      case "head":
        return this.headChar(c);
      case "args":
        return this.argsChar(c);
      case "tail":
        return this.tailChar(c);
      case "after":
        return this.afterChar(c);
    }
  }

  private textChar(c: string): void {
    if (this.dropWs && isWs(c)) return;
    this.dropWs = false;
    this.tail += c;
    const m = this.syntax.start;
    if (this.tail.endsWith(m)) {
      // Whitespace before the calls is framing, not the answer (given back if no call follows).
      const { content, ws } = beforeMarker(this.tail, m.length);
      this.content(content);
      this.tail = "";
      this.mode = "head";
      this.opener = ws + m;
      this.held = "";
      return;
    }
    const cut = releasableLength(this.tail, [m]);
    if (cut > 0) {
      this.content(this.tail.slice(0, cut));
      this.tail = this.tail.slice(cut);
    }
  }

  /** Replays held text as free text after a header or framing that failed. */
  private replay(text: string): void {
    this.mode = "text";
    this.held = "";
    for (const ch of text) this.textChar(ch);
  }

  private headChar(c: string): void {
    this.held += c;
    const r = matchPieces(this.held, 0, this.syntax.head);
    if (r.status === "partial") {
      if (this.held.length > MAX_HELD) this.failHead();
      return;
    }
    if (r.status === "fail" || this.held[r.end] !== "{" || !r.name) {
      if (r.status === "ok" && r.end >= this.held.length) return;
      return this.failHead();
    }
    this.startCall(r.name, this.held.slice(r.end));
  }

  /** A confirmed header: the call's name goes out, then its arguments from `rest` on. */
  private startCall(name: string, rest: string): void {
    this.index++;
    this.out.push({ type: "tool_call", index: this.index, name, argumentsDelta: "" });
    this.mode = "args";
    this.depth = 0;
    this.inString = false;
    this.escaped = false;
    this.held = "";
    this.opener = "";
    for (const ch of rest) this.char(ch);
  }

  private failHead(): void {
    // The opener is settled as text; what followed may open another call.
    const held = this.held;
    this.content(this.opener);
    this.opener = "";
    this.replay(held);
  }

  private argsChar(c: string): void {
    this.argBuf += c;
    if (this.inString) {
      if (this.escaped) this.escaped = false;
      else if (c === "\\") this.escaped = true;
      else if (c === '"') this.inString = false;
      return;
    }
    if (c === '"') this.inString = true;
    else if (c === "{" || c === "[") this.depth++;
    else if (c === "}" || c === "]") {
      this.depth--;
      if (this.depth === 0) {
        this.flushArgs();
        this.mode = "tail";
        this.held = "";
      }
    }
  }

  private tailChar(c: string): void {
    this.held += c;
    const r = matchPieces(this.held, 0, this.syntax.tail);
    if (r.status === "partial") return;
    if (r.status === "fail") return this.replay(this.held);
    const rest = this.held.slice(r.end);
    this.mode = "after";
    this.held = "";
    for (const ch of rest) this.char(ch);
  }

  private afterChar(c: string): void {
    this.held += c;
    const end = this.syntax.end.length > 0 ? matchPieces(this.held, 0, this.syntax.end) : ({ status: "fail" } as Match);
    if (end.status === "ok") {
      const rest = this.held.slice(end.end);
      this.mode = "text";
      this.held = "";
      this.dropWs = true;
      for (const ch of rest) this.char(ch);
      return;
    }
    // Another call: the separator, then a header as the first call's.
    const next = matchPieces(this.held, 0, [...this.syntax.next, ...this.syntax.head]);
    if (next.status === "ok" && next.end < this.held.length) {
      if (this.held[next.end] === "{" && next.name) return this.startCall(next.name, this.held.slice(next.end));
      return this.replay(this.held);
    }
    if (next.status === "fail" && end.status === "fail") this.replay(this.held);
  }
}
