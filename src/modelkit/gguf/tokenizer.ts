// A GGUF file's tokenizer (tokenizer.ggml.*) as the files the engine reads: tokenizer.json for
// Hugging Face `tokenizers`, tokenizer_config.json (special tokens, add_bos_token, the chat
// template), special_tokens_map.json and generation_config.json. Both kinds llama.cpp converts:
//
// - `llama`: SentencePiece pieces with scores, token types and byte fallback. llama.cpp's
//   llm_tokenizer_spm merges the highest-scoring pair first, as SentencePiece does; the pieces
//   become a BPE whose merges are ranked by score (tokenizer/sentencepiece.ts).
// - `gpt2`: byte-level BPE with the file's merges, split first by the pre-tokenizer that
//   tokenizer.ggml.pre names, with llama.cpp's regular expression for it (llama-vocab.cpp).
//
// Token types (llama.cpp's llama_token_type): 1 normal, 2 unknown, 3 control, 4 user-defined,
// 5 unused, 6 byte. Control and unknown tokens become special added tokens (matched in a rendered
// template, skipped when decoding); user-defined ones non-special added tokens (always matched,
// kept in decoded text), as llama.cpp treats them.

import { BASE_CHAT_TEMPLATE } from "../llama2c/tokenizer.ts";
import { bpeModelJson } from "../tokenizer/bytelevel.ts";
import { sentencePieceBpeTokenizerJson, sentencePieceMerges } from "../tokenizer/sentencepiece.ts";
import type { GgufMetadata } from "./file.ts";

const NORMAL = 1;
const UNKNOWN = 2;
const CONTROL = 3;
const USER_DEFINED = 4;
const UNUSED = 5;

const CONTRACTIONS = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";
/** tokenizer.ggml.pre values read, and llama.cpp's split for each. */
export const GGUF_PRE_TOKENIZERS: Record<string, { regex: string | null; ignoreMerges: boolean }> = {
  "llama-bpe": { regex: `${CONTRACTIONS}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`, ignoreMerges: true },
  qwen2: { regex: `${CONTRACTIONS}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`, ignoreMerges: false },
  // GPT-2's own split (the ByteLevel pre-tokenizer's regular expression).
  "gpt-2": { regex: null, ignoreMerges: false },
};
// Names llama.cpp gives the same splits.
GGUF_PRE_TOKENIZERS["llama3"] = GGUF_PRE_TOKENIZERS["llama-v3"] = GGUF_PRE_TOKENIZERS["llama-bpe"]!;
GGUF_PRE_TOKENIZERS["deepseek-r1-qwen"] = GGUF_PRE_TOKENIZERS["qwen2"]!;

/** Texts llama.cpp takes as end of generation when the vocabulary has them (llama-vocab.cpp). */
const END_OF_GENERATION = ["<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>", "_<EOT>", "<｜end▁of▁sentence｜>", "<|eom_id|>", "<|return|>", "<|call|>"];

export interface GgufTokenizerFiles {
  kind: "llama" | "gpt2";
  tokenizerJson: Record<string, unknown>;
  tokenizerConfig: Record<string, unknown>;
  specialTokensMap: Record<string, unknown>;
  generationConfig: Record<string, unknown>;
  bosTokenId: number | null;
  eosTokenIds: number[];
  padTokenId: number | null;
  /** The file had no chat template: the base template (BOS, then the messages' text) stands in. */
  baseTemplate: boolean;
  notes: string[];
}

function stringArray(meta: GgufMetadata, key: string): string[] {
  const v = meta[key];
  if (!Array.isArray(v) || !v.every((x) => typeof x === "string")) throw new Error(`the file's ${key} is missing or not a list of strings`);
  return v as string[];
}

function numberArray(meta: GgufMetadata, key: string, length: number, fallback: number): number[] {
  const v = meta[key];
  if (v === undefined) return new Array(length).fill(fallback);
  if (!Array.isArray(v) || v.length !== length || !v.every((x) => typeof x === "number")) throw new Error(`the file's ${key} must hold one number per token (${length})`);
  return v as number[];
}

/** A token id from the metadata, or null when absent or out of range (-1 and 2^32-1 mean none). */
function tokenId(meta: GgufMetadata, key: string, vocab: number): number | null {
  const v = meta[key];
  return typeof v === "number" && Number.isInteger(v) && v >= 0 && v < vocab ? v : null;
}

