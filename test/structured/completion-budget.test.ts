// Token-level distances to the end of a document and the budget masks built on them
// (completion-budget.ts), checked against brute force over whole vocabularies.
import { describe, expect, test } from "bun:test";
import {
  adoptCompletionTables,
  adoptRuleTables,
  type BuiltInPart,
  builtInSearches,
  compileJsonSchema,
  prepareBuiltInTables,
  type Grammar,
  GrammarMatcher,
  jsonObjectGrammar,
  shareVocabulary,
  toolCallGrammar,
  type TokenVocabulary,
  UNREACHABLE_TOKENS,
  vocabularyFromBytes,
  vocabularyFromShared,
} from "../../src/structured/index.ts";
import { call, lit, seq } from "../../src/structured/automaton.ts";
import { GrammarBuilder } from "../../src/structured/grammar.ts";
import { FLAT } from "../../src/structured/layout.ts";
import { SchemaCompiler } from "../../src/structured/schema.ts";
import { CompletionBudget } from "../../src/structured/completion-budget.ts";
import { StackPool } from "../../src/structured/parser-state.ts";
import { mulberry32 } from "../engine/text/fixtures.ts";
import { allowedIds, budgetVocabularies, ISSUE_SCHEMA, makeAjv, maskHas, QWEN_EOS, qwenVocab, tokensAfter, wronglyMasked } from "./helpers.ts";

const weather = { type: "function" as const, function: { name: "get_weather", strict: true, parameters: { type: "object", properties: { city: { type: "string", maxLength: 12 } }, required: ["city"], additionalProperties: false } } };

const GRAMMARS: Record<string, () => Grammar> = {
  issue: () => compileJsonSchema(ISSUE_SCHEMA),
  json_object: () => jsonObjectGrammar(),
  "minLength and minItems": () => compileJsonSchema({ type: "object", properties: { s: { type: "string", minLength: 7, maxLength: 9 }, n: { type: "array", items: { type: "integer" }, minItems: 2 } }, required: ["s", "n"], additionalProperties: false }),
  recursive: () => compileJsonSchema({ $defs: { node: { type: "object", properties: { v: { type: "integer", minimum: 0, maximum: 9 }, kids: { type: "array", items: { $ref: "#/$defs/node" }, maxItems: 2 } }, required: ["v", "kids"], additionalProperties: false } }, $ref: "#/$defs/node" }),
  "email, uuid and a pattern": () => compileJsonSchema({ type: "object", properties: { m: { type: "string", format: "email" }, u: { type: "string", format: "uuid" }, z: { type: "string", pattern: "^[a-c]{2,5}x?$" }, n: { type: "number" } }, required: ["m", "u", "z", "n"], additionalProperties: false }),
  // States reading a byte class alike for longer than any token of it: budget walks take such tokens by length.
  "a pattern of letters and digits": () => compileJsonSchema({ type: "object", properties: { p: { type: "string", pattern: "^[a-z0-9]{3,}$" } }, required: ["p"], additionalProperties: false }),
  "format and non-ASCII enum": () => compileJsonSchema({ type: "object", properties: { d: { type: "string", format: "date" }, e: { enum: ["café", "naïve"] } }, required: ["d", "e"], additionalProperties: false }),
  "hermes required": () => toolCallGrammar({ tools: [weather], toolChoice: "required", syntax: "hermes" })!,
  "hermes auto": () => toolCallGrammar({ tools: [weather], toolChoice: "auto", syntax: "hermes" })!,
  "mistral parallel": () => toolCallGrammar({ tools: [weather], toolChoice: "required", syntax: "mistral" })!,
  "llama3 named": () => toolCallGrammar({ tools: [weather], toolChoice: { type: "function", function: { name: "get_weather" } }, syntax: "llama3" })!,
};

const vocabularies = budgetVocabularies();

const decoder = new TextDecoder();
const has = maskHas;
const after = tokensAfter;

