// The converted tokenizer must encode exactly as llama2.c's encode() does. The reference below is
// written from the description in the data's README (and run.c), independently of the importer.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import fc from "fast-check";
import { Tokenizer } from "tokenizers";
import { importLlama2c } from "../../src/modelkit/index.ts";

const DATA = resolve(import.meta.dir, "../../../shared/models/stories260k");
const present = existsSync(join(DATA, "tok512.bin"));
if (!present) console.log(`[modelkit] ${DATA} absent: skipping the llama2.c tokenizer tests`);

interface RefVocab {
  pieces: Uint8Array[];
  scores: number[];
  lookup: Map<string, number>;
}

function readRefVocab(path: string, n: number): RefVocab {
  const b = readFileSync(path);
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  let off = 4;
  const pieces: Uint8Array[] = [];
  const scores: number[] = [];
  const lookup = new Map<string, number>();
  for (let i = 0; i < n; i++) {
    scores.push(dv.getFloat32(off, true));
    const len = dv.getInt32(off + 4, true);
    off += 8;
    const p = b.subarray(off, off + len);
    off += len;
    pieces.push(p);
    const key = Buffer.from(p).toString("latin1");
    if (!lookup.has(key)) lookup.set(key, i);
  }
  return { pieces, scores, lookup };
}

/** llama2.c encode(text, bos=1, eos=0), on raw bytes as run.c works. */
function llama2cEncode(v: RefVocab, text: string): number[] {
  const key = (bytes: Uint8Array | number[]) => Buffer.from(bytes).toString("latin1");
  const tokens: number[] = [1];
  const bytes = new TextEncoder().encode(text);
  if (bytes.length > 0) tokens.push(v.lookup.get(" ") as number);
  let buf: number[] = [];
  for (let i = 0; i < bytes.length; i++) {
    const c = bytes[i];
    if ((c & 0xc0) !== 0x80) buf = [];
    buf.push(c);
    const next = bytes[i + 1];
    if (i + 1 < bytes.length && (next & 0xc0) === 0x80 && buf.length < 4) continue;
    const id = v.lookup.get(key(buf));
    if (id !== undefined) tokens.push(id);
    else for (const x of buf) tokens.push(x + 3);
    buf = [];
  }
  for (;;) {
    let best = -1e10;
    let bestId = -1;
    let bestIdx = -1;
    for (let i = 1; i + 1 < tokens.length; i++) {
      const merged = key([...v.pieces[tokens[i]], ...v.pieces[tokens[i + 1]]]);
      const id = v.lookup.get(merged);
      if (id !== undefined && v.scores[id] > best) {
        best = v.scores[id];
        bestId = id;
        bestIdx = i;
      }
    }
    if (bestIdx === -1) break;
    tokens.splice(bestIdx, 2, bestId);
  }
  return tokens;
}

const TEXTS = [
  "Once upon a time",
  "",
  "a",
  "Hello, world! How are you today? I'm fine: thanks.",
  "Lily had 3 apples and 12 pears; 2+2=4, 3.14159 and 1,000,000.",
  "First line.\nSecond line.\n\nFourth line after a blank one.",
  "tab\tseparated\tvalues\tand  two  spaces   three",
  "  leading spaces and trailing spaces  ",
  "Ünïcödé façade — naïve café «quotes» ‘single’ “double”",
  "日本語のテキスト、中文文本，한국어 텍스트",
  "Привет, мир! Γειά σου κόσμε. שלום עולם. مرحبا بالعالم",
  "emoji 🙂🚀👍🏽 and symbols ™ © ® € £ ¥ ∑ ∞ ≠",
  "Mixed: The cat said \"meow\" (loudly) [twice] {braces} <angles> #hash @at $5 %50 ^ & * _ ~ ` | \\ /",
  "The dog ran to the park. She was happy. They played all day, and then they went home.",
];

describe.skipIf(!present)("llama2.c tokenizer conversion", () => {
  let root: string;
  let tok: Tokenizer;
  let ref: RefVocab;

  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), "modelkit-tok-"));
    const m = await importLlama2c(join(DATA, "stories260K.bin"), join(DATA, "tok512.bin"), { id: "t", outDir: join(root, "m") });
    tok = await Tokenizer.fromFile(join(m.dir, "tokenizer.json"));
    ref = readRefVocab(join(DATA, "tok512.bin"), 512);
  });
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  test("the reference reproduces the README's example", () => {
    expect(llama2cEncode(ref, "Once upon a time")).toEqual([1, 403, 407, 261, 378]);
  });

  for (const text of TEXTS) {
    test(`encodes like llama2.c and round-trips: ${JSON.stringify(text).slice(0, 40)}`, async () => {
      const ids = (await tok.encode(text)).getIds();
      expect(ids).toEqual(llama2cEncode(ref, text));
      expect(await tok.decode(ids, true)).toBe(text);
    });
  }

  test("agrees with llama2.c on random text (property)", async () => {
    const pieces = ["the", " ", "  ", "a", "e", "Lily", " was", "\n", "\t", ".", ",", "!", "'", "\"", "0", "7", "42", "é", "日", "🙂", "ß", "-", "play", "ed", "ing", "Once", " upon"];
    await fc.assert(
      fc.asyncProperty(fc.array(fc.constantFrom(...pieces), { maxLength: 24 }), async (parts) => {
        const text = parts.join("");
        const ids = (await tok.encode(text)).getIds();
        expect(ids).toEqual(llama2cEncode(ref, text));
        expect(await tok.decode(ids, true)).toBe(text);
      }),
      { numRuns: 300, seed: 7 },
    );
  });

  test("byte fallback is used for characters outside the vocabulary", async () => {
    const ids = (await tok.encode("日")).getIds();
    // 日 is E6 97 A5: three byte tokens (byte b has id b + 3).
    expect(ids.slice(-3)).toEqual([0xe6 + 3, 0x97 + 3, 0xa5 + 3]);
  });
});
