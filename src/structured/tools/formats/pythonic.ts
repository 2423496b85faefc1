// Pythonic calls (Llama 4, Llama 3.2's small models, and vLLM's `pythonic` parser): the whole
// answer is a Python list of calls with keyword arguments, `[get_weather(city="Oslo"), now()]`,
// optionally between Llama 4's <|python_start|> and <|python_end|>. Arguments are Python literals;
// the parser turns them into the JSON object OpenAI clients expect (True/False/None included).
// The grammar writes each value as the JSON its schema compiles to (a JSON string, number, list or
// object is also a Python literal; JSON's true/false/null are read as Python's).
import type { FunctionTool } from "../../../protocol/chat.ts";
import { alt, call, EMPTY, lit, opt, type Re, seq } from "../../automaton.ts";
import { UnsupportedSchemaError } from "../../errors.ts";
import { ROOT } from "../../layout.ts";
import type { ToolCallParser, ToolFormat, ToolGrammarContext, ToolStreamEvent, WrittenCall } from "../format.ts";
import { toolLines } from "./describe.ts";

const PY_START = "<|python_start|>";
const PY_END = "<|python_end|>";
const IDENT = /[A-Za-z0-9_.-]/;

class PyError extends Error {}
class Incomplete extends Error {}

/** Reads one Python literal at s[i..]; throws Incomplete at the end of s, PyError when it is not one. */
function literal(s: string, i: number): [unknown, number] {
  i = ws(s, i);
  if (i >= s.length) throw new Incomplete();
  const c = s[i]!;
  if (c === '"' || c === "'") {
    let out = "";
    let j = i + 1;
    for (;;) {
      if (j >= s.length) throw new Incomplete();
      const d = s[j]!;
      if (d === c) return [out, j + 1];
      if (d === "\\") {
        if (j + 1 >= s.length) throw new Incomplete();
        const e = s[j + 1]!;
        const simple: Record<string, string> = { n: "\n", t: "\t", r: "\r", b: "\b", f: "\f", "\\": "\\", "'": "'", '"': '"', "/": "/", "0": "\0" };
        if (e === "u") {
          if (j + 6 > s.length) throw new Incomplete();
          out += String.fromCharCode(Number.parseInt(s.slice(j + 2, j + 6), 16));
          j += 6;
        } else {
          out += simple[e] ?? `\\${e}`;
          j += 2;
        }
      } else {
        out += d;
        j++;
      }
    }
  }
  if (c === "[" || c === "(") return sequence(s, i + 1, c === "[" ? "]" : ")");
  if (c === "{") {
    const obj: Record<string, unknown> = {};
    let j = ws(s, i + 1);
    if (j >= s.length) throw new Incomplete();
    if (s[j] === "}") return [obj, j + 1];
    for (;;) {
      const [k, a] = literal(s, j);
      j = ws(s, a);
      if (j >= s.length) throw new Incomplete();
      if (s[j] !== ":") throw new PyError();
      const [v, b] = literal(s, j + 1);
      obj[String(k)] = v;
      j = ws(s, b);
      if (j >= s.length) throw new Incomplete();
      if (s[j] === "}") return [obj, j + 1];
      if (s[j] !== ",") throw new PyError();
      j = ws(s, j + 1);
      if (j < s.length && s[j] === "}") return [obj, j + 1];
    }
  }
  // A number or a word is read whole (it may go on in the next piece when it reaches the end).
  const m = /^(?:[-+0-9.eE]+|[A-Za-z_]+)/.exec(s.slice(i));
  if (!m) throw new PyError();
  const end = i + m[0].length;
  if (end >= s.length) throw new Incomplete();
  const word = m[0];
  const words: Record<string, unknown> = { True: true, true: true, False: false, false: false, None: null, null: null };
  if (word in words) return [words[word], end];
  if (!/^-?\d/.test(word) || !Number.isFinite(Number(word))) throw new PyError();
  return [Number(word), end];
}