describe("budget tables computed in another thread (the engine's compile thread)", () => {
  for (const [vname, original, stops] of vocabularies) {
    test(`${vname}: a copy of the grammar that adopts them searches nothing at admission and masks as one that computed them itself`, () => {
      // As the threads see it: the vocabulary in shared memory, the grammar and tables cloned.
      const { vocab, data } = shareVocabulary(original);
      const theirs = vocabularyFromShared(structuredClone(data));
      expect(theirs.trie.nodeCount).toBe(vocab.trie.nodeCount);
      expect(theirs.bytes.map((b) => (b ? decoder.decode(b) : null))).toEqual(original.bytes.map((b) => (b ? decoder.decode(b) : null)));
      for (const [gname, make] of Object.entries(GRAMMARS)) {
        const compiled = make();
        const there = new GrammarMatcher(structuredClone(compiled), theirs, { stopTokenIds: stops });
        there.prepareBudget();
        const tables = structuredClone(there.budgetTables());
        const adoptedGrammar = structuredClone(compiled);
        adoptCompletionTables(adoptedGrammar, tables);
        const adopted = new GrammarMatcher(adoptedGrammar, vocab, { stopTokenIds: stops });
        const fresh = new GrammarMatcher(structuredClone(compiled), vocab, { stopTokenIds: stops });
        // Before any question: the searches are there already (a budget of its own starts with none).
        expect(adopted.budgetTables().offsets.length).toBe(tables.offsets.length);
        expect(fresh.budgetTables().offsets.length).toBe(1);
        expect(adopted.tokensToFinish()).toBe(fresh.tokensToFinish());
        adopted.prepareBudget();
        // And admission searched nothing more: the tables are exactly those it was given.
        const after = adopted.budgetTables();
        expect(after.offsets.length).toBe(tables.offsets.length);
        expect([...after.exitCosts]).toEqual([...tables.exitCosts]);
        // Along a walk at a tight budget, both allow the same tokens.
        const rand = mulberry32(5);
        const budget = fresh.tokensToFinish() + 2;
        const a = new Uint32Array(adopted.maskWords);
        const f = new Uint32Array(fresh.maskWords);
        for (let used = 0; !fresh.isTerminated() && used < budget; used++) {
          adopted.fillNextTokenBitmask(a, budget - used);
          fresh.fillNextTokenBitmask(f, budget - used);
          if (a.some((w, i) => w !== f[i])) throw new Error(`${gname}: masks differ after ${used} tokens`);
          const allowed = allowedIds(f, vocab.size);
          if (allowed.length === 0) break;
          const pick = allowed[Math.floor(rand() * allowed.length)];
          adopted.acceptToken(pick);
          fresh.acceptToken(pick);
        }
      }
    }, 60_000);
  }
});

