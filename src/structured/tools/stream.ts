// Incremental tool-call parsing: text pieces in, content deltas and tool-call deltas (OpenAI
// shape: index and name first, then argument fragments) out. Markers of a call are held back
// until the call is confirmed or refuted, so they never leak into content; a call whose header
// (marker, name, arguments key) is malformed is given back as content. Arguments are streamed
// as the model writes them, so a truncated call keeps its partial arguments (as OpenAI does).

import type { ToolCallParser, ToolStreamEvent } from "./format.ts";
import { beforeMarker, isWs, releasableLength, ToolEventStream } from "./stream-text.ts";

export type { ToolStreamEvent } from "./format.ts";

/** How a family writes JSON call objects (`{"name": …, "arguments": {…}}`) into its text. */
export interface JsonCallsSyntax {
  /** Markers that open calls in free text. */
  readonly markers: readonly string[];
  /** After the marker comes a JSON list of call objects (Mistral, Phi-4-mini, Granite). */
  readonly list: boolean;
  /** Mistral's newer compact form `[TOOL_CALLS]name[ARGS]{…}` is accepted too. */
  readonly compact?: boolean;
  /** A bare call object may open the message without a marker (Llama 3.1). */
  readonly bareAtStart?: boolean;
  /** Closes each call (Hermes' `</tool_call>`). */
  readonly callEnd?: string;
  /** Closes the list after its `]` (Phi-4-mini's `<|/tool_call|>`). */
  readonly listEnd?: string;
  /** Between two call objects outside a list (Llama 3.1's ";"). */
  readonly separator?: string;
}

type Mode =
  | "text" // free text, scanning for a start marker
  | "header" // after a marker: collecting `{"name": "...", "arguments": ` (held back)
  | "args" // streaming the arguments object
  | "after" // after the arguments: closing brace, end marker or separator
  | "between"; // mistral/llama: after a call object, expecting a separator or the list's end

const MAX_HEADER = 4096;

type HeaderResult = { status: "partial" } | { status: "fail" } | { status: "ok"; name: string; end: number };

/**
 * Matches `ws* { ws* "name" ws* : ws* <string> ws* , ws* "arguments"|"parameters" ws* : ws*`
 * followed by `{` at s[from..]; `end` is the index of that `{`.
 */
function matchCallHeader(s: string, from: number): HeaderResult {
  let i = from;
  const ws = () => {
    while (i < s.length && isWs(s[i])) i++;
  };
  const lit = (t: string): "ok" | "partial" | "fail" => {
    for (let k = 0; k < t.length; k++, i++) {
      if (i >= s.length) return "partial";
      if (s[i] !== t[k]) return "fail";
    }
    return "ok";
  };
  /** Each literal after optional whitespace; the first that is not matched decides. */
  const lits = (...ts: string[]): "ok" | "partial" | "fail" => {
    for (const t of ts) {
      ws();
      const r = lit(t);
      if (r !== "ok") return r;
    }
    ws();
    return "ok";
  };
  let r = lits("{", '"name"', ":");
  if (r !== "ok") return { status: r };
  if (i >= s.length) return { status: "partial" };
  if (s[i] !== '"') return { status: "fail" };
  const start = i++;
  for (;;) {
    if (i >= s.length) return { status: "partial" };
    if (s[i] === "\\") i += 2;
    else if (s[i] === '"') break;
    else i++;
  }
  i++;
  let name: unknown;
  try {
    name = JSON.parse(s.slice(start, i));
  } catch {
    return { status: "fail" };
  }
  if (typeof name !== "string" || name === "") return { status: "fail" };
  r = lits(",");
  if (r !== "ok") return { status: r };
  if (i >= s.length) return { status: "partial" };
  const keyStart = i;
  r = lit('"arguments"');
  if (r === "fail") {
    i = keyStart;
    r = lit('"parameters"');
  }
  if (r !== "ok") return { status: r };
  r = lits(":");
  if (r !== "ok") return { status: r };
  if (i >= s.length) return { status: "partial" };
  if (s[i] !== "{") return { status: "fail" };
  return { status: "ok", name, end: i };
}

