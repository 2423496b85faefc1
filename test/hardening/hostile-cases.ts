// Hostile chat requests, generated: what a client trying to take a model down for everyone else
// would send. Used by test/hardening/hostile.test.ts (every class, each case once) and by
// bench/hostile-memory.ts (thousands of them, for the server's memory). Deterministic: a seeded
// generator picks the random sizes, so a failing case has the same name on every run.
import { makeImage, dataUrl } from "../vision/images.ts";

export interface HostileModels {
  /** A byte-level chat model (tiny-bytes). */
  text: string;
  /** A model with a tool-call template (tiny-qwen3: Qwen3's tokenizer and template). */
  tools: string;
  /** A vision-language model, or null. */
  vision: string | null;
  /** stories260K (a real, tiny trained model), or null when absent. */
  stories: string | null;
  /** Tokenizer vocabulary size per model id. */
  vocab: Record<string, number>;
  /** The id of the token "x" in the text model (a token JSON can never start with). */
  xToken: number;
}

export interface HostileCase {
  name: string;
  model: string;
  /** A request body (model and messages filled in when absent), or raw text sent as is. */
  body: Record<string, unknown> | string;
}

/** Park–Miller: the same sequence on every run. */
function random(seed: number) {
  let s = seed;
  return {
    int: (lo: number, hi: number) => lo + ((s = (s * 48271) % 2147483647) % (hi - lo + 1)),
    pick: <T>(xs: readonly T[]): T => xs[(s = (s * 48271) % 2147483647) % xs.length]!,
  };
}

const nest = (depth: number, wrap: (inner: unknown) => unknown, leaf: unknown = { type: "string" }) => {
  let s = leaf;
  for (let i = 0; i < depth; i++) s = wrap(s);
  return s;
};