describe("tokens to finish", () => {
  for (const [vname, vocab, stops] of vocabularies) {
    test(`${vname}: each state's count is the least over its next tokens (so it is the true minimum), along random walks`, () => {
      for (const [gname, make] of Object.entries(GRAMMARS)) {
        const rand = mulberry32(11);
        for (let walk = 0; walk < 3; walk++) {
          const m = new GrammarMatcher(make(), vocab, { stopTokenIds: stops });
          const mask = new Uint32Array(m.maskWords);
          let text = "";
          for (let step = 0; step < 40 && !m.isTerminated(); step++) {
            m.fillNextTokenBitmask(mask);
            const allowed = allowedIds(mask, vocab.size);
            const best = Math.min(...allowed.map((id) => after(m, id, stops)));
            if (best !== m.tokensToFinish()) throw new Error(`${gname} after ${JSON.stringify(text)}: ${m.tokensToFinish()} tokens to finish, but the best next token leaves ${best}`);
            const words = allowed.filter((id) => !stops.includes(id));
            if (words.length === 0) break;
            const pick = words[Math.floor(rand() * words.length)];
            m.acceptToken(pick);
            text += decoder.decode(vocab.bytes[pick]!);
          }
        }
      }
    }, 60_000);

    test(`${vname}: a budget keeps exactly the tokens that leave room to finish, and a budget at the minimum always ends in a valid document`, () => {
      const validate = makeAjv().compile(ISSUE_SCHEMA);
      for (const [gname, make] of Object.entries(GRAMMARS)) {
        for (let seed = 1; seed <= 6; seed++) {
          const rand = mulberry32(seed);
          const m = new GrammarMatcher(make(), vocab, { stopTokenIds: stops });
          const budget = m.tokensToFinish() + (seed % 3) * 2;
          const mask = new Uint32Array(m.maskWords);
          const plain = new Uint32Array(m.maskWords);
          let text = "";
          for (let used = 0; !m.isTerminated(); used++) {
            const left = budget - used;
            if (left <= 0) throw new Error(`${gname}: budget ${budget} spent on ${JSON.stringify(text)}`);
            m.fillNextTokenBitmask(plain);
            m.fillNextTokenBitmask(mask, left);
            for (const id of allowedIds(plain, vocab.size)) {
              if (has(mask, id) !== after(m, id, stops) <= left) throw new Error(`${gname} after ${JSON.stringify(text)} with ${left} left: token ${id} masked wrongly`);
            }
            const allowed = allowedIds(mask, vocab.size);
            for (const id of allowed) expect(has(plain, id)).toBe(true);
            const pick = allowed[Math.floor(rand() * allowed.length)];
            m.acceptToken(pick);
            if (!stops.includes(pick)) text += decoder.decode(vocab.bytes[pick]!);
          }
          if (gname === "issue" && !validate(JSON.parse(text))) throw new Error(text);
          if (!gname.includes("hermes") && !gname.includes("mistral") && !gname.includes("llama3")) JSON.parse(text);
        }
      }
    }, 60_000);
  }

  test("Qwen3's vocabulary: a budget at the minimum ends in a valid document, and the minimum is kept step by step", async () => {
    const vocab = await qwenVocab();
    const validate = makeAjv().compile(ISSUE_SCHEMA);
    const g = compileJsonSchema(ISSUE_SCHEMA);
    const least = new GrammarMatcher(g, vocab, { stopTokenIds: QWEN_EOS }).tokensToFinish();
    // {"name":"","age":0,"pets":[],"mood":null} in Qwen3's tokens, and the end token.
    expect(least).toBeGreaterThan(5);
    expect(least).toBeLessThan(25);
    for (let seed = 1; seed <= 3; seed++) {
      const rand = mulberry32(seed);
      const m = new GrammarMatcher(g, vocab, { stopTokenIds: QWEN_EOS });
      const mask = new Uint32Array(m.maskWords);
      const budget = least + (seed - 1) * 4;
      let text = "";
      for (let used = 0; !m.isTerminated(); used++) {
        expect(m.tokensToFinish()).toBeLessThanOrEqual(budget - used);
        m.fillNextTokenBitmask(mask, budget - used);
        const allowed = allowedIds(mask, vocab.size);
        const pick = allowed[Math.floor(rand() * allowed.length)];
        m.acceptToken(pick);
        if (!QWEN_EOS.includes(pick)) text += decoder.decode(vocab.bytes[pick]!);
      }
      expect(validate(JSON.parse(text))).toBe(true);
    }
  }, 60_000);

  test("a vocabulary that cannot spell the document has no way to finish it (the engine refuses such requests)", () => {
    const letters = vocabularyFromBytes([..."abc{}"].map((ch) => new TextEncoder().encode(ch)));
    const m = new GrammarMatcher(compileJsonSchema({ type: "object", properties: { a: { type: "string" } }, required: ["a"] }), letters, { stopTokenIds: [] });
    expect(m.tokensToFinish()).toBe(UNREACHABLE_TOKENS);
  });
});

