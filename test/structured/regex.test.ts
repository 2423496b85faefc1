import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { compileJsonSchema, GrammarMatcher, vocabularyFromBytes } from "../../src/structured/index.ts";

// One token per byte: acceptance of a text is then exactly membership in the grammar's language.
const bytesVocab = vocabularyFromBytes(Array.from({ length: 256 }, (_, b) => Uint8Array.of(b)));

function accepts(schema: object, value: unknown): boolean {
  const m = new GrammarMatcher(compileJsonSchema(schema), bytesVocab);
  return m.acceptString(JSON.stringify(value)) && m.isComplete();
}

const PATTERNS = [
  "^[A-Z]{2}-\\d{3,5}$",
  "ab+c",
  "^(?:cat|dog)s?$",
  "^[^a-c]*$",
  "x|^y$",
  "^a.c$",
  "^[\\w.-]+@[a-z]+\\.(?:com|org)$",
  "^\\s*\\S+\\s*$",
  "^(a|b)*?c{0,2}$",
  '^["\\\\/]+$',
  "^[é-ü]{1,2}日$",
  "^\\u0041\\x42[\\u{1F600}-\\u{1F64F}]?$",
  "^(?<word>[a-z]+)$",
  "[0-9]{2}",
  "^$",
];

const alphabet = fc.constantFrom("a", "b", "c", "x", "y", "A", "Z", "-", "1", "2", "3", "0", ".", "@", "o", "m", " ", "\n", '"', "\\", "/", "é", "ü", "日", "😀", "\t", "s", "d", "g", "t");

describe("pattern compilation agrees with ECMAScript RegExp", () => {
  for (const pattern of PATTERNS) {
    test(pattern, () => {
      const re = new RegExp(pattern, "u");
      const schema = { type: "string", pattern };
      fc.assert(
        fc.property(fc.array(alphabet, { maxLength: 8 }).map((a) => a.join("")), (s) => {
          expect(accepts(schema, s)).toBe(re.test(s));
        }),
        { numRuns: 400 },
      );
    });
  }

  test("format strings: accepted exactly when matching, including non-ASCII escapes in JSON", () => {
    expect(accepts({ type: "string", format: "date" }, "2024-02-28")).toBe(true);
    expect(accepts({ type: "string", format: "date" }, "2024-02-30")).toBe(false);
    expect(accepts({ type: "string", format: "date-time" }, "2024-12-31T23:59:59.123+05:30")).toBe(true);
    expect(accepts({ type: "string", format: "time" }, "24:00:00Z")).toBe(false);
    expect(accepts({ type: "string", format: "uuid" }, "123e4567-e89b-12d3-a456-426614174000")).toBe(true);
    expect(accepts({ type: "string", format: "email" }, "a.b+c@mail.example.com")).toBe(true);
    expect(accepts({ type: "string", format: "email" }, "a..b@example.com")).toBe(false);
  });

  test("lengths count code points, including escapes and astral characters", () => {
    const schema = { type: "string", minLength: 2, maxLength: 3 };
    for (const [s, ok] of [["ab", true], ["a", false], ["abcd", false], ['a"\n', true], ["😀😀", true], ["é", false]] as const) {
      expect(accepts(schema, s)).toBe(ok);
    }
  });

  test("integer and number bounds", () => {
    fc.assert(
      fc.property(fc.integer({ min: -2000, max: 2000 }), (n) => {
        expect(accepts({ type: "integer", minimum: -250, maximum: 1017 }, n)).toBe(n >= -250 && n <= 1017);
        expect(accepts({ type: "integer", exclusiveMinimum: -3, exclusiveMaximum: 7 }, n)).toBe(n > -3 && n < 7);
      }),
      { numRuns: 500 },
    );
    // Fractional values are a subset: never outside the bounds.
    fc.assert(
      fc.property(fc.double({ min: -20, max: 20, noNaN: true }), (x) => {
        if (accepts({ type: "number", minimum: -5.5, exclusiveMaximum: 9.25 }, x)) expect(x >= -5.5 && x < 9.25).toBe(true);
      }),
      { numRuns: 500 },
    );
  });
});