function sequence(s: string, i: number, close: string): [unknown[], number] {
  const out: unknown[] = [];
  let j = ws(s, i);
  if (j >= s.length) throw new Incomplete();
  if (s[j] === close) return [out, j + 1];
  for (;;) {
    const [v, a] = literal(s, j);
    out.push(v);
    j = ws(s, a);
    if (j >= s.length) throw new Incomplete();
    if (s[j] === close) return [out, j + 1];
    if (s[j] !== ",") throw new PyError();
    j = ws(s, j + 1);
    if (j < s.length && s[j] === close) return [out, j + 1];
  }
}

function ws(s: string, i: number): number {
  while (i < s.length && /\s/.test(s[i]!)) i++;
  return i;
}

/** Parses `name(k=v, …)` at s[i..]; `onName` fires as soon as the name and "(" are read. */
function pyCall(s: string, i: number, onName: (name: string) => void): [Record<string, unknown>, number] {
  let j = ws(s, i);
  const start = j;
  while (j < s.length && IDENT.test(s[j]!)) j++;
  if (j >= s.length) throw new Incomplete();
  if (j === start || s[j] !== "(") throw new PyError();
  onName(s.slice(start, j));
  const args: Record<string, unknown> = {};
  j = ws(s, j + 1);
  if (j >= s.length) throw new Incomplete();
  if (s[j] === ")") return [args, j + 1];
  for (;;) {
    const k0 = j;
    while (j < s.length && /[A-Za-z0-9_]/.test(s[j]!)) j++;
    if (j >= s.length) throw new Incomplete();
    if (j === k0) throw new PyError();
    const key = s.slice(k0, j);
    j = ws(s, j);
    if (j >= s.length) throw new Incomplete();
    if (s[j] !== "=") throw new PyError();
    const [v, a] = literal(s, j + 1);
    args[key] = v;
    j = ws(s, a);
    if (j >= s.length) throw new Incomplete();
    if (s[j] === ")") return [args, j + 1];
    if (s[j] !== ",") throw new PyError();
    j = ws(s, j + 1);
  }
}

/**
 * Holds the answer back while it may still be a call list; emits each call's name once read and
 * its arguments (as JSON) once its ")" closes. Text that is not a call list is content.
 */
class PythonicParser implements ToolCallParser {
  private buf = "";
  private mode: "maybe" | "after" | "text" = "maybe";
  private out: ToolStreamEvent[] = [];
  /** Calls whose names went out, and how many of them have their arguments out. */
  private named = 0;
  private done = 0;

  push(text: string): ToolStreamEvent[] {
    if (this.mode === "text") {
      this.content(text);
      return this.out.splice(0);
    }
    this.buf += text;
    if (this.mode === "after") this.after(false);
    else this.scan(false);
    return this.out.splice(0);
  }

  finish(): ToolStreamEvent[] {
    if (this.mode === "maybe") this.scan(true);
    else if (this.mode === "after") this.after(true);
    return this.out.splice(0);
  }

  private content(text: string): void {
    if (text) this.out.push({ type: "content", text });
  }

  private scan(final: boolean): void {
    const s = this.buf;
    let i = ws(s, 0);
    if (s.startsWith(PY_START, i)) i = ws(s, i + PY_START.length);
    else if (PY_START.startsWith(s.slice(i)) && !final) return;
    if (i >= s.length) {
      if (final) this.giveUp();
      return;
    }
    if (s[i] !== "[") return this.giveUp();
    i++;
    let n = 0;
    try {
      for (;;) {
        const [args, end] = pyCall(s, i, (name) => {
          if (n === this.named) {
            this.out.push({ type: "tool_call", index: n, name, argumentsDelta: "" });
            this.named++;
          }
        });
        if (n === this.done) {
          this.out.push({ type: "tool_call", index: n, argumentsDelta: JSON.stringify(args) });
          this.done++;
        }
        n++;
        i = ws(s, end);
        if (i >= s.length) throw new Incomplete();
        if (s[i] === ",") {
          i++;
          continue;
        }
        if (s[i] !== "]") throw new PyError();
        i++;
        break;
      }
    } catch (e) {
      if (!(e instanceof Incomplete) && !(e instanceof PyError)) throw e;
      if (e instanceof PyError || final) {
        // Calls already given out stand; with none, the whole answer was text.
        if (this.named === 0) return this.giveUp();
        this.mode = "text";
        return;
      }
      return;
    }
    // The list is complete: what follows (Llama 4's <|python_end|>, then text) is content.
    this.mode = "after";
    this.buf = s.slice(i);
    this.after(final);
  }