describe("bounded runs of a byte class (a budget mask takes the class's tokens by length)", () => {
  test("Qwen3's vocabulary: along a document of an email, a uuid and a date-time, a budget at the least and one over it keeps exactly the tokens that leave room (every 53rd of the grammar's tokens, rotating)", async () => {
    const vocab = await qwenVocab();
    const doc = { m: "ada.lovelace+notes@mail.example.org", u: "3f2c1a9e-8b7d-4c6e-9f10-2a3b4c5d6e7f", d: "2024-03-14T15:09:26.535Z" };
    const g = compileJsonSchema({
      type: "object",
      properties: { m: { type: "string", format: "email" }, u: { type: "string", format: "uuid" }, d: { type: "string", format: "date-time" } },
      required: ["m", "u", "d"],
      additionalProperties: false,
    });
    const text = new TextEncoder().encode(JSON.stringify(doc));
    for (const extra of [0, 1]) {
      const m = new GrammarMatcher(g, vocab, { stopTokenIds: QWEN_EOS });
      let checked = 0;
      const mask = new Uint32Array(m.maskWords);
      // The document's bytes, a token at a time: the longest token of the mask that spells what comes next.
      for (let at = 0, step = 0; at < text.length; step++) {
        const left = m.tokensToFinish() + extra;
        const wrong = wronglyMasked(m, vocab, QWEN_EOS, left, 53, step);
        if (wrong !== null) throw new Error(`after ${JSON.stringify(decoder.decode(text.subarray(0, at)))} with ${left} left: token ${JSON.stringify(decoder.decode(vocab.bytes[wrong]!))} masked wrongly`);
        checked++;
        // On along the document (the grammar's mask: the budget may not hold all of it).
        m.fillNextTokenBitmask(mask);
        let best = -1;
        for (const id of allowedIds(mask, vocab.size)) {
          const b = vocab.bytes[id];
          if (b && b.length > (best < 0 ? 0 : vocab.bytes[best]!.length) && at + b.length <= text.length && b.every((x, i) => x === text[at + i])) best = id;
        }
        expect(best).toBeGreaterThanOrEqual(0);
        m.acceptToken(best);
        at += vocab.bytes[best]!.length;
      }
      expect(m.isComplete()).toBe(true);
      expect(checked).toBeGreaterThan(20);
    }
  }, 120_000);

  // An email's local part reads its class alike for at most 24 bytes, a uuid's groups for 8, a
  // date's year for 4: this vocabulary has tokens of those classes longer than the runs, tokens
  // that leave a class after many of its bytes, and every byte alone (so anything can be spelt).
  const encoder = new TextEncoder();
  const letters = "abcdefghijklmnopqrstuvwxyz".repeat(2);
  const pieces = [
    ...[2, 3, 5, 8, 13, 16, 17, 21, 23, 24, 25, 30, 40].map((n) => letters.slice(0, n)),
    "x".repeat(24), "x".repeat(25), "y".repeat(16), "y".repeat(17), "john", "smith", "johnsmith",
    "2024", "0123456789", "deadbeef", "deadbeefcafe", "0123456789abcdef0123", "cafe", "9a",
    "john.", ".doe", "@example", "example.", ".com", "a@b.c", "abc-def", "ab-", "deadbeef-", "-cafe", "x".repeat(24) + "@",
    "2024-", "-03", "T15", ":09", "Z", "abcd\"", "\"", "{\"", "\":\"", "\",\"", "\"}", "\":", "\",",
  ];
  const bytes: (Uint8Array | null)[] = [null, ...Array.from({ length: 256 }, (_, b) => Uint8Array.of(b)), ...pieces.map((p) => encoder.encode(p))];
  const vocab = vocabularyFromBytes(bytes);
  const stops = [0];
  const field = (s: Record<string, unknown>) => compileJsonSchema({ type: "object", properties: { m: s }, required: ["m"], additionalProperties: false });
  const grammars: Record<string, Grammar> = {
    email: field({ type: "string", format: "email" }),
    uuid: field({ type: "string", format: "uuid" }),
    "date-time": field({ type: "string", format: "date-time" }),
    // Three bytes of [a-z0-9], then one of [a-f]: the state after the run reads more bytes of the
    // class (some of them), so tokens longer than the run are walked on from it.
    "a run followed by a narrower class": field({ type: "string", pattern: "^([a-z0-9]{3}[a-f]){1,6}$" }),
  };

  test("along random walks that take long tokens, a budget at the minimum and just above it keeps exactly the tokens that leave room", () => {
    for (const [name, g] of Object.entries(grammars)) {
      for (let seed = 1; seed <= 8; seed++) {
        const rand = mulberry32(seed);
        const m = new GrammarMatcher(g, vocab, { stopTokenIds: stops });
        const mask = new Uint32Array(m.maskWords);
        let text = "";
        for (let step = 0; step < 60 && !m.isTerminated(); step++) {
          const left = m.tokensToFinish() + (step % 3);
          const wrong = wronglyMasked(m, vocab, stops, left);
          if (wrong !== null) throw new Error(`${name} after ${JSON.stringify(text)} with ${left} left: token ${JSON.stringify(decoder.decode(vocab.bytes[wrong] ?? new Uint8Array()))} masked wrongly`);
          m.fillNextTokenBitmask(mask);
          const words = allowedIds(mask, vocab.size).filter((id) => !stops.includes(id));
          const long = words.filter((id) => vocab.bytes[id]!.length > 1);
          const from = long.length > 0 && rand() < 0.7 ? long : words;
          if (from.length === 0) break;
          const pick = from[Math.floor(rand() * from.length)]!;
          m.acceptToken(pick);
          text += decoder.decode(vocab.bytes[pick]!);
        }
      }
    }
  }, 60_000);
});

