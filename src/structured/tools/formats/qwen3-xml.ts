// Qwen3-Coder's XML calls (GLM-4.5 is similar in spirit): one block per call,
//   <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n…</function>\n</tool_call>
// as Qwen/Qwen3-Coder-30B-A3B-Instruct's chat template renders an assistant's tool_calls. A value is
// raw text for a string parameter and JSON otherwise; the parser turns the parameters into the
// JSON arguments object OpenAI clients expect, reading each parameter's type from the tool's schema.
import type { FunctionTool } from "../../../protocol/chat.ts";
import { alt, call, charSet, lit, opt, type Re, rep, seq, star } from "../../automaton.ts";
import { UnsupportedSchemaError } from "../../errors.ts";
import { ROOT } from "../../layout.ts";
import { utf8Sequences } from "../../utf8.ts";
import type { ToolCallParser, ToolFormat, ToolGrammarContext, ToolStreamEvent, WrittenCall } from "../format.ts";
import { beforeMarker, isWs, releasableLength } from "../stream-text.ts";
import { toolLines } from "./describe.ts";

const START = "<tool_call>";
const END = "</tool_call>";

type Schema = Record<string, unknown>;
const propertiesOf = (t: FunctionTool): Record<string, Schema> => {
  const p = (t.function.parameters ?? {}).properties;
  return p && typeof p === "object" ? (p as Record<string, Schema>) : {};
};

/** Whether a parameter's schema is string-typed (its value may be written raw, as Qwen3-Coder writes strings). */
function stringTyped(s: Schema | undefined): boolean {
  if (!s) return false;
  if (Array.isArray(s.enum)) return s.enum.every((v) => typeof v === "string");
  return typeof s.const === "string" || s.type === "string";
}

/**
 * A value as written back into JSON. A string parameter's value is the text itself, or, when it is
 * a JSON string literal (as Sluice's grammar writes constrained strings), the string it spells;
 * any other value is JSON when it parses as JSON, else kept as text.
 */
function jsonValue(raw: string, schema: Schema | undefined): string {
  if (stringTyped(schema)) {
    if (raw.startsWith('"')) {
      try {
        const v: unknown = JSON.parse(raw);
        if (typeof v === "string") return JSON.stringify(v);
      } catch {
        // Raw text that happens to start with a quote.
      }
    }
    return JSON.stringify(raw);
  }
  try {
    return JSON.stringify(JSON.parse(raw));
  } catch {
    return JSON.stringify(raw);
  }
}

type Step = { status: "partial" } | { status: "fail" } | { status: "ok"; end: number; value: string };

/** `lit` then characters up to `close` at s[from..] (whitespace first); value: what came between. */
function between(s: string, from: number, open: string, close: string): Step {
  let i = from;
  while (i < s.length && isWs(s[i]!)) i++;
  for (let k = 0; k < open.length; k++, i++) {
    if (i >= s.length) return { status: "partial" };
    if (s[i] !== open[k]) return { status: "fail" };
  }
  const at = s.indexOf(close, i);
  if (at < 0) return s.length - i > 4096 ? { status: "fail" } : { status: "partial" };
  return { status: "ok", end: at + close.length, value: s.slice(i, at) };
}

type ParamStep = { status: "partial" } | { status: "fail" } | { status: "ok"; end: number; key: string; raw: string };

/** Where the XML families differ: how the name, a parameter and the call's end are written. */
interface XmlSyntax {
  /** The function's name right after the opening <tool_call>. */
  readName(s: string): Step;
  readParam(s: string): ParamStep;
  /** The call's end (the value is what came before it, which must be whitespace). */
  readClose(s: string): Step;
  /** How the call's end starts (held back while it may still come). */
  readonly closeStart: string;
}

const QWEN_XML: XmlSyntax = {
  readName: (s) => between(s, 0, "<function=", ">"),
  readParam: (s) => {
    const p = between(s, 0, "<parameter=", "</parameter>");
    if (p.status !== "ok") return p;
    const gt = p.value.indexOf(">");
    if (gt <= 0) return { status: "fail" };
    // One newline either side of the value is the format's, not the value's.
    return { status: "ok", end: p.end, key: p.value.slice(0, gt), raw: p.value.slice(gt + 1).replace(/^\n/, "").replace(/\n$/, "") };
  },
  readClose: (s) => between(s, 0, "</function>", END),
  closeStart: "</function>",
};