/** Mistral's newer compact form after the marker: `name[ARGS]` then the arguments object. */
function matchCompactHeader(s: string, from: number): HeaderResult {
  let i = from;
  while (i < s.length && /[A-Za-z0-9_.-]/.test(s[i])) i++;
  if (i >= s.length) return i - from > 256 ? { status: "fail" } : { status: "partial" };
  if (i === from) return { status: "fail" };
  const name = s.slice(from, i);
  const tag = "[ARGS]";
  for (let k = 0; k < tag.length; k++, i++) {
    if (i >= s.length) return { status: "partial" };
    if (s[i] !== tag[k]) return { status: "fail" };
  }
  while (i < s.length && isWs(s[i])) i++;
  if (i >= s.length) return { status: "partial" };
  return s[i] === "{" ? { status: "ok", name, end: i } : { status: "fail" };
}

export class JsonCallsParser extends ToolEventStream implements ToolCallParser {
  private mode: Mode = "text";
  private readonly markers: readonly string[];
  /** Unflushed free text: trailing whitespace and a possible marker prefix. */
  private tail = "";
  /** Whitespace just before a marker: dropped if a call follows, content otherwise. */
  private heldWs = "";
  /** Text since the marker, given back as content if the header fails. */
  private pending = "";
  /** Where the call header starts inside `pending`. */
  private headerFrom = 0;
  /** For mistral: the header starts with "[" (first call of the list). */
  private expectList = false;
  private dropWs = false;
  private atStart = true;
  private depth = 0;
  private inString = false;
  private escaped = false;
  private afterBuf = "";
  /** The current call is Mistral's compact form (no call object around the arguments). */
  private compact = false;
  /** A list's closing marker still expected after its "]" (matched so far, dropped if it comes). */
  private swallow: { want: string; got: string } | null = null;

  constructor(readonly syntax: JsonCallsSyntax) {
    super();
    this.markers = syntax.markers;
  }

  /** Feeds the next piece of generated text; returns the events it completes. */
  push(text: string): ToolStreamEvent[] {
    for (const c of text) this.char(c);
    this.flushArgs();
    return this.drain();
  }

  /** End of generation: whatever is still held back is resolved. */
  finish(): ToolStreamEvent[] {
    this.flushArgs();
    if (this.swallow) {
      // A list's closing marker cut short is dropped: it was syntax, never an answer.
      this.swallow = null;
    }
    if (this.mode === "text") {
      this.content(this.tail);
      this.tail = "";
    } else if (this.mode === "header") {
      this.giveBack();
      this.content(this.tail);
      this.tail = "";
    }
    this.mode = "text";
    return this.drain();
  }

  private char(c: string): void {
    switch (this.mode) {
      case "text":
        return this.textChar(c);
      case "header":
        return this.headerChar(c);
      case "args":
        return this.argsChar(c);
      case "after":
        return this.afterChar(c);
      case "between":
        return this.betweenChar(c);
    }
  }

  private textChar(c: string): void {
    if (this.swallow) {
      const sw = this.swallow;
      if (sw.got === "" && isWs(c)) return;
      if (sw.want[sw.got.length] === c) {
        sw.got += c;
        if (sw.got === sw.want) {
          this.swallow = null;
          this.dropWs = true;
        }
        return;
      }
      // Not the closing marker: what was held is text again.
      this.swallow = null;
      for (const ch of sw.got) this.textChar(ch);
    }
    if (this.dropWs && isWs(c)) return;
    this.dropWs = false;
    if (this.syntax.bareAtStart && this.atStart) {
      if (isWs(c)) {
        this.tail += c;
        return;
      }
      this.atStart = false;
      if (c === "{") {
        // Llama 3.1 answers a call with a bare JSON object at the start of the message.
        this.startHeader(this.tail, "", false);
        this.tail = "";
        this.headerChar(c);
        return;
      }
    }
    this.atStart = false;
    this.tail += c;
    for (const m of this.markers) {
      if (this.tail.endsWith(m)) {
        const { content, ws } = beforeMarker(this.tail, m.length);
        this.content(content);
        this.tail = "";
        this.startHeader(ws, m, this.syntax.list);
        return;
      }
    }
    // Keep back the longest suffix that could still become a marker, and whitespace before it.
    const cut = releasableLength(this.tail, this.markers);
    if (cut > 0) {
      this.content(this.tail.slice(0, cut));
      this.tail = this.tail.slice(cut);
    }
  }

  private startHeader(ws: string, marker: string, list: boolean): void {
    this.mode = "header";
    this.heldWs = ws;
    this.pending = marker;
    this.headerFrom = marker.length;
    this.expectList = list;
  }

