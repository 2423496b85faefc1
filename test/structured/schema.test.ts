import { describe, expect, test } from "bun:test";
import { Tokenizer } from "tokenizers";
import { z } from "zod";
import {
  applyTokenBitmask,
  compileJsonSchema,
  GrammarMatcher,
  jsonObjectGrammar,
  responseFormatGrammar,
  tokenVocabulary,
  UnsupportedSchemaError,
} from "../../src/structured/index.ts";
import { allowedIds, makeAjv, QWEN_EOS, QWEN_TOKENIZER, qwenVocab, randomWalk, SP_EOS, sentencePieceTokenizerJson } from "./helpers.ts";

const sp = tokenVocabulary(sentencePieceTokenizerJson());

function expectValidWalks(schema: object, walks = 8) {
  const validate = makeAjv().compile(schema);
  const g = compileJsonSchema(schema);
  for (let seed = 1; seed <= walks; seed++) {
    const w = randomWalk(g, sp, [SP_EOS], seed * 97);
    expect(w.mismatches).toEqual([]);
    const value = JSON.parse(w.text);
    if (!validate(value)) throw new Error(`${w.text}\n${JSON.stringify(validate.errors)}`);
  }
}

describe("schemas from real generators", () => {
  test("zod 4 z.toJSONSchema: formats with zod's own patterns, tuples, records, recursion", () => {
    const Address = z.object({ street: z.string(), zip: z.string().regex(/^\d{5}$/) });
    interface Cat {
      name: string;
      kids: Cat[];
    }
    const Cat: z.ZodType<Cat> = z.lazy(() => z.object({ name: z.string().max(6), kids: z.array(Cat).max(2) }));
    const schema = z.toJSONSchema(
      z.object({
        name: z.string().min(1).max(20),
        email: z.email(),
        id: z.uuid(),
        age: z.number().int().min(0).max(150),
        tags: z.array(z.string()).max(3),
        kind: z.enum(["a", "b"]),
        nick: z.string().nullable(),
        opt: z.boolean().optional(),
        when: z.iso.datetime(),
        day: z.iso.date(),
        lit: z.literal("x"),
        u: z.union([z.string(), z.number()]),
        addr: Address,
        score: z.number().positive().lt(10),
        tuple: z.tuple([z.string(), z.number()]),
        rec: z.record(z.string(), z.number()),
        cat: Cat,
      }),
    ) as object;
    expectValidWalks(schema, 6);
  });

  test("pydantic-style schema with $defs, titles, allOf-wrapped $ref and Optional defaults", () => {
    const schema = {
      $defs: {
        Color: { enum: ["red", "green"], title: "Color", type: "string" },
        Item: {
          properties: {
            name: { title: "Name", type: "string", maxLength: 8 },
            price: { title: "Price", type: "number", exclusiveMinimum: 0 },
            color: { $ref: "#/$defs/Color", description: "The color" },
          },
          required: ["name", "price", "color"],
          title: "Item",
          type: "object",
        },
      },
      properties: {
        items: { items: { $ref: "#/$defs/Item" }, title: "Items", type: "array", maxItems: 3 },
        main: { allOf: [{ $ref: "#/$defs/Item" }], description: "Featured item" },
        note: { anyOf: [{ type: "string" }, { type: "null" }], default: null, title: "Note" },
      },
      required: ["items", "main"],
      title: "Order",
      type: "object",
      $schema: "https://json-schema.org/draft/2020-12/schema",
      $comment: "generated",
      examples: [{ items: [] }],
    };
    expectValidWalks(schema);
  });
});