/** Schemas that are costly, unbounded, self-referring or invalid, by name. */
function hostileSchemas(r: ReturnType<typeof random>): Array<[string, unknown]> {
  const out: Array<[string, unknown]> = [];
  const add = (name: string, schema: unknown) => out.push([name, schema]);
  // Recursion without progress.
  add("self-ref", { $ref: "#" });
  for (let k = 1; k <= 4; k++) add(`anyOf-self-${k}`, { anyOf: Array.from({ length: k }, () => ({ $ref: "#" })) });
  add("allOf-self", { allOf: [{ $ref: "#" }] });
  add("allOf-self-nested", { type: "object", allOf: [{ allOf: [{ $ref: "#" }] }] });
  add("oneOf-self-or-string", { oneOf: [{ $ref: "#" }, { type: "string" }] });
  add("defs-cycle", { $defs: { a: { $ref: "#/$defs/b" }, b: { $ref: "#/$defs/a" } }, $ref: "#/$defs/a" });
  add("defs-cycle-anyOf", { $defs: { a: { anyOf: [{ $ref: "#/$defs/b" }, { type: "null" }] }, b: { $ref: "#/$defs/a" } }, $ref: "#/$defs/a" });
  add("ref-chain-2000", { $defs: Object.fromEntries(Array.from({ length: 2000 }, (_, i) => [`d${i}`, i === 1999 ? { type: "string" } : { $ref: `#/$defs/d${i + 1}` }])), $ref: "#/$defs/d0" });
  // Repetition counts, alone and nested.
  for (const n of [5000, 1_000_000, 2147483647, r.int(4097, 10_000_000)]) add(`pattern-a{${n}}`, { type: "string", pattern: `^a{${n}}$` });
  for (const [n, m] of [[1000, 1000], [100, 100], [64, 64], [4096, 2], [r.int(20, 300), r.int(20, 300)]]) add(`pattern-(a{${n}}){${m}}`, { type: "string", pattern: `^(a{${n}}){${m}}$` });
  add("pattern-((a{50}){50}){50}", { type: "string", pattern: "^((a{50}){50}){50}$" });
  for (const n of [5000, 100_000]) add(`pattern-.{0,${n}}`, { type: "string", pattern: `^.{0,${n}}$` });
  add("pattern-digits-max", { type: "string", pattern: "^\\d{2147483647}$" });
  for (const n of [5000, 1_000_000_000, r.int(4097, 100_000)]) {
    add(`minLength-${n}`, { type: "string", minLength: n });
    add(`maxLength-${n}`, { type: "string", maxLength: n });
  }
  add("minItems-2000", { type: "array", items: { type: "integer" }, minItems: 2000 });
  add("maxItems-huge", { type: "array", items: { type: "integer" }, minItems: 1025, maxItems: 1e9 });
  add("length-and-pattern", { type: "string", maxLength: 4000, pattern: "^(ab|cd)*$" });
  // Size: many properties, branches, values, items.
  for (const n of [500, 2000, 10_000, r.int(1000, 5000)]) {
    add(`required-${n}`, { type: "object", properties: Object.fromEntries(Array.from({ length: n }, (_, i) => [`p${i}`, { type: "integer" }])), required: Array.from({ length: n }, (_, i) => `p${i}`), additionalProperties: false });
  }
  for (const n of [1000, 10_000]) add(`anyOf-${n}`, { anyOf: Array.from({ length: n }, (_, i) => ({ const: `v${i}-${i * 7919}` })) });
  for (const n of [1000, 10_000, 50_000]) add(`enum-${n}`, { enum: Array.from({ length: n }, (_, i) => `${(i * 2654435761) % 1e9}`) });
  for (const n of [300, 1000, 5000]) add(`prefixItems-${n}`, { type: "array", prefixItems: Array.from({ length: n }, () => ({ type: "integer" })), items: false });
  add("long-names", { type: "object", properties: Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [`${"n".repeat(100)}${i}`, { type: "boolean" }])), additionalProperties: false });
  add("union-of-objects", { anyOf: Array.from({ length: 300 }, (_, i) => ({ type: "object", properties: { [`k${i}`]: { type: "string", maxLength: 30 } }, required: [`k${i}`], additionalProperties: false })) });
  // Patterns: long, unanchored, nested, unsupported.
  for (const n of [5000, 100_000]) add(`pattern-length-${n}`, { type: "string", pattern: "a".repeat(n) });
  add("pattern-unanchored-4000", { type: "string", pattern: "a".repeat(4000) });
  add("pattern-words-1000", { type: "string", pattern: `^(${Array.from({ length: 1000 }, (_, i) => `w${i}x${i * 31}`).join("|")})$` });
  add("pattern-groups-100", { type: "string", pattern: `^${"(".repeat(100)}a${")".repeat(100)}$` });
  add("pattern-groups-2000", { type: "string", pattern: `${"(".repeat(2000)}a${")".repeat(2000)}` });
  add("pattern-(.*a){20}", { type: "string", pattern: "^(.*a){20}$" });
  add("pattern-(a*)*b", { type: "string", pattern: "^(a*)*b$" });
  add("pattern-lookahead", { type: "string", pattern: "^(?=a)a$" });
  add("pattern-backref", { type: "string", pattern: "^(a)\\1$" });
  add("pattern-unterminated", { type: "string", pattern: "^[a-" });
  add("pattern-unicode-property", { type: "string", pattern: "^\\p{L}+$" });
  add("pattern-dfa-blowup", { type: "string", pattern: "^.*a.{20}$" });
  // Nested quantifiers, unanchored (an outside probe's slowest refusal, 2.55 s, as a tool's parameters).
  add("pattern-(x+x+)+y", { type: "string", pattern: "(x+x+)+y" });
  // Nesting.
  for (const d of [65, 200, 1000]) {
    add(`nested-objects-${d}`, nest(d, (s) => ({ type: "object", properties: { a: s }, required: ["a"] })));
    add(`nested-arrays-${d}`, nest(d, (s) => ({ type: "array", items: s })));
    add(`nested-anyOf-${d}`, nest(d, (s) => ({ anyOf: [s, { type: "null" }] })));
  }
  add("nested-objects-30", nest(30, (s) => ({ type: "object", properties: { a: s }, required: ["a"], additionalProperties: false })));
  // Invalid or unsupported.
  for (const [name, s] of [
    ["false", false], ["unknown-type", { type: "foo" }], ["not", { not: {} }], ["remote-ref", { $ref: "https://example.com/s.json" }],
    ["if-then", { if: { type: "string" }, then: { minLength: 1 } }], ["enum-empty", { enum: [] }], ["anyOf-empty", { anyOf: [] }],
    ["required-numbers", { type: "object", required: [1, 2] }], ["properties-array", { type: "object", properties: [] }],
    ["bounds-huge", { type: "number", minimum: -1e308, maximum: 1e308 }], ["bounds-empty", { type: "integer", minimum: 5, maximum: 1 }],
    ["pattern-number", { type: "string", pattern: 5 }], ["unresolvable-ref", { $ref: "#/$defs/missing" }], ["minLength-negative", { type: "string", minLength: -1 }],
  ] as Array<[string, unknown]>) add(`invalid-${name}`, s);
  return out;
}

