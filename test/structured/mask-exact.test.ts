import { describe, expect, test } from "bun:test";
import { compileJsonSchema, GrammarMatcher, type Grammar, jsonObjectGrammar, type TokenVocabulary } from "../../src/structured/index.ts";
import { mulberry32 } from "../engine/text/fixtures.ts";
import { allowedIds, qwenVocab, trickyVocabulary } from "./helpers.ts";

// The mask is built from shortcuts (whole trie subtrees accepted by byte class, by UTF-8 string
// content and by a per-vocabulary bitmask of pure-content tokens). These tests compare every
// token of the mask with acceptToken's byte-by-byte answer, in states reached by random walks.

function checkState(m: GrammarMatcher, vocab: TokenVocabulary, mask: Uint32Array, stride: number, offset: number): string[] {
  m.fillNextTokenBitmask(mask);
  const bad: string[] = [];
  for (let id = offset; id < vocab.size; id += stride) {
    const inMask = (mask[id >>> 5] & (1 << (id & 31))) !== 0;
    if (m.isAllowed(id) !== inMask) bad.push(`${id} ${JSON.stringify(new TextDecoder().decode(vocab.bytes[id] ?? new Uint8Array()))} mask=${inMask}`);
  }
  return bad;
}

/** Walks randomly; at each step compares the mask with acceptToken for every stride-th token. */
function exactWalk(grammar: Grammar, vocab: TokenVocabulary, seed: number, steps: number, stride: number): string[] {
  const rand = mulberry32(seed);
  const m = new GrammarMatcher(grammar, vocab, { stopTokenIds: [] });
  const mask = new Uint32Array(m.maskWords);
  const bad: string[] = [];
  for (let step = 0; step < steps; step++) {
    bad.push(...checkState(m, vocab, mask, stride, Math.floor(rand() * stride)));
    const allowed = allowedIds(mask, vocab.size);
    if (allowed.length === 0) break;
    // Prefer short tokens so the walk goes deep into strings before closing them.
    const short = allowed.filter((id) => (vocab.bytes[id]?.length ?? 9) <= 2);
    const from = short.length && rand() < 0.7 ? short : allowed;
    m.acceptToken(from[Math.floor(rand() * from.length)]);
  }
  return bad;
}

const SCHEMAS: Record<string, object> = {
  string: { type: "string" },
  short: { type: "string", maxLength: 3 },
  bounded: { type: "string", minLength: 2, maxLength: 20 },
  long: { type: "string", maxLength: 40 },
  pattern: { type: "string", pattern: "^[a-z0-9_]{2,12}$" },
  ascii: { type: "string", pattern: "^[ -\u007f]*$" },
  latin: { type: "string", pattern: "^[a-zé]{0,8}$" },
  notAcute: { type: "string", pattern: "^[^é]{0,30}$" },
  anyThenLetters: { type: "string", pattern: "^[\\s\\S]{3}[a-z]*$" },
  email: { type: "string", format: "email" },
  uuid: { type: "string", format: "uuid" },
  dateTime: { type: "string", format: "date-time" },
  unicode: { enum: ["café", "naïve", "日本語", "😀!"] },
  object: {
    type: "object",
    properties: { k: { type: "string", maxLength: 6 }, n: { type: "integer" }, t: { type: "array", items: { type: "string" } } },
    required: ["k", "n", "t"],
    additionalProperties: false,
  },
};

describe("masks equal acceptToken token for token", () => {
  const tricky = trickyVocabulary(7);
  for (const [name, schema] of Object.entries(SCHEMAS)) {
    test(`${name} on a vocabulary of UTF-8 fragments, escapes and long text`, () => {
      const g = compileJsonSchema(schema);
      for (const seed of [1, 2, 3]) expect(exactWalk(g, tricky, seed, 25, 1)).toEqual([]);
    });
  }
  test("json_object on the tricky vocabulary", () => {
    for (const seed of [4, 5]) expect(exactWalk(jsonObjectGrammar(), tricky, seed, 30, 1)).toEqual([]);
  });
  test("Qwen3 vocabulary (every 7th token per step, rotating)", async () => {
    const vocab = await qwenVocab();
    for (const name of ["bounded", "pattern", "email", "object", "anyThenLetters"]) {
      expect(exactWalk(compileJsonSchema(SCHEMAS[name]), vocab, 11, 8, 7)).toEqual([]);
    }
  });
});
