// Converts a llama2.c tokenizer (tok*.bin) into a Hugging Face tokenizer.json in the layout of
// Llama 2's LlamaTokenizerFast, so `tokenizers` encodes exactly as llama2.c's encode() does.

import { readFileSync } from "node:fs";
import { SPIECE_UNDERLINE, sentencePieceBpeTokenizerJson, sentencePieceMerges } from "../tokenizer/sentencepiece.ts";

export interface Llama2cVocab {
  maxTokenLength: number;
  pieces: string[];
  scores: number[];
}

export { SPIECE_UNDERLINE, sentencePieceBpeTokenizerJson };

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
 * llama2.c's vocabulary: ids 0-2 `<unk>`, `<s>`, `</s>`, 3-258 the byte tokens, then pieces in
 * which a space stands for SentencePiece's word boundary; merges as sentencePieceMerges ranks them.
 */
export function llama2cToTokenizerJson(v: Llama2cVocab): ConvertedTokenizer {
  const vocab = v.pieces.map((p, i) => {
    if (i < SPECIALS.length) return SPECIALS[i]!;
    return p.replaceAll(" ", SPIECE_UNDERLINE);
  });
  for (let i = 3; i < Math.min(259, vocab.length); i++) {
    const expect = `<0x${(i - 3).toString(16).toUpperCase().padStart(2, "0")}>`;
    if (vocab[i] !== expect) throw new Error(`token ${i} is ${JSON.stringify(vocab[i])}, expected byte token ${expect}`);
  }
  const tokenizerJson = sentencePieceBpeTokenizerJson(
    Object.fromEntries(vocab.map((p, i) => [p, i])),
    // Specials and byte tokens never result from a merge.
    sentencePieceMerges(vocab, v.scores, (id) => id >= 259),
    SPECIALS.map((content, id) => ({ id, content, special: true })),
  );
  return { tokenizerJson, vocab };
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