/** Random combinations of keywords and hostile values: what a fuzzer would send. */
function fuzzSchema(r: ReturnType<typeof random>, depth = 0): unknown {
  const leaf = () =>
    r.pick<unknown>([
      { type: "string", maxLength: r.pick([1, 100, 4096, 5000, 1e9]) },
      { type: "string", pattern: r.pick(["^a+$", "^(a|b){0,3000}$", "^(x{90}){90}$", "[", "^\\w{1,4096}$", "(((a)))", "^(?:a|b|c|d|e|f)*$"]) },
      { type: "integer", minimum: r.pick([-1e12, 0, 3]), maximum: r.pick([1e12, 2, 100]) },
      { enum: Array.from({ length: r.pick([1, 10, 3000]) }, (_, i) => i) },
      { $ref: r.pick(["#", "#/x", "#/properties"]) },
      { anyOf: [{ $ref: "#" }, { type: "null" }] },
      { type: r.pick(["null", "boolean", "number", "qux"]) },
      true,
      false,
    ]);
  if (depth > 3) return leaf();
  // Wide nodes get leaves below them: the size stays in the thousands of nodes, not exponential.
  const child = (width: number) => (width > 5 ? leaf() : fuzzSchema(r, depth + 1));
  switch (r.int(0, 4)) {
    case 0: {
      const n = r.pick([1, 5, 50, 800]);
      const props = Object.fromEntries(Array.from({ length: n }, (_, i) => [`f${i}`, child(n)]));
      return { type: "object", properties: props, required: Object.keys(props).filter(() => r.int(0, 1) === 1), additionalProperties: r.pick([false, true, { type: "string" }]) };
    }
    case 1:
      return { type: "array", items: fuzzSchema(r, depth + 1), minItems: r.pick([0, 3, 1024, 1025]), maxItems: r.pick([5, 1024, 1e6]) };
    case 2:
    {
      const n = r.pick([2, 20, 400]);
      return { anyOf: Array.from({ length: n }, () => child(n)) };
    }
    case 3:
      return { allOf: [fuzzSchema(r, depth + 1), fuzzSchema(r, depth + 1)] };
    default:
      return leaf();
  }
}

/** A PNG of `w`×`h` whose header says so but whose pixel data is missing (read by its header alone). */
function pngHeaderOnly(w: number, h: number): Uint8Array {
  const crcTable = Array.from({ length: 256 }, (_, n) => {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    return c >>> 0;
  });
  const crc = (bytes: Uint8Array) => {
    let c = 0xffffffff;
    for (const b of bytes) c = crcTable[(c ^ b) & 0xff]! ^ (c >>> 8);
    return (c ^ 0xffffffff) >>> 0;
  };
  const chunk = (type: string, data: Uint8Array) => {
    const out = new Uint8Array(12 + data.length);
    const v = new DataView(out.buffer);
    v.setUint32(0, data.length);
    out.set(new TextEncoder().encode(type), 4);
    out.set(data, 8);
    v.setUint32(8 + data.length, crc(out.subarray(4, 8 + data.length)));
    return out;
  };
  const ihdr = new Uint8Array(13);
  const v = new DataView(ihdr.buffer);
  v.setUint32(0, w);
  v.setUint32(4, h);
  ihdr.set([8, 2, 0, 0, 0], 8);
  const parts = [new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk("IHDR", ihdr), chunk("IEND", new Uint8Array(0))];
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let o = 0;
  for (const p of parts) (out.set(p, o), (o += p.length));
  return out;
}

const user = (content: unknown) => [{ role: "user", content }];
const banAll = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [i, -100]));

