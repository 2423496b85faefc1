// GPT-OSS's harmony format (the openai-cookbook's "OpenAI harmony response format", and
// openai/gpt-oss-120b's chat_template.jinja): a tool call is a message on the commentary channel
// with a recipient, `<|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{ARGS}<|call|>`
// (the recipient may also come before the channel: `<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>…`,
// as the template writes earlier calls). `<|call|>` ends the turn, so a turn holds one call. Tools are
// declared in the developer message as a TypeScript-like `namespace functions { … }`; results come
// back as `<|start|>functions.NAME to=assistant<|channel|>commentary<|message|>RESULT<|end|>`.
//
// The parser reads text in which the markers are visible (they are control tokens of this format):
// the generation prompt is `<|start|>assistant`, so the output begins inside a header. A message
// with a `functions.` recipient is a call, its body the arguments; any other message's body (the
// final answer, a preamble, analysis when the engine does not split reasoning off) is content.
import type { FunctionTool } from "../../../protocol/chat.ts";
import { alt, lit, seq } from "../../automaton.ts";
import type { ToolCallParser, ToolFormat, ToolStreamEvent, WrittenCall } from "../format.ts";

const START = "<|start|>";
const END = "<|end|>";
const MESSAGE = "<|message|>";
const CHANNEL = "<|channel|>";
const CONSTRAIN = "<|constrain|>";
const RETURN = "<|return|>";
const CALL = "<|call|>";

export const HARMONY_CONTROL_TOKENS = [START, END, MESSAGE, CHANNEL, CONSTRAIN, RETURN, CALL] as const;

/** What the grammar writes to open a call of `name` (after the prompt's or the engine's `<|start|>assistant`). */
export const harmonyCallHeader = (name: string) => `${CHANNEL}commentary to=functions.${name} ${CONSTRAIN}json${MESSAGE}`;
/** What opens the answer. */
export const HARMONY_FINAL_HEADER = `${CHANNEL}final${MESSAGE}`;

/** A header longer than this without `<|message|>` is not one: its text is content. */
const MAX_HEADER = 512;

/** The function a header's text calls (`… to=functions.get_weather …` → "get_weather"), or null. */
export function headerFunction(header: string): string | null {
  const m = /(?:^|[\s>|])to=functions\.([^\s<]+)/.exec(header);
  return m ? m[1]! : null;
}

/** Length of the longest suffix of `s` that is a proper prefix of one of `markers` (held back). */
function partialMarker(s: string, markers: readonly string[]): number {
  const i = s.lastIndexOf("<");
  if (i < 0) return 0;
  const tail = s.slice(i);
  return markers.some((m) => m.length > tail.length && m.startsWith(tail)) ? tail.length : 0;
}

const stripMarkers = (s: string) => HARMONY_CONTROL_TOKENS.reduce((t, m) => t.split(m).join(""), s);

/** The first of `markers` in `s`: its index and which. */
function firstMarker(s: string, markers: readonly string[]): { at: number; marker: string } | null {
  let best: { at: number; marker: string } | null = null;
  for (const m of markers) {
    const at = s.indexOf(m);
    if (at >= 0 && (best === null || at < best.at)) best = { at, marker: m };
  }
  return best;
}

const BODY_ENDS = [END, CALL, RETURN, START, CHANNEL];
const HEADER_BREAKS = [MESSAGE, START, END, CALL, RETURN];

export class HarmonyCallsParser implements ToolCallParser {
  /** In a header (from the turn's start, after `<|start|>`), in a body, or between messages. */
  private mode: "header" | "body" | "between" = "header";
  private pending = "";
  /** The call whose arguments the current body is, or null (the body is content). */
  private call: number | null = null;
  private calls = 0;

  push(text: string): ToolStreamEvent[] {
    this.pending += text;
    return this.drain(false);
  }

  finish(): ToolStreamEvent[] {
    return this.drain(true);
  }