describe("unsupported keywords are refused with their name and location", () => {
  const cases: Array<[object, string, string]> = [
    [{ not: { type: "null" } }, "not", ""],
    [{ type: "object", properties: { a: { if: { type: "string" }, then: { maxLength: 2 } } } }, "if", "/properties/a"],
    [{ type: "object", dependentSchemas: { a: { required: ["b"] } } }, "dependentSchemas", ""],
    [{ type: "object", patternProperties: { "^x": { type: "string" } } }, "patternProperties", ""],
    [{ type: "array", items: { type: "integer" }, uniqueItems: true }, "uniqueItems", ""],
    [{ type: "number", multipleOf: 3 }, "multipleOf", ""],
    [{ type: "object", minProperties: 1 }, "minProperties", ""],
    [{ type: "object", propertyNames: { pattern: "^a" } }, "propertyNames", ""],
    [{ type: "string", format: "hostname" }, "format", ""],
    [{ type: "string", pattern: "^(?!a)b$" }, "pattern", ""],
    [{ type: "string", pattern: "(a)\\1" }, "pattern", ""],
    [{ $defs: { x: { type: "array", contains: { type: "null" } } }, $ref: "#/$defs/x" }, "contains", "/$defs/x"],
    [{ $ref: "https://example.com/schema.json" }, "$ref", ""],
    [{ type: "integer", minimum: 5, maximum: 4 }, "minimum", ""],
  ];
  for (const [schema, keyword, pointer] of cases) {
    test(keyword, () => {
      let error: unknown;
      try {
        compileJsonSchema(schema);
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(UnsupportedSchemaError);
      expect((error as UnsupportedSchemaError).keyword).toBe(keyword);
      expect((error as UnsupportedSchemaError).pointer).toBe(pointer);
      expect((error as Error).message).toContain(keyword);
    });
  }
  test("draft-07 tuples (items array + additionalItems) are enforced", () => {
    const schema = { type: "array", items: [{ type: "integer" }, { type: "string", maxLength: 2 }], additionalItems: { type: "boolean" }, maxItems: 4 };
    const validate = makeAjv().compile({ type: "array", prefixItems: schema.items, items: schema.additionalItems, maxItems: 4 });
    const g = compileJsonSchema(schema);
    for (let seed = 1; seed <= 6; seed++) {
      const w = randomWalk(g, sp, [SP_EOS], seed);
      expect(validate(JSON.parse(w.text))).toBe(true);
    }
  });

  test("annotation keywords alone mean any value", () => {
    const g = compileJsonSchema({ title: "Anything", description: "d", $comment: "c", default: 1, examples: [1] });
    const m = new GrammarMatcher(g, sp, { stopTokenIds: [SP_EOS] });
    expect(m.acceptString("[1, \"x\", null]")).toBe(true);
    expect(m.isComplete()).toBe(true);
  });
});

describe("response_format and caching", () => {
  test("text is unconstrained; json_object and json_schema give grammars; equal schemas share one", () => {
    expect(responseFormatGrammar({ type: "text" })).toBeNull();
    expect(responseFormatGrammar(undefined)).toBeNull();
    expect(responseFormatGrammar({ type: "json_object" })).toBe(jsonObjectGrammar());
    const a = responseFormatGrammar({ type: "json_schema", json_schema: { name: "x", schema: { type: "object", properties: { a: { type: "integer" } }, required: ["a"] } } });
    const b = compileJsonSchema({ required: ["a"], properties: { a: { type: "integer" } }, type: "object" });
    expect(a).toBe(b);
  });
});

describe("token bytes", () => {
  test("byte-level BPE (Qwen3): GPT-2 byte map, specials excluded, non-special added tokens kept", async () => {
    const v = await qwenVocab();
    const dec = new TextDecoder();
    expect([...v.bytes[220]!]).toEqual([0x20]); // "Ġ"
    expect(dec.decode(v.bytes[1]!)).toBe('"');
    expect(v.bytes[151643]).toBeNull(); // <|endoftext|>
    expect(v.bytes[151645]).toBeNull(); // <|im_end|>
    expect(dec.decode(v.bytes[151657]!)).toBe("<tool_call>");
    // Every regular token round-trips through the tokenizer's own decoder.
    const tk = Tokenizer.fromFile(QWEN_TOKENIZER);
    for (const id of [9707, 1879, 108386, 75162, 2, 198, 271]) {
      expect(dec.decode(v.bytes[id]!)).toBe(await tk.decode([id], false));
    }
  });

  test("SentencePiece: ▁ is a space, <0xNN> is one byte, specials are null", () => {
    const v = tokenVocabulary(sentencePieceTokenizerJson(), { textSpecialTokens: ["</s>"] });
    expect([...v.bytes[3 + 0x41]!]).toEqual([0x41]);
    expect(new TextDecoder().decode(v.bytes[3 + 256 + 19]!)).toBe(" the");
    expect(v.bytes[0]).toBeNull();
    expect(new TextDecoder().decode(v.bytes[2]!)).toBe("</s>");
  });
});

describe("matcher", () => {
  const schema = { type: "object", properties: { a: { type: "integer" }, b: { type: "array", items: { type: "string" } } }, required: ["a", "b"] };

  test("a real tokenization of valid documents is allowed at every step; EOS only at the end", async () => {
    const v = await qwenVocab();
    const tk = Tokenizer.fromFile(QWEN_TOKENIZER);
    const g = compileJsonSchema(schema);
    for (const doc of ['{"a": -12, "b": ["x", "y\\n\\u00e9", ""]}', JSON.stringify({ a: 7, b: ["日本語", "tab\t"] }, null, 2)]) {
      const ids = (await tk.encode(doc, null, { addSpecialTokens: false })).getIds();
      const m = new GrammarMatcher(g, v, { stopTokenIds: QWEN_EOS });
      const mask = new Uint32Array(m.maskWords);
      for (const id of ids) {
        m.fillNextTokenBitmask(mask);
        expect(allowedIds(mask, v.size)).toContain(id);
        expect(allowedIds(mask, v.size)).not.toContain(QWEN_EOS[0]);
        expect(m.acceptToken(id)).toBe(true);
      }
      m.fillNextTokenBitmask(mask);
      expect(allowedIds(mask, v.size)).toContain(QWEN_EOS[1]);
      expect(m.acceptToken(QWEN_EOS[1])).toBe(true);
      expect(m.isTerminated()).toBe(true);
      m.fillNextTokenBitmask(mask);
      expect(allowedIds(mask, v.size)).toEqual([]);
    }
  });

  test("rejected tokens change nothing; rollback and clone", () => {
    const m = new GrammarMatcher(compileJsonSchema(schema), sp, { stopTokenIds: [SP_EOS] });
    expect(m.acceptString('{"a": 1, "b": [')).toBe(true);
    const key = m.stateKey();
    const closeBracket = sp.bytes.findIndex((b) => b?.length === 1 && b[0] === 0x5d);
    const openBrace = sp.bytes.findIndex((b) => b?.length === 1 && b[0] === 0x7b);
    expect(m.acceptToken(openBrace)).toBe(false);
    expect(m.stateKey()).toBe(key);
    const c = m.clone();
    expect(m.acceptToken(closeBracket)).toBe(true);
    expect(c.stateKey()).toBe(key);
    expect(m.acceptToken(SP_EOS)).toBe(false);
    expect(m.acceptString("}")).toBe(true);
    expect(m.isComplete()).toBe(true);
    expect(m.distanceToComplete()).toBe(0);
    m.rollback(2);
    expect(m.stateKey()).toBe(key);
    expect(m.distanceToComplete()).toBe(2);
  });

  test("applyTokenBitmask keeps allowed logits and masks the rest, including padding ids", () => {
    const logits = Float32Array.from({ length: 70 }, (_, i) => i);
    const mask = new Uint32Array(2);
    mask[0] = 0b101;
    mask[1] = 1 << 3;
    applyTokenBitmask(logits, mask);
    expect([...logits].map((x, i) => (x === -Infinity ? -1 : i)).filter((i) => i >= 0)).toEqual([0, 2, 35]);
  });

  test("whitespace follows the layout (layout.test.ts has the policy): no blank after '{', none after the document", () => {
    const m = new GrammarMatcher(compileJsonSchema(schema), sp, { stopTokenIds: [SP_EOS] });
    expect(m.clone().acceptString("{ ")).toBe(false);
    expect(m.acceptString('{"a"')).toBe(true);
  });
});