/** GLM-4.5: `<tool_call>NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>\n…</tool_call>`. */
export const GLM_XML: XmlSyntax = {
  readName: (s) => {
    const m = /^[^\n<]*/.exec(s)!;
    if (m[0].length >= s.length) return s.length > 256 ? { status: "fail" } : { status: "partial" };
    const name = m[0].trim();
    return { status: "ok", end: m[0].length, value: name };
  },
  readParam: (s) => {
    const k = between(s, 0, "<arg_key>", "</arg_key>");
    if (k.status !== "ok") return k;
    const v = between(s, k.end, "<arg_value>", "</arg_value>");
    if (v.status !== "ok") return v;
    return { status: "ok", end: v.end, key: k.value, raw: v.value };
  },
  readClose: (s) => between(s, 0, END, ""),
  closeStart: END,
};

export class XmlCallsParser implements ToolCallParser {
  private mode: "text" | "call" = "text";
  private tail = "";
  private held = "";
  private heldWs = "";
  private out: ToolStreamEvent[] = [];
  private index = -1;
  /** The current call: its name once read, and how many parameters went out. */
  private current: { name: string; params: number } | null = null;
  private dropWs = false;

  constructor(
    private readonly tools: readonly FunctionTool[],
    private readonly syntax: XmlSyntax = QWEN_XML,
  ) {}

  push(text: string): ToolStreamEvent[] {
    for (const c of text) {
      if (this.mode === "text") this.textChar(c);
      else {
        this.held += c;
        this.advance();
      }
    }
    return this.out.splice(0);
  }

  finish(): ToolStreamEvent[] {
    if (this.mode === "text") this.content(this.tail);
    else if (!this.current) this.content(this.heldWs + START + this.held);
    this.tail = this.held = this.heldWs = "";
    this.mode = "text";
    return this.out.splice(0);
  }

  private content(text: string): void {
    if (!text) return;
    const last = this.out[this.out.length - 1];
    if (last?.type === "content") this.out[this.out.length - 1] = { type: "content", text: last.text + text };
    else this.out.push({ type: "content", text });
  }

  private args(delta: string): void {
    this.out.push({ type: "tool_call", index: this.index, argumentsDelta: delta });
  }

  private textChar(c: string): void {
    if (this.dropWs && isWs(c)) return;
    this.dropWs = false;
    this.tail += c;
    if (this.tail.endsWith(START)) {
      const { content, ws } = beforeMarker(this.tail, START.length);
      this.content(content);
      this.heldWs = ws;
      this.tail = this.held = "";
      this.mode = "call";
      this.current = null;
      return;
    }
    const cut = releasableLength(this.tail, [START]);
    if (cut > 0) {
      this.content(this.tail.slice(0, cut));
      this.tail = this.tail.slice(cut);
    }
  }

  /** Reads what the held text settles: the function's name, whole parameters, the call's end. */
  private advance(): void {
    for (;;) {
      if (!this.current) {
        const r = this.syntax.readName(this.held);
        if (r.status === "partial") return;
        if (r.status === "fail" || !/^[^\s<>]+$/.test(r.value)) {
          // Not a call: the marker and what followed are text again.
          const held = this.held;
          this.content(this.heldWs + START);
          this.heldWs = this.held = "";
          this.mode = "text";
          for (const ch of held) this.textChar(ch);
          return;
        }
        this.index++;
        this.heldWs = "";
        this.current = { name: r.value, params: 0 };
        this.out.push({ type: "tool_call", index: this.index, name: r.value, argumentsDelta: "" });
        this.held = this.held.slice(r.end);
        continue;
      }
      const param = this.syntax.readParam(this.held);
      if (param.status === "ok") {
        const schema = propertiesOf(this.tools.find((t) => t.function.name === this.current!.name) ?? ({ function: {} } as FunctionTool))[param.key];
        this.args(`${this.current.params === 0 ? "{" : ", "}${JSON.stringify(param.key)}: ${jsonValue(param.raw, schema)}`);
        this.current.params++;
        this.held = this.held.slice(param.end);
        continue;
      }
      const close = this.syntax.readClose(this.held);
      if (close.status === "ok" && /^\s*$/.test(close.value)) {
        this.args(this.current.params === 0 ? "{}" : "}");
        const rest = this.held.slice(close.end);
        this.current = null;
        this.held = "";
        this.mode = "text";
        this.dropWs = true;
        for (const ch of rest) this.textChar(ch);
        return;
      }
      if (param.status === "partial" || close.status === "partial") return;
      const t = this.held.trim();
      if (t === "" || this.syntax.closeStart.startsWith(t) || t.startsWith(this.syntax.closeStart)) return;
      // A malformed call: what was read stands, the rest is text.
      const rest = this.held;
      this.current = null;
      this.held = "";
      this.mode = "text";
      for (const ch of rest) this.textChar(ch);
      return;
    }
  }
}