export async function hostileCases(m: HostileModels, seed = 19): Promise<HostileCase[]> {
  const r = random(seed);
  const cases: HostileCase[] = [];
  const add = (name: string, model: string, body: HostileCase["body"]) => cases.push({ name, model, body });
  const chatModels = [m.text, m.tools, ...(m.vision ? [m.vision] : []), ...(m.stories ? [m.stories] : [])];

  // Schemas: as a response format on two models, and as a strict tool's parameters.
  const schemas = hostileSchemas(r);
  for (let i = 0; i < 160; i++) schemas.push([`fuzz-${i}`, fuzzSchema(r)]);
  schemas.forEach(([name, schema], i) => {
    const stream = i % 2 === 1;
    const format = { type: "json_schema", json_schema: { name: "s", strict: true, schema } };
    add(`response_format ${name}`, i % 3 === 0 ? m.tools : m.text, { response_format: format, max_tokens: 8, stream });
    if (i % 2 === 0 || !name.startsWith("fuzz")) {
      add(`tool parameters ${name}`, m.tools, {
        tools: [{ type: "function", function: { name: "f", strict: true, parameters: schema } }],
        tool_choice: i % 4 === 0 ? "required" : { type: "function", function: { name: "f" } },
        max_tokens: 8,
        stream,
      });
    }
  });
  add("128 strict tools", m.tools, {
    tools: Array.from({ length: 128 }, (_, i) => ({ type: "function", function: { name: `t${i}`, strict: true, parameters: { type: "object", properties: Object.fromEntries(Array.from({ length: 40 }, (_, j) => [`a${j}`, { type: "string", maxLength: 64 }])), required: [`a0`] } } })),
    tool_choice: "required",
    max_tokens: 8,
  });
  add("response_format over the size limit", m.text, { response_format: { type: "json_schema", json_schema: { name: "s", schema: { type: "object", description: "d".repeat(1_100_000) } } }, max_tokens: 4 });

  // logit_bias that leaves nothing, alone or with a grammar.
  for (const model of chatModels) {
    for (const stream of [false, true]) add(`logit_bias bans all${stream ? " (stream)" : ""}`, model, { logit_bias: banAll(m.vocab[model]!), max_tokens: 4, stream });
    add("logit_bias on a token past the vocabulary", model, { logit_bias: { [m.vocab[model]! + 1000]: 5 }, max_tokens: 2 });
  }
  for (const stream of [false, true]) {
    add(`json_object with only "x" allowed${stream ? " (stream)" : ""}`, m.text, { response_format: { type: "json_object" }, logit_bias: { ...banAll(m.vocab[m.text]!), [m.xToken]: 0 }, max_tokens: 4, stream });
  }
  for (let n = 2; n <= 16; n *= 2) add(`json_object, only "x", n=${n}`, m.text, { response_format: { type: "json_object" }, logit_bias: { ...banAll(m.vocab[m.text]!), [m.xToken]: 0 }, max_tokens: 4, n });

  // Prompts far beyond the context, in every shape; message and stop limits.
  for (const model of chatModels) {
    add("5 MB message", model, { messages: user("hello ".repeat(850_000)), max_tokens: 2 });
    add("1M emoji", model, { messages: user("😀".repeat(1_000_000)), max_tokens: 2 });
    add("2,048 messages", model, { messages: Array.from({ length: 2048 }, (_, i) => ({ role: i % 2 ? "assistant" : "user", content: `turn ${i}` })), max_tokens: 2 });
    add("2,049 messages", model, { messages: Array.from({ length: 2049 }, () => ({ role: "user", content: "x" })), max_tokens: 2 });
    add("four 1 MB stop strings", model, { stop: ["a", "b", "c", "d"].map((c) => c.repeat(1_000_000)), max_tokens: 2 });
    add("five stop strings", model, { stop: ["a", "b", "c", "d", "e"], max_tokens: 2 });
    add("1,001-character stop string", model, { stop: ["s".repeat(1001)], max_tokens: 2 });
    add("200,000 short lines", model, { messages: user("a\n".repeat(200_000)), max_tokens: 2 });
    add("1,000 content parts", model, { messages: user(Array.from({ length: 1000 }, () => ({ type: "text", text: "part " }))), max_tokens: 2 });
  }
  add("15 MB message", m.text, { messages: user("x".repeat(15_000_000)), max_tokens: 2 });
  add("tool definitions of 4 MB", m.tools, { tools: [{ type: "function", function: { name: "f", description: "d".repeat(4_000_000) } }], max_tokens: 2 });

  // Bodies nested deeper than anything may go.
  const deepObj = (d: number) => nest(d, (s) => ({ a: s }), 1);
  add("tool schema nested 10,000 deep", m.tools, { tools: [{ type: "function", function: { name: "f", parameters: deepObj(10_000) } }], max_tokens: 2 });
  add("non-strict tool schema nested 600 deep", m.tools, { tools: [{ type: "function", function: { name: "f", parameters: deepObj(600) } }], max_tokens: 2 });
  add("non-strict tool schema nested 300 deep", m.tools, { tools: [{ type: "function", function: { name: "f", parameters: deepObj(300) } }], max_tokens: 2 });
  add("response_format nested 10,000 deep", m.text, { response_format: { type: "json_schema", json_schema: { name: "s", schema: deepObj(10_000) } }, max_tokens: 2 });
  add("raw body nested 100,000 deep", m.text, `{"model":${JSON.stringify(m.text)},"messages":${"[".repeat(100_000)}${"]".repeat(100_000)}}`);
  add("metadata nested 5,000 deep", m.text, { metadata: deepObj(5000), max_tokens: 2 });
  add("message content nested 5,000 deep", m.text, { messages: user(nest(5000, (s) => [s], "x")), max_tokens: 2 });
  add("tool call arguments of 1 MB", m.tools, {
    messages: [{ role: "user", content: "x" }, { role: "assistant", content: null, tool_calls: [{ id: "c", type: "function", function: { name: "f", arguments: JSON.stringify({ v: "y".repeat(1_000_000) }) } }] }, { role: "tool", tool_call_id: "c", content: "ok" }],
    max_tokens: 2,
  });

  // Images: extreme sides, missing pixels, not images at all.
  if (m.vision) {
    const image = (url: string) => user([{ type: "text", text: "what is this?" }, { type: "image_url", image_url: { url } }]);
    const shapes: Array<[string, Uint8Array, string]> = [
      ["PNG 1×20,000", await makeImage("png", 1, 20_000, 1), "image/png"],
      ["PNG 20,000×1", await makeImage("png", 20_000, 1, 2), "image/png"],
      ["PNG 3×900", await makeImage("png", 3, 900, 3), "image/png"],
      ["PNG 900×3", await makeImage("png", 900, 3, 4), "image/png"],
      ["PNG 1×200", await makeImage("png", 1, 200, 5), "image/png"],
      ["JPEG 2×16,000", await makeImage("jpeg", 2, 16_000, 6), "image/jpeg"],
      ["GIF 1×5,000", await makeImage("gif", 1, 5000, 7), "image/gif"],
      ["WebP 16,000×2", await makeImage("webp", 16_000, 2, 8), "image/webp"],
      ["PNG header of 100,000×100,000", pngHeaderOnly(100_000, 100_000), "image/png"],
      ["PNG header of 30,000×30,000", pngHeaderOnly(30_000, 30_000), "image/png"],
      ["PNG header only, 64×64", pngHeaderOnly(64, 64), "image/png"],
      ["truncated PNG", (await makeImage("png", 64, 64, 9)).slice(0, 60), "image/png"],
      ["text as PNG", new TextEncoder().encode("not an image at all"), "image/png"],
      ["empty data", new Uint8Array(0), "image/png"],
    ];
    for (const [name, bytes, mime] of shapes) {
      for (const stream of [false, true]) add(`image ${name}${stream ? " (stream)" : ""}`, m.vision, { messages: image(dataUrl(bytes, mime)), max_tokens: 2, stream });
    }
    add("image URL to a private address", m.vision, { messages: image("http://169.254.169.254/latest/meta-data"), max_tokens: 2 });
    add("image on a text model", m.text, { messages: image(dataUrl(await makeImage("png", 8, 8, 10), "image/png")), max_tokens: 2 });
    add("60 images", m.vision, { messages: user(Array.from({ length: 60 }, () => ({ type: "image_url", image_url: { url: dataUrl(pngHeaderOnly(2, 2), "image/png") } }))), max_tokens: 2 });
  }

  // Sampling at its extremes (valid: answered, never a crash).
  for (const model of chatModels) {
    for (const extra of [
      { temperature: 2, top_p: 1e-9 },
      { temperature: 2, top_k: 1_000_000_000 },
      { min_p: 1 },
      { temperature: 0, n: 16, max_tokens: 1 },
      { logprobs: true, top_logprobs: 20 },
      { presence_penalty: 2, frequency_penalty: -2 },
      { seed: -9007199254740991 },
      { seed: 9007199254740991, temperature: 1e-9 },
      { max_tokens: 1, stop: ["\n", " ", "a", "e"] },
      { top_p: 0 },
    ]) add(`sampling ${JSON.stringify(extra)}`, model, { max_tokens: 4, ...extra });
  }
  add("tools with duplicate names", m.tools, { tools: [{ type: "function", function: { name: "f" } }, { type: "function", function: { name: "f" } }], max_tokens: 2 });
  add("response_format with a forced tool", m.tools, { tools: [{ type: "function", function: { name: "f" } }], tool_choice: "required", response_format: { type: "json_object" }, max_tokens: 2 });
  add("tools on a model without a tool format", m.text, { tools: [{ type: "function", function: { name: "f", strict: true, parameters: { type: "object" } } }], max_tokens: 2 });
  return cases;
}