  private headerChar(c: string): void {
    this.pending += c;
    let from = this.headerFrom;
    let r: HeaderResult;
    this.compact = false;
    if (this.expectList) {
      let i = from;
      while (i < this.pending.length && isWs(this.pending[i])) i++;
      if (i >= this.pending.length) return;
      if (this.pending[i] === "[") r = matchCallHeader(this.pending, i + 1);
      else if (!this.syntax.compact) r = { status: "fail" };
      else {
        r = matchCompactHeader(this.pending, i);
        this.compact = true;
      }
    } else r = matchCallHeader(this.pending, from);
    if (r.status === "partial") {
      if (this.pending.length > MAX_HEADER) this.failHeader();
      return;
    }
    if (r.status === "fail") return this.failHeader();
    // Confirmed: the marker and the whitespace before it are syntax, not content.
    this.heldWs = "";
    this.index++;
    this.out.push({ type: "tool_call", index: this.index, name: r.name, argumentsDelta: "" });
    this.mode = "args";
    this.depth = 0;
    this.inString = false;
    this.escaped = false;
    const rest = this.pending.slice(r.end);
    this.pending = "";
    for (const ch of rest) this.argsChar(ch);
  }

  private failHeader(): void {
    const pending = this.pending;
    this.giveBack();
    // Only the marker itself is settled as text; what followed may open another call.
    const replay = pending.slice(Math.max(1, this.headerFrom));
    this.tail = pending.slice(0, Math.max(1, this.headerFrom));
    this.content(this.tail);
    this.tail = "";
    for (const ch of replay) this.textChar(ch);
  }

  private giveBack(): void {
    this.content(this.heldWs);
    this.heldWs = "";
    this.mode = "text";
    this.dropWs = false;
    this.atStart = false;
    if (this.headerFrom === 0) {
      // Llama's bare "{": nothing was a marker, everything is text again.
      this.headerFrom = 1;
    }
  }

  /** Follows JSON strings and their escapes; says whether `c` opens or closes a bracket outside them. */
  private bracket(c: string): "open" | "close" | null {
    if (this.inString) {
      if (this.escaped) this.escaped = false;
      else if (c === "\\") this.escaped = true;
      else if (c === '"') this.inString = false;
      return null;
    }
    if (c === '"') this.inString = true;
    else if (c === "{" || c === "[") return "open";
    else if (c === "}" || c === "]") return "close";
    return null;
  }

  private argsChar(c: string): void {
    this.argBuf += c;
    const bracket = this.bracket(c);
    if (bracket === "open") this.depth++;
    else if (bracket === "close") {
      this.depth--;
      if (this.depth === 0) {
        this.flushArgs();
        this.afterBuf = "";
        if (this.compact) {
          // Mistral's "[TOOL_CALLS]name[ARGS]{...}": the arguments were the whole call.
          this.mode = "text";
          this.dropWs = true;
        } else this.mode = "after";
      }
    }
  }

  /**
   * After the arguments. Hermes: everything up to the end marker is the call's syntax. Mistral
   * and Llama: further members of the call object (e.g. an "id") are skipped up to its "}".
   */
  private afterChar(c: string): void {
    const end = this.syntax.callEnd;
    if (end) {
      this.afterBuf += c;
      if (this.afterBuf.endsWith(end)) {
        this.mode = "text";
        this.dropWs = true;
        this.afterBuf = "";
      } else if (this.afterBuf.length > 4 * end.length) this.afterBuf = this.afterBuf.slice(-end.length);
      return;
    }
    const bracket = this.bracket(c);
    if (bracket === "open") this.depth++;
    else if (bracket === "close") {
      if (this.depth > 0) this.depth--;
      else {
        this.mode = "between";
        if (c === "]") this.betweenChar(c);
      }
    }
  }

  private betweenChar(c: string): void {
    if (isWs(c)) return;
    const sep = this.syntax.list ? "," : (this.syntax.separator ?? ";");
    if (c === sep) {
      // The separator is kept with the header so a malformed next call gives it back as text.
      this.startHeader("", c, false);
      return;
    }
    this.mode = "text";
    this.dropWs = true;
    if (this.syntax.list && c === "]") {
      if (this.syntax.listEnd) this.swallow = { want: this.syntax.listEnd, got: "" };
      return;
    }
    this.textChar(c);
  }
}
