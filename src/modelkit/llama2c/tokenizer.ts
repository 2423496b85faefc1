// Converts a llama2.c tokenizer (tok*.bin) into a Hugging Face tokenizer.json in the layout of
// Llama 2's LlamaTokenizerFast, so `tokenizers` encodes exactly as llama2.c's encode() does.

import { readFileSync } from "node:fs";

export interface Llama2cVocab {
  maxTokenLength: number;
  pieces: string[];
  scores: number[];
}

/** SentencePiece's word-boundary mark, which stands for a space inside pieces. */
export const SPIECE_UNDERLINE = "\u2581";

export function readLlama2cTokenizer(path: string, vocabSize: number): Llama2cVocab {
  const buf = readFileSync(path);
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  const dec = new TextDecoder("utf-8", { fatal: false });
  const maxTokenLength = view.getInt32(0, true);
  let off = 4;
  const pieces: string[] = [];
  const scores: number[] = [];
  for (let i = 0; i < vocabSize; i++) {
    if (off + 8 > buf.byteLength) throw new Error(`${path}: truncated at token ${i}`);
    scores.push(view.getFloat32(off, true));
    const len = view.getInt32(off + 4, true);
    off += 8;
    pieces.push(dec.decode(buf.subarray(off, off + len)));
    off += len;
  }
  return { maxTokenLength, pieces, scores };
}

const SPECIALS = ["<unk>", "<s>", "</s>"];

export interface ConvertedTokenizer {
  tokenizerJson: Record<string, unknown>;
  vocab: string[];
}

/**
 * Merges: every split of every piece into two pieces that both exist, ranked by the merged
 * piece's score (highest first), which is the order llama2.c's greedy merge loop applies them.
 */
export function llama2cToTokenizerJson(v: Llama2cVocab): ConvertedTokenizer {
  const vocab = v.pieces.map((p, i) => {
    if (i < SPECIALS.length) return SPECIALS[i];
    return p.replaceAll(" ", SPIECE_UNDERLINE);
  });
  for (let i = 3; i < Math.min(259, vocab.length); i++) {
    const expect = `<0x${(i - 3).toString(16).toUpperCase().padStart(2, "0")}>`;
    if (vocab[i] !== expect) throw new Error(`token ${i} is ${JSON.stringify(vocab[i])}, expected byte token ${expect}`);
  }
  const ids = new Map<string, number>();
  vocab.forEach((p, i) => {
    if (!ids.has(p)) ids.set(p, i);
  });
  const candidates: { a: string; b: string; score: number; id: number; split: number }[] = [];
  vocab.forEach((piece, id) => {
    if (id < 259) return; // specials and byte tokens never result from a merge
    const chars = [...piece];
    for (let k = 1; k < chars.length; k++) {
      const a = chars.slice(0, k).join("");
      const b = chars.slice(k).join("");
      const ia = ids.get(a);
      const ib = ids.get(b);
      if (ia !== undefined && ib !== undefined && ia >= 259 && ib >= 259) candidates.push({ a, b, score: v.scores[id], id, split: k });
    }
  });
  candidates.sort((x, y) => y.score - x.score || x.id - y.id || x.split - y.split);
  const tokenizerJson = sentencePieceBpeTokenizerJson(
    Object.fromEntries(vocab.map((p, i) => [p, i])),
    candidates.map((c) => [c.a, c.b]),
    SPECIALS.map((content, id) => ({ id, content, special: true })),
  );
  return { tokenizerJson, vocab };
}

/**
 * A tokenizer.json in the layout of Hugging Face's Llama 2 conversion: the normaliser turns
 * spaces into "▁" and prepends one (SentencePiece's dummy prefix), BPE with byte fallback, BOS
 * added by the post-processor, and a decoder that undoes all of it.
 */
export function sentencePieceBpeTokenizerJson(
  vocab: Record<string, number>,
  merges: [string, string][],
  addedTokens: { id: number; content: string; special: boolean }[],
): Record<string, unknown> {
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: addedTokens.map((t) => ({ ...t, single_word: false, lstrip: false, rstrip: false, normalized: false })),
    normalizer: {
      type: "Sequence",
      normalizers: [
        { type: "Prepend", prepend: SPIECE_UNDERLINE },
        { type: "Replace", pattern: { String: " " }, content: SPIECE_UNDERLINE },
      ],
    },
    pre_tokenizer: null,
    post_processor: {
      type: "TemplateProcessing",
      single: [{ SpecialToken: { id: "<s>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
      pair: [
        { SpecialToken: { id: "<s>", type_id: 0 } },
        { Sequence: { id: "A", type_id: 0 } },
        { SpecialToken: { id: "<s>", type_id: 1 } },
        { Sequence: { id: "B", type_id: 1 } },
      ],
      special_tokens: { "<s>": { id: "<s>", ids: [1], tokens: ["<s>"] } },
    },
    decoder: {
      type: "Sequence",
      decoders: [
        { type: "Replace", pattern: { String: SPIECE_UNDERLINE }, content: " " },
        { type: "ByteFallback" },
        { type: "Fuse" },
        { type: "Strip", content: " ", start: 1, stop: 0 },
      ],
    },
    model: {
      type: "BPE",
      dropout: null,
      unk_token: "<unk>",
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: true,
      byte_fallback: true,
      ignore_merges: false,
      vocab,
      merges,
    },
  };
}

/** A base model's template: BOS, then the messages' text in order, one per line. */
export const BASE_CHAT_TEMPLATE =
  "{{ bos_token }}{% for message in messages %}{% if not loop.first %}{{ '\\n' }}{% endif %}{{ message['content'] }}{% endfor %}";

export function llamaTokenizerConfig(modelMaxLength: number): Record<string, unknown> {
  const entry = (content: string) => ({ content, lstrip: false, normalized: false, rstrip: false, single_word: false, special: true });
  return {
    add_bos_token: true,
    add_eos_token: false,
    added_tokens_decoder: { "0": entry("<unk>"), "1": entry("<s>"), "2": entry("</s>") },
    bos_token: "<s>",
    chat_template: BASE_CHAT_TEMPLATE,
    clean_up_tokenization_spaces: false,
    eos_token: "</s>",
    legacy: true,
    model_max_length: modelMaxLength,
    pad_token: null,
    sp_model_kwargs: {},
    spaces_between_special_tokens: false,
    tokenizer_class: "LlamaTokenizer",
    unk_token: "<unk>",
    use_default_system_prompt: false,
  };
}

export const LLAMA_SPECIAL_TOKENS_MAP = {
  bos_token: { content: "<s>", lstrip: false, normalized: false, rstrip: false, single_word: false },
  eos_token: { content: "</s>", lstrip: false, normalized: false, rstrip: false, single_word: false },
  unk_token: { content: "<unk>", lstrip: false, normalized: false, rstrip: false, single_word: false },
};