function flag(meta: GgufMetadata, key: string, fallback: boolean): boolean {
  const v = meta[key];
  return typeof v === "boolean" ? v : fallback;
}

/** Builds the tokenizer files; throws, naming it, on a tokenizer kind or pre-tokenizer not read. */
export function ggufTokenizerFiles(meta: GgufMetadata, contextLength: number): GgufTokenizerFiles {
  const model = meta["tokenizer.ggml.model"];
  if (model !== "llama" && model !== "gpt2") {
    throw new Error(`tokenizer.ggml.model ${JSON.stringify(model ?? null)} is not supported (supported: llama, SentencePiece-style; gpt2, byte-level BPE)`);
  }
  const tokens = stringArray(meta, "tokenizer.ggml.tokens");
  const V = tokens.length;
  const types = numberArray(meta, "tokenizer.ggml.token_type", V, NORMAL);
  const notes: string[] = [];
  const bos = tokenId(meta, "tokenizer.ggml.bos_token_id", V);
  const eos = tokenId(meta, "tokenizer.ggml.eos_token_id", V);
  const unk = tokenId(meta, "tokenizer.ggml.unknown_token_id", V);
  const pad = tokenId(meta, "tokenizer.ggml.padding_token_id", V);
  const addBos = flag(meta, "tokenizer.ggml.add_bos_token", model === "llama");
  const addEos = flag(meta, "tokenizer.ggml.add_eos_token", false);

  // Each text once in the vocabulary (the first id keeps it), as `tokenizers` needs.
  // (A Map first: a plain object already "has" toString and the like.)
  const ids = new Map<string, number>();
  tokens.forEach((t, i) => {
    if (!ids.has(t)) ids.set(t, i);
  });
  const vocab = Object.fromEntries(ids);
  const added = tokens
    .map((content, id) => ({ id, content, type: types[id]! }))
    .filter((t) => t.type === CONTROL || t.type === UNKNOWN || t.type === USER_DEFINED)
    .map((t) => ({ id: t.id, content: t.content, special: t.type !== USER_DEFINED }));
  const entry = (id: number | null) => (id === null ? null : { id, content: tokens[id]! });

  let tokenizerJson: Record<string, unknown>;
  if (model === "llama") {
    const scores = numberArray(meta, "tokenizer.ggml.scores", V, 0);
    tokenizerJson = sentencePieceBpeTokenizerJson(
      vocab,
      sentencePieceMerges(tokens, scores, (id) => types[id] === NORMAL || types[id] === USER_DEFINED || types[id] === UNUSED),
      added,
      { bos: addBos ? entry(bos) : null, eos: addEos ? entry(eos) : null, addSpacePrefix: flag(meta, "tokenizer.ggml.add_space_prefix", true), unk: unk === null ? null : tokens[unk]! },
    );
  } else {
    const preName = meta["tokenizer.ggml.pre"];
    let pre = typeof preName === "string" ? GGUF_PRE_TOKENIZERS[preName] : GGUF_PRE_TOKENIZERS["gpt-2"];
    if (preName === undefined || preName === "default") {
      pre = GGUF_PRE_TOKENIZERS["gpt-2"];
      notes.push("the file names no pre-tokenizer (tokenizer.ggml.pre): GPT-2's split is used, as for llama.cpp's `default`");
    }
    if (!pre) throw new Error(`tokenizer.ggml.pre ${JSON.stringify(preName)} is not supported (supported: ${Object.keys(GGUF_PRE_TOKENIZERS).join(", ")})`);
    const merges = stringArray(meta, "tokenizer.ggml.merges").map((m): [string, string] => {
      const at = m.indexOf(" ", 1);
      if (at < 0) throw new Error(`tokenizer.ggml.merges holds ${JSON.stringify(m)}, which is not two tokens separated by a space`);
      return [m.slice(0, at), m.slice(at + 1)];
    });
    const byteLevel = { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: pre.regex === null };
    const ends = [...(addBos && bos !== null ? [entry(bos)!] : []), ...(addEos && eos !== null ? [entry(eos)!] : [])];
    tokenizerJson = {
      version: "1.0",
      truncation: null,
      padding: null,
      added_tokens: added.map((t) => ({ ...t, single_word: false, lstrip: false, rstrip: false, normalized: false })),
      // llama.cpp applies no Unicode normalisation before the split.
      normalizer: null,
      pre_tokenizer: pre.regex === null ? byteLevel : { type: "Sequence", pretokenizers: [{ type: "Split", pattern: { Regex: pre.regex }, behavior: "Isolated", invert: false }, byteLevel] },
      post_processor:
        ends.length === 0
          ? null
          : {
              type: "TemplateProcessing",
              single: [...(addBos && bos !== null ? [{ SpecialToken: { id: tokens[bos], type_id: 0 } }] : []), { Sequence: { id: "A", type_id: 0 } }, ...(addEos && eos !== null ? [{ SpecialToken: { id: tokens[eos], type_id: 0 } }] : [])],
              pair: [{ Sequence: { id: "A", type_id: 0 } }, { Sequence: { id: "B", type_id: 1 } }],
              special_tokens: Object.fromEntries(ends.map((t) => [t.content, { id: t.content, ids: [t.id], tokens: [t.content] }])),
            },
      decoder: { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false },
      model: bpeModelJson(vocab, merges, { ignoreMerges: pre.ignoreMerges }),
    };
  }

  // What ends generation, as llama.cpp decides it: EOS, end of turn, end of message, and the
  // control tokens whose text is one of its known ends.
  const eosIds = new Set<number>();
  for (const id of [eos, tokenId(meta, "tokenizer.ggml.eot_token_id", V), tokenId(meta, "tokenizer.ggml.eom_token_id", V)]) if (id !== null) eosIds.add(id);
  tokens.forEach((t, id) => {
    if ((types[id] === CONTROL || types[id] === USER_DEFINED) && END_OF_GENERATION.includes(t)) eosIds.add(id);
  });
  const eosTokenIds = [...eosIds];

  const template = meta["tokenizer.chat_template"];
  const baseTemplate = typeof template !== "string" || template.trim() === "";
  if (baseTemplate) notes.push("the file has no chat template (tokenizer.chat_template): a base model's template stands in (BOS, then the messages' text, one per line)");
  const tokenEntry = (content: string, special: boolean) => ({ content, lstrip: false, normalized: false, rstrip: false, single_word: false, special });
  const text = (id: number | null) => (id === null ? null : tokens[id]!);
  const tokenizerConfig: Record<string, unknown> = {
    add_bos_token: addBos,
    add_eos_token: addEos,
    added_tokens_decoder: Object.fromEntries(added.map((t) => [String(t.id), tokenEntry(t.content, t.special)])),
    bos_token: text(bos),
    eos_token: text(eos),
    unk_token: text(unk),
    pad_token: text(pad),
    chat_template: baseTemplate ? BASE_CHAT_TEMPLATE : template,
    clean_up_tokenization_spaces: false,
    model_max_length: contextLength,
    tokenizer_class: model === "llama" ? "LlamaTokenizer" : "PreTrainedTokenizerFast",
    ...(model === "llama" ? { legacy: true, spaces_between_special_tokens: false } : {}),
  };
  const specialTokensMap: Record<string, unknown> = {};
  for (const [key, id] of [["bos_token", bos], ["eos_token", eos], ["unk_token", unk], ["pad_token", pad]] as const) {
    if (id !== null) specialTokensMap[key] = { content: tokens[id]!, lstrip: false, normalized: false, rstrip: false, single_word: false };
  }

  // Sampling defaults where the file gives them (general.sampling.*, written by recent converters).
  const sampling: Record<string, unknown> = {};
  const num = (key: string) => (typeof meta[key] === "number" ? (meta[key] as number) : undefined);
  const temp = num("general.sampling.temp");
  if (temp !== undefined) Object.assign(sampling, { do_sample: temp > 0, temperature: temp });
  if (num("general.sampling.top_k") !== undefined) sampling.top_k = num("general.sampling.top_k");
  if (num("general.sampling.top_p") !== undefined) sampling.top_p = num("general.sampling.top_p");
  const generationConfig: Record<string, unknown> = {
    ...(bos !== null ? { bos_token_id: bos } : {}),
    eos_token_id: eosTokenIds.length === 1 ? eosTokenIds[0] : eosTokenIds,
    ...(pad !== null ? { pad_token_id: pad } : {}),
    ...sampling,
  };
  return { kind: model, tokenizerJson, tokenizerConfig, specialTokensMap, generationConfig, bosTokenId: bos, eosTokenIds, padTokenId: pad, baseTemplate, notes };
}