  /** After the list: whitespace and <|python_end|> are dropped, the rest is content. */
  private after(final: boolean): void {
    const j = ws(this.buf, 0);
    const rest = this.buf.slice(j);
    if (rest.startsWith(PY_END)) this.buf = rest.slice(PY_END.length);
    else if (!final && PY_END.startsWith(rest)) return;
    else this.buf = rest;
    const k = ws(this.buf, 0);
    if (k === this.buf.length && !final) return;
    this.mode = "text";
    this.content(this.buf.slice(k));
    this.buf = "";
  }

  private giveUp(): void {
    this.mode = "text";
    this.content(this.buf);
    this.buf = "";
  }
}

/** `k=v` for each parameter in schema order, required ones always, with ", " between those written. */
function kwargsRe(ctx: ToolGrammarContext, i: number): Re {
  const t: FunctionTool = ctx.tools[i]!;
  const params = (t.function.parameters ?? { type: "object" }) as Record<string, unknown>;
  const supported = new Set(["type", "properties", "required", "additionalProperties", "description", "title", "$schema"]);
  const odd = Object.keys(params).filter((k) => !supported.has(k));
  if (odd.length > 0 || (params.type !== undefined && params.type !== "object")) {
    if (t.function.strict === true) throw new UnsupportedSchemaError(odd[0] ?? "type", `/tools/${i}/function/parameters`, "pythonic calls take keyword arguments: an object schema of properties only");
    return EMPTY;
  }
  const required = new Set(Array.isArray(params.required) ? (params.required as string[]) : []);
  const props = Object.entries((params.properties ?? {}) as Record<string, Record<string, unknown>>);
  const item = (k: number) => {
    const [key, schema] = props[k]!;
    return seq(lit(`${key}=`), call(ctx.compiler.rule(schema, params, `/tools/${i}/function/parameters/properties/${key}`, ROOT)));
  };
  // rest(k, started): parameters k… ; each a rule of its own so optional ones stay linear in size.
  const memo = new Map<string, Re>();
  const rest = (k: number, started: boolean): Re => {
    if (k === props.length) return EMPTY;
    const key = `${k}:${started}`;
    let r = memo.get(key);
    if (r) return r;
    const written = seq(started ? lit(", ") : EMPTY, item(k), rest(k + 1, true));
    const body = required.has(props[k]![0]) ? written : alt(written, rest(k + 1, started));
    r = call(ctx.builder.add(body));
    memo.set(key, r);
    return r;
  };
  return rest(0, false);
}

export const pythonic: ToolFormat = {
  name: "pythonic",
  detect: (t) => t.includes(PY_START) || /\[func_name1\(/.test(t),
  controlTokens: [PY_START, PY_END],
  parser: () => new PythonicParser(),
  grammar: (ctx) => {
    const one = alt(...ctx.tools.map((t, i) => seq(lit(`${t.function.name}(`), kwargsRe(ctx, i), lit(")"))));
    // Free text must not open like a call list.
    return { calls: seq(lit("["), ctx.repeat(one, lit(", ")), lit("]")), auto: { text: ctx.textWithout([PY_START], lit("[")), order: "text-or-calls" } };
  },
  render: {},
  writeCalls: (calls: readonly WrittenCall[]) =>
    `[${calls
      .map((c) => {
        let args: Record<string, unknown> = {};
        try {
          args = JSON.parse(c.arguments) as Record<string, unknown>;
        } catch {
          // Arguments that are not JSON are written as none.
        }
        return `${c.name}(${Object.entries(args)
          .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
          .join(", ")})`;
      })
      .join(", ")}]`,
  describeTools: (tools) =>
    `Here is a list of functions in JSON format that you can invoke:\n${toolLines(tools)}\n\nIf you decide to invoke any of the function(s), you MUST put it in the format of [func_name1(params_name1=params_value1, params_name2=params_value2...), func_name2(params)]. You SHOULD NOT include any other text in the response if you call a function.`,
};