/**
 * A parameter's value: an enum's or const's strings raw, as the model writes them; anything else
 * as the JSON its schema compiles to (strings then come quoted, which the parser reads back: a
 * set of raw characters would cost the vocabulary-wide tables a JSON string already has).
 */
function valueRe(ctx: ToolGrammarContext, schema: Schema, root: Schema, pointer: string): Re {
  if (Array.isArray(schema.enum) && schema.enum.every((v) => typeof v === "string")) return alt(...(schema.enum as string[]).map((v) => lit(v)));
  if (typeof schema.const === "string") return lit(schema.const);
  return call(ctx.compiler.rule(schema, root, pointer, ROOT));
}

/** How one parameter is written around its value. */
type ParamFrame = (key: Re, value: Re) => Re;
const QWEN_PARAM: ParamFrame = (key, value) => seq(lit("<parameter="), key, lit(">\n"), value, lit("\n</parameter>\n"));
export const GLM_PARAM: ParamFrame = (key, value) => seq(lit("<arg_key>"), key, lit("</arg_key>\n<arg_value>"), value, lit("</arg_value>\n"));

export function parametersRe(ctx: ToolGrammarContext, i: number, frame: ParamFrame = QWEN_PARAM): Re {
  const t = ctx.tools[i]!;
  const params = (t.function.parameters ?? { type: "object" }) as Schema;
  const supported = new Set(["type", "properties", "required", "additionalProperties", "description", "title", "$schema"]);
  const odd = Object.keys(params).filter((k) => !supported.has(k));
  if (odd.length > 0 || (params.type !== undefined && params.type !== "object")) {
    if (t.function.strict === true) {
      throw new UnsupportedSchemaError(odd[0] ?? "type", `/tools/${i}/function/parameters`, "Qwen3-Coder's XML parameters take an object schema of properties only");
    }
    // Not strict: any parameters, each any JSON value.
    const key = rep(charSet([...utf8Sequences(0x61, 0x7a), ...utf8Sequences(0x5f, 0x5f)]), 1, 32);
    return star(frame(key, call(ctx.compiler.rule({}, {}, `/tools/${i}/function/parameters`, ROOT))));
  }
  const required = new Set(Array.isArray(params.required) ? (params.required as string[]) : []);
  const props = propertiesOf(t);
  return seq(
    ...Object.entries(props).map(([key, schema]) => {
      const value = valueRe(ctx, schema, params, `/tools/${i}/function/parameters/properties/${key}`);
      const one = frame(lit(key), value);
      return required.has(key) ? one : opt(one);
    }),
  );
}

/**
 * A call's arguments as the XML formats write them: each parameter's name and value, strings raw
 * and other values as JSON (arguments that are not a JSON object are written as no parameters).
 */
export function xmlParameters(argumentsJson: string): [string, string][] {
  let args: unknown;
  try {
    args = JSON.parse(argumentsJson);
  } catch {
    return [];
  }
  if (typeof args !== "object" || args === null || Array.isArray(args)) return [];
  return Object.entries(args).map(([k, v]) => [k, typeof v === "string" ? v : JSON.stringify(v)]);
}

export const qwen3Xml: ToolFormat = {
  name: "qwen3_xml",
  detect: (t) => t.includes("<function=") && t.includes("<parameter="),
  controlTokens: [],
  parser: (tools) => new XmlCallsParser(tools),
  grammar: (ctx) => {
    const one = alt(...ctx.tools.map((t, i) => seq(lit(`${START}\n<function=${t.function.name}>\n`), parametersRe(ctx, i), lit(`</function>\n${END}`))));
    return { calls: ctx.repeat(one, lit("\n")), auto: { text: ctx.textWithout([START]), order: "text-then-calls" } };
  },
  render: {},
  writeCalls: (calls: readonly WrittenCall[]) =>
    calls
      .map((c) => {
        const params = xmlParameters(c.arguments).map(([k, v]) => `<parameter=${k}>\n${v}\n</parameter>\n`);
        return `${START}\n<function=${c.name}>\n${params.join("")}</function>\n${END}`;
      })
      .join("\n"),
  describeTools: (tools) =>
    `# Tools\n\nYou have access to the following functions:\n\n${toolLines(tools)}\n\nTo call a function, reply with:\n${START}\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n</function>\n${END}`,
};