describe("built-in budget tables (json_object's and the formats', computed once per model)", () => {
  const GRAMMARS_USING_THEM: Record<string, () => Grammar> = {
    json_object: () => jsonObjectGrammar(),
    issue: GRAMMARS.issue!,
    "email, uuid and a pattern": GRAMMARS["email, uuid and a pattern"]!,
    "format and non-ASCII enum": GRAMMARS["format and non-ASCII enum"]!,
    "untyped values and plain strings": () => compileJsonSchema({ type: "object", properties: { a: {}, b: { type: "array", items: { type: "string" } }, c: { type: "number" } }, required: ["a", "b", "c"], additionalProperties: false }),
    "hermes auto": GRAMMARS["hermes auto"]!,
  };
  /** The same vocabulary as another object: budgets on it see only the tables adopted on it. */
  const twin = (v: TokenVocabulary) => vocabularyFromShared(shareVocabulary(v).data);

  test("a rule of json_object's that another grammar lets other bytes follow (a ';' here) does not take json_object's tables of it: its tokens that go on with them count", () => {
    // Every byte, and tokens that end a value and go on with ';' (which json_object never has after a value).
    const pieces = ["};", "];", '";', "1;", "l;", "e;", "{}", "[]", '{"', '":', '",', '"}', '"]', "[1", "12", "null", "true", ": ", ", "];
    const bytes: (Uint8Array | null)[] = [null, ...Array.from({ length: 256 }, (_, b) => Uint8Array.of(b)), ...pieces.map((p) => new TextEncoder().encode(p))];
    const original = vocabularyFromBytes(bytes);
    const withTables = vocabularyFromShared(shareVocabulary(original).data);
    prepareBuiltInTables(withTables);
    // Any JSON value written flat (the rule json_object's members have), then ';'.
    const builder = new GrammarBuilder();
    const value = new SchemaCompiler(builder).anyValueRule(FLAT);
    const g = builder.build(builder.add(seq(call(value), lit(";"))), "test: a flat value and ';'");
    const stops = [0];
    for (let seed = 1; seed <= 6; seed++) {
      const rand = mulberry32(seed);
      const a = new GrammarMatcher(structuredClone(g), withTables, { stopTokenIds: stops });
      const f = new GrammarMatcher(structuredClone(g), original, { stopTokenIds: stops });
      const am = new Uint32Array(a.maskWords);
      const fm = new Uint32Array(f.maskWords);
      for (let used = 0; !f.isTerminated() && used < 30; used++) {
        expect(a.tokensToFinish()).toBe(f.tokensToFinish());
        const left = f.tokensToFinish() + (used % 2);
        a.fillNextTokenBitmask(am, left);
        f.fillNextTokenBitmask(fm, left);
        if (am.some((w, i) => w !== fm[i])) throw new Error(`masks differ after ${used} tokens`);
        const allowed = allowedIds(fm, original.size).filter((id) => !stops.includes(id) || used > 20);
        const pick = allowed[Math.floor(rand() * allowed.length)]!;
        a.acceptToken(pick);
        f.acceptToken(pick);
      }
    }
  });

  test("searches stopped after every item and resumed (as the compile thread runs them between jobs) find the same tables as whole ones", () => {
    const [, vocab] = vocabularies[0]!;
    const tables = (items: number) => {
      const g = jsonObjectGrammar();
      const budget = new CompletionBudget(g, twin(vocab), new StackPool(g.stateCount));
      let steps = 0;
      for (const _ of budget.searches(items)) steps++;
      const byKey = Object.fromEntries(budget.exportRuleTables().rules.map((r) => {
        const searches = new Map<string, string>();
        for (let i = 0; i < r.offsets.length - 1; i++) {
          const exits = [...r.exitNodes.subarray(r.offsets[i], r.offsets[i + 1])].map((n, k) => `${n}:${r.exitCosts[r.offsets[i] + k]}`).sort();
          searches.set(`${r.origins[2 * i]}/${r.origins[2 * i + 1]}`, exits.join(","));
        }
        return [r.key, [...searches].sort()];
      }));
      return { byKey, steps };
    };
    const whole = tables(Infinity);
    const stepwise = tables(1);
    expect(stepwise.steps).toBeGreaterThan(whole.steps * 10);
    expect(stepwise.byKey).toEqual(whole.byKey);
  });

  for (const [vname, original, stops] of vocabularies) {
    test(`${vname}: grammars that take them mask and count exactly as grammars that search on demand, and json_object searches nothing of its own`, () => {
      const withTables = twin(original);
      const parts = prepareBuiltInTables(withTables);
      expect(parts.map((p) => p.name)).toContain("json_object");
      expect(parts.map((p) => p.name)).toContain("format email");
      // A json_object grammar compiled apart (as each request's is, on the compile thread) finds every search it needs.
      const adopted = new GrammarMatcher(structuredClone(jsonObjectGrammar()), withTables, { stopTokenIds: stops });
      adopted.prepareBudgetTables(Infinity);
      expect(adopted.budgetTables().offsets.length).toBe(1);
      const own = new GrammarMatcher(structuredClone(jsonObjectGrammar()), original, { stopTokenIds: stops });
      own.prepareBudgetTables(Infinity);
      expect(own.budgetTables().offsets.length).toBeGreaterThan(100);
      for (const [gname, make] of Object.entries(GRAMMARS_USING_THEM)) {
        for (let seed = 1; seed <= 4; seed++) {
          const rand = mulberry32(seed);
          const g = make();
          const a = new GrammarMatcher(structuredClone(g), withTables, { stopTokenIds: stops });
          const f = new GrammarMatcher(structuredClone(g), original, { stopTokenIds: stops });
          expect(a.tokensToFinish()).toBe(f.tokensToFinish());
          const budget = f.tokensToFinish() + (seed % 3);
          const am = new Uint32Array(a.maskWords);
          const fm = new Uint32Array(f.maskWords);
          for (let used = 0; !f.isTerminated() && used < budget; used++) {
            if (a.tokensToFinish() !== f.tokensToFinish()) throw new Error(`${gname}: ${a.tokensToFinish()} tokens to finish with the tables, ${f.tokensToFinish()} without, after ${used}`);
            a.fillNextTokenBitmask(am, budget - used);
            f.fillNextTokenBitmask(fm, budget - used);
            if (am.some((w, i) => w !== fm[i])) throw new Error(`${gname}: masks differ after ${used} tokens`);
            const allowed = allowedIds(fm, original.size);
            const pick = allowed[Math.floor(rand() * allowed.length)]!;
            a.acceptToken(pick);
            f.acceptToken(pick);
          }
          expect(f.isTerminated()).toBe(true);
        }
      }
    }, 120_000);

    test(`${vname}: a budget made before the tables arrive (a request before they are done) takes them mid-walk and masks as before`, () => {
      const late = twin(original);
      const g = jsonObjectGrammar();
      const rand = mulberry32(9);
      const a = new GrammarMatcher(structuredClone(g), late, { stopTokenIds: stops });
      const f = new GrammarMatcher(structuredClone(g), original, { stopTokenIds: stops });
      const budget = f.tokensToFinish() + 3;
      const am = new Uint32Array(a.maskWords);
      const fm = new Uint32Array(f.maskWords);
      // The parts arrive one at a time, a step apart, as the compile thread finishes them.
      const parts: BuiltInPart[] = [];
      for (const _ of builtInSearches(late, (p) => parts.push(p)));
      for (let used = 0; !f.isTerminated(); used++) {
        const part = parts.shift();
        if (part) adoptRuleTables(late, part.tables);
        expect(a.tokensToFinish()).toBe(f.tokensToFinish());
        a.fillNextTokenBitmask(am, budget - used);
        f.fillNextTokenBitmask(fm, budget - used);
        if (am.some((w, i) => w !== fm[i])) throw new Error(`masks differ after ${used} tokens`);
        const allowed = allowedIds(fm, original.size);
        const pick = allowed[Math.floor(rand() * allowed.length)]!;
        a.acceptToken(pick);
        f.acceptToken(pick);
      }
    }, 60_000);
  }
});
