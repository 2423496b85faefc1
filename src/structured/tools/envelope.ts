// Sluice's generic tool format for chat templates that show no tool syntax (Gemma 3, plain Llama 3,
// most small models): the whole answer is one JSON object, either
//   {"response": "<the message>"}   or   {"tool_calls": [{"name": "...", "arguments": {...}}, ...]}
// (docs/TOOLS.md). The grammar always holds the answer to it, so the guarantees of tool_choice and
// strict hold on every model. This parser streams it back as OpenAI deltas: the response string
// decoded as content, the calls as the JSON-call parser reads Mistral's list.

import type { ToolCallParser, ToolStreamEvent } from "./format.ts";
import { JsonCallsParser } from "./stream.ts";
import { isWs } from "./stream-text.ts";

export const ENVELOPE_RESPONSE_KEY = "response";
export const ENVELOPE_CALLS_KEY = "tool_calls";

/** A marker no model writes: it opens the delegate parser's list. */
const OPEN = "\u0000";

type Head = { status: "partial" } | { status: "fail" } | { status: "ok"; key: "response" | "calls"; end: number };

/** `ws* { ws* "response" ws* : ws* "` or `ws* { ws* "tool_calls" ws* : ws* [`; end: after it. */
function matchHead(s: string): Head {
  let i = 0;
  const ws = () => {
    while (i < s.length && isWs(s[i]!)) i++;
  };
  const lit = (t: string): "ok" | "partial" | "fail" => {
    for (let k = 0; k < t.length; k++, i++) {
      if (i >= s.length) return "partial";
      if (s[i] !== t[k]) return "fail";
    }
    return "ok";
  };
  ws();
  let r = lit("{");
  if (r !== "ok") return { status: r };
  ws();
  if (i >= s.length) return { status: "partial" };
  const keyAt = i;
  let key: "response" | "calls" = "response";
  r = lit(`"${ENVELOPE_RESPONSE_KEY}"`);
  if (r === "fail") {
    i = keyAt;
    key = "calls";
    r = lit(`"${ENVELOPE_CALLS_KEY}"`);
  }
  if (r !== "ok") return { status: r };
  ws();
  r = lit(":");
  if (r !== "ok") return { status: r };
  ws();
  r = lit(key === "response" ? '"' : "[");
  if (r !== "ok") return { status: r };
  return { status: "ok", key, end: i };
}

const ESCAPES: Record<string, string> = { '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" };

export class EnvelopeParser implements ToolCallParser {
  private mode: "head" | "response" | "calls" | "done" | "text" = "head";
  private held = "";
  private out: ToolStreamEvent[] = [];
  /** An escape sequence of the response string not yet complete. */
  private escape = "";
  private calls: JsonCallsParser | null = null;

  push(text: string): ToolStreamEvent[] {
    if (this.mode === "calls") return this.calls!.push(text);
    for (let k = 0; k < text.length; k++) {
      const c = text[k]!;
      if (this.mode === "head") {
        this.held += c;
        const h = matchHead(this.held);
        if (h.status === "partial") continue;
        if (h.status === "fail") {
          // Not an envelope (an unconstrained answer): everything is content.
          this.mode = "text";
          this.content(this.held);
          this.held = "";
          continue;
        }
        this.held = "";
        if (h.key === "calls") {
          this.mode = "calls";
          this.calls = new JsonCallsParser({ markers: [OPEN], list: true, listEnd: "}" });
          return [...this.drain(), ...this.calls.push(`${OPEN}[${text.slice(k + 1)}`)];
        }
        this.mode = "response";
      } else if (this.mode === "response") this.stringChar(c);
      else if (this.mode === "text") this.content(c);
      // done: the envelope's closing brace and whitespace.
    }
    return this.drain();
  }

  finish(): ToolStreamEvent[] {
    if (this.mode === "calls") return this.calls!.finish();
    if (this.mode === "head") this.content(this.held);
    this.held = "";
    return this.drain();
  }

  private content(text: string): void {
    const last = this.out[this.out.length - 1];
    if (!text) return;
    if (last?.type === "content") this.out[this.out.length - 1] = { type: "content", text: last.text + text };
    else this.out.push({ type: "content", text });
  }

  private drain(): ToolStreamEvent[] {
    return this.out.splice(0);
  }

  /** One character of the response string: decoded as it comes, escapes once complete. */
  private stringChar(c: string): void {
    if (this.escape) {
      this.escape += c;
      if (this.escape.length === 2 && this.escape[1] !== "u") {
        this.content(ESCAPES[this.escape[1]!] ?? this.escape[1]!);
        this.escape = "";
      } else if (this.escape.length === 6) {
        // A surrogate pair's first half waits for its second (\uD83D\uDE00).
        const code = Number.parseInt(this.escape.slice(2), 16);
        if (code >= 0xd800 && code < 0xdc00) return;
        this.content(String.fromCharCode(code));
        this.escape = "";
      } else if (this.escape.length === 12) {
        try {
          this.content(JSON.parse(`"${this.escape}"`) as string);
        } catch {
          this.content("\ufffd");
        }
        this.escape = "";
      }
      return;
    }
    if (c === "\\") this.escape = c;
    else if (c === '"') this.mode = "done";
    else this.content(c);
  }
}
