import { beforeAll, describe, expect, test } from "bun:test";
import { compileJsonSchema, jsonObjectGrammar, tokenVocabulary, type TokenVocabulary } from "../../src/structured/index.ts";
import { makeAjv, QWEN_EOS, qwenVocab, randomWalk, SP_EOS, sentencePieceTokenizerJson } from "./helpers.ts";

// Schemas covering the supported keywords; every random valid walk must parse and validate.
export const SCHEMAS: Record<string, object> = {
  nested: {
    type: "object",
    properties: {
      user: {
        type: "object",
        properties: {
          name: { type: "string", minLength: 1, maxLength: 12 },
          age: { type: "integer", minimum: 0, maximum: 120 },
          email: { type: "string", format: "email" },
        },
        required: ["name", "age"],
      },
      active: { type: "boolean" },
      score: { type: "number", minimum: -5.5, maximum: 100 },
    },
    required: ["user", "active"],
    additionalProperties: false,
  },
  enums: {
    type: "object",
    properties: {
      color: { enum: ["red", "green", "blue"] },
      size: { type: "string", enum: ["S", "M", "L", "XL"] },
      n: { enum: [1, 2, 3.5, null, true] },
      c: { const: "fixed" },
      mixed: { enum: [{ a: 1 }, [1, 2], 'x"y', "日本"] },
    },
    required: ["color", "size", "n", "c", "mixed"],
  },
  recursive: {
    $defs: {
      node: {
        type: "object",
        properties: {
          value: { type: "integer" },
          children: { type: "array", items: { $ref: "#/$defs/node" }, maxItems: 3 },
        },
        required: ["value", "children"],
        additionalProperties: false,
      },
    },
    $ref: "#/$defs/node",
  },
  rootRecursion: {
    type: "object",
    properties: { name: { type: "string", maxLength: 4 }, next: { anyOf: [{ $ref: "#" }, { type: "null" }] } },
    required: ["name", "next"],
  },
  arrays: {
    type: "object",
    properties: {
      ints: { type: "array", items: { type: "integer" }, minItems: 2, maxItems: 5 },
      tuple: { type: "array", prefixItems: [{ type: "string" }, { type: "number" }, { type: "boolean" }], items: false, minItems: 2 },
      tupleRest: { type: "array", prefixItems: [{ const: "head" }], items: { type: "null" }, maxItems: 3 },
      empty: { type: "array", maxItems: 0 },
    },
    required: ["ints", "tuple", "tupleRest", "empty"],
  },
  strings: {
    type: "object",
    properties: {
      code: { type: "string", pattern: "^[A-Z]{2}-\\d{3,5}$" },
      loose: { type: "string", pattern: "ab+c" },
      alt: { type: "string", pattern: "^(?:cat|dog)s?$" },
      esc: { type: "string", pattern: '^[\\\\"\\n]{1,3}$' },
      date: { type: "string", format: "date" },
      time: { type: "string", format: "time" },
      dateTime: { type: "string", format: "date-time" },
      uuid: { type: "string", format: "uuid" },
      email: { type: "string", format: "email" },
      short: { type: "string", minLength: 2, maxLength: 4 },
      both: { type: "string", format: "uuid", pattern: "^[0-9a-f-]+$" },
    },
    required: ["code", "loose", "alt", "esc", "date", "time", "dateTime", "uuid", "email", "short", "both"],
  },
  numbers: {
    type: "object",
    properties: {
      i: { type: "integer", exclusiveMinimum: -3, exclusiveMaximum: 7 },
      neg: { type: "integer", minimum: -250, maximum: -17 },
      big: { type: "integer", minimum: 1000 },
      f: { type: "number", minimum: 0.5, maximum: 9.25 },
      g: { type: "number", exclusiveMinimum: -2, maximum: 3 },
      any: { type: "number" },
    },
    required: ["i", "neg", "big", "f", "g", "any"],
  },
  unions: {
    type: "object",
    properties: {
      a: { anyOf: [{ type: "string", maxLength: 5 }, { type: "integer" }, { type: "object", properties: { k: { type: "null" } }, required: ["k"] }] },
      b: { oneOf: [{ type: "string" }, { type: "boolean" }] },
      nullableStr: { type: ["string", "null"], maxLength: 3 },
      nullableNum: { anyOf: [{ type: "number", maximum: 10 }, { type: "null" }] },
      c: { const: { x: [1, null] } },
    },
    required: ["a", "b", "nullableStr", "nullableNum", "c"],
  },
  additional: {
    type: "object",
    properties: {
      closed: { type: "object", properties: { a: { type: "integer" } }, additionalProperties: false },
      open: { type: "object", properties: { a: { type: "integer" } }, additionalProperties: true },
      typed: { type: "object", properties: { a: { type: "integer" } }, additionalProperties: { type: "boolean" } },
      map: { type: "object", additionalProperties: { type: "string", maxLength: 3 } },
      optionalOnly: { type: "object", properties: { p: { type: "integer" }, q: { type: "boolean" } } },
    },
    required: ["closed", "open", "typed", "map", "optionalOnly"],
  },
};

const WALKS_PER_SCHEMA = 12;

describe.each([
  ["qwen3", "qwen"],
  ["sentencepiece", "sp"],
] as const)("random walks over the %s vocabulary", (_label, which) => {
  let vocab: TokenVocabulary;
  let stops: number[];
  beforeAll(async () => {
    if (which === "qwen") {
      vocab = await qwenVocab();
      stops = QWEN_EOS;
    } else {
      vocab = tokenVocabulary(sentencePieceTokenizerJson());
      stops = [SP_EOS];
    }
  });
  const ajv = makeAjv();

  for (const [name, schema] of Object.entries(SCHEMAS)) {
    test(name, () => {
      const grammar = compileJsonSchema(schema);
      const validate = ajv.compile(schema);
      for (let seed = 1; seed <= WALKS_PER_SCHEMA; seed++) {
        const walk = randomWalk(grammar, vocab, stops, seed * 7919 + name.length);
        expect(walk.mismatches).toEqual([]);
        let value: unknown;
        try {
          value = JSON.parse(walk.text);
        } catch {
          throw new Error(`not JSON (${name}, seed ${seed}): ${walk.text}`);
        }
        if (!validate(value)) throw new Error(`invalid (${name}, seed ${seed}): ${walk.text}\n${JSON.stringify(validate.errors)}`);
      }
    });
  }

  test("json_object", () => {
    const grammar = jsonObjectGrammar();
    for (let seed = 1; seed <= WALKS_PER_SCHEMA; seed++) {
      const walk = randomWalk(grammar, vocab, stops, seed);
      expect(walk.mismatches).toEqual([]);
      const value = JSON.parse(walk.text);
      expect(typeof value === "object" && value !== null && !Array.isArray(value)).toBe(true);
    }
  });
});
