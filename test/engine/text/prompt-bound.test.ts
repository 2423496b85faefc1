// The prompt bound never claims more tokens than a tokenizer makes (the server refuses on it
// without tokenising), and it is tight enough to refuse huge prompts at once.
import { expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import fc from "fast-check";
import { PromptBound } from "../../../src/engine/text/prompt-bound.ts";
import { TextTokenizer } from "../../../src/engine/text/tokenizer.ts";
import { syntheticModel, tinyModelsRoot } from "../../helpers/models.ts";
import { cpuClock } from "../../helpers/cpu-time.ts";

const text = fc.oneof(
  fc.string({ unit: "grapheme", maxLength: 300 }),
  fc.string({ unit: "binary", maxLength: 300 }),
  fc.array(fc.constantFrom(" ", "  ", "\n", "\t", "a", "é", "e\u0301", "😀", "我", "<|im_start|>", "=====", "x".repeat(40), "\ud800"), { maxLength: 200 }).map((a) => a.join("")),
);

for (const [name, spec] of [
  ["byte-level BPE (tiny-bytes)", { preset: "tiny-bytes", seed: 5, id: "hardening/tiny" }],
  ["Qwen3's tokenizer (NFC, 151k entries)", { preset: "tiny-qwen3", seed: 7, id: "bound/qwen" }],
] as const) {
  test(`${name}: never above the real count; refuses a million emoji at once`, async () => {
    const dir = await syntheticModel(tinyModelsRoot(), name.startsWith("Qwen") ? "bound-qwen" : "hardening-tiny", spec);
    const tok = TextTokenizer.load(dir);
    const bound = PromptBound.fromTokenizerJson(JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8")))!;
    expect(bound).not.toBeNull();
    await fc.assert(
      fc.asyncProperty(text, async (t) => {
        const count = (await tok.encode(t, { addSpecialTokens: false })).length;
        expect(bound.atLeast(t, count + 1)).toBe(false);
      }),
      { numRuns: 300 },
    );
    const cpu = cpuClock();
    expect(bound.atLeast("😀".repeat(1_000_000), 4096)).toBe(true);
    expect(bound.atLeast("x".repeat(15_000_000), 4096)).toBe(true);
    expect(cpu()).toBeLessThan(1000);
  }, 60_000);
}

test("no bound where the normaliser may delete text", () => {
  expect(PromptBound.fromTokenizerJson({ normalizer: { type: "StripAccents" }, model: { vocab: { a: 0 } } })).toBeNull();
  expect(PromptBound.fromTokenizerJson({ normalizer: { type: "Replace", pattern: { String: "a" }, content: "" }, model: { vocab: { a: 0 } } })).toBeNull();
  expect(PromptBound.fromTokenizerJson({ normalizer: null, model: { vocab: { a: 0, ab: 1 } } })!.atLeast("ab".repeat(10), 9)).toBe(true);
});