  private drain(final: boolean): ToolStreamEvent[] {
    const out: ToolStreamEvent[] = [];
    const content = (t: string) => {
      const s = stripMarkers(t);
      if (s) out.push({ type: "content", text: s });
    };
    for (;;) {
      const s = this.pending;
      if (this.mode === "header") {
        const hit = firstMarker(s, HEADER_BREAKS);
        if (hit?.marker === MESSAGE) {
          const fn = headerFunction(s.slice(0, hit.at));
          this.pending = s.slice(hit.at + MESSAGE.length);
          this.mode = "body";
          this.call = null;
          if (fn !== null) {
            this.call = this.calls++;
            out.push({ type: "tool_call", index: this.call, name: fn, argumentsDelta: "" });
          }
          continue;
        }
        if (hit) {
          // A header that never reached its body: its text is the model's all the same.
          content(s.slice(0, hit.at));
          this.pending = s.slice(hit.at + hit.marker.length);
          if (hit.marker !== START) this.mode = "between";
          continue;
        }
        if (final || s.length > MAX_HEADER) {
          content(s);
          this.pending = "";
          if (!final) this.mode = "between";
        }
        return out;
      }
      if (this.mode === "between") {
        const hit = firstMarker(s, [START, CHANNEL]);
        if (hit) {
          content(s.slice(0, hit.at));
          // `<|channel|>` opens a header of its own (the role left out).
          this.pending = hit.marker === START ? s.slice(hit.at + START.length) : s.slice(hit.at);
          this.mode = "header";
          continue;
        }
        const keep = final ? 0 : partialMarker(s, [START, CHANNEL]);
        content(s.slice(0, s.length - keep));
        this.pending = s.slice(s.length - keep);
        return out;
      }
      // A body: up to the end of the message, or a marker that starts the next header.
      const hit = firstMarker(s, BODY_ENDS);
      const upto = hit ? hit.at : s.length - (final ? 0 : partialMarker(s, BODY_ENDS));
      const body = s.slice(0, upto);
      if (body) {
        if (this.call !== null) out.push({ type: "tool_call", index: this.call, argumentsDelta: body });
        else out.push({ type: "content", text: body });
      }
      if (!hit) {
        this.pending = s.slice(upto);
        return out;
      }
      this.call = null;
      if (hit.marker === CHANNEL) {
        this.pending = s.slice(hit.at);
        this.mode = "header";
      } else {
        this.pending = s.slice(hit.at + hit.marker.length);
        this.mode = hit.marker === START ? "header" : "between";
      }
    }
  }
}

/** A JSON Schema as the TypeScript-like type gpt-oss's template declares parameters with. */
function tsType(schema: unknown, depth = 0): string {
  if (typeof schema !== "object" || schema === null || depth > 6) return "any";
  const s = schema as Record<string, unknown>;
  if (Array.isArray(s.enum)) return s.enum.map((v) => JSON.stringify(v)).join(" | ");
  if ("const" in s) return JSON.stringify(s.const);
  const union = (s.anyOf ?? s.oneOf) as unknown[] | undefined;
  if (Array.isArray(union)) return union.map((v) => tsType(v, depth + 1)).join(" | ");
  if (Array.isArray(s.type)) return s.type.map((t) => tsType({ ...s, type: t }, depth + 1)).join(" | ");
  switch (s.type) {
    case "string":
      return "string";
    case "number":
    case "integer":
      return "number";
    case "boolean":
      return "boolean";
    case "null":
      return "null";
    case "array":
      return s.items ? `${wrap(tsType(s.items, depth + 1))}[]` : "any[]";
    case "object": {
      const props = s.properties as Record<string, unknown> | undefined;
      if (!props || Object.keys(props).length === 0) return "object";
      const req = new Set((s.required as string[] | undefined) ?? []);
      return `{\n${Object.entries(props)
        .map(([k, v]) => `${k}${req.has(k) ? "" : "?"}: ${tsType(v, depth + 1)}`)
        .join(",\n")}\n}`;
    }
    default:
      return "any";
  }
}

const wrap = (t: string) => (t.includes(" | ") ? `(${t})` : t);

/** The developer message's `# Tools` section as gpt-oss's template writes it. */
export function harmonyToolNamespace(tools: readonly FunctionTool[]): string {
  const decls = tools.map((t) => {
    const f = t.function;
    const head = f.description ? `// ${f.description}\n` : "";
    const params = f.parameters as { properties?: Record<string, { description?: string }>; required?: string[] } | undefined;
    const props = params?.properties ?? {};
    if (Object.keys(props).length === 0) return `${head}type ${f.name} = () => any;\n\n`;
    const req = new Set(params?.required ?? []);
    const lines = Object.entries(props).map(([k, v]) => `${v?.description ? `// ${v.description}\n` : ""}${k}${req.has(k) ? "" : "?"}: ${tsType(v)},\n`);
    return `${head}type ${f.name} = (_: {\n${lines.join("")}}) => any;\n\n`;
  });
  return `# Tools\n\n## functions\n\nnamespace functions {\n\n${decls.join("")}} // namespace functions`;
}

export const harmony: ToolFormat = {
  name: "harmony",
  // gpt-oss's template writes calls with `to=` + "functions." and ends them with <|call|>.
  detect: (t) => t.includes(CALL) || t.includes("to=functions."),
  controlTokens: HARMONY_CONTROL_TOKENS,
  // The answer's header, the call's header and the end of the turn are the engine's concern
  // (see engine/worker/harmony-stage.ts): one call per turn, since <|call|> ends it.
  callEnd: CALL,
  parser: () => new HarmonyCallsParser(),
  grammar: (ctx) => {
    const calls = alt(...ctx.tools.map((t, i) => seq(lit(harmonyCallHeader(t.function.name)), ctx.argsRe(i))));
    const text = seq(lit(HARMONY_FINAL_HEADER), ctx.textWithout([...HARMONY_CONTROL_TOKENS]));
    return { calls, auto: { text, order: "text-or-calls" } };
  },
  render: {},
  writeCalls: (calls: readonly WrittenCall[]) => calls.map((c) => `${harmonyCallHeader(c.name)}${c.arguments}${CALL}`).join(""),
  describeTools: harmonyToolNamespace,
};
