// SentencePiece-style BPE vocabularies (pieces with scores, `▁` for a space, byte fallback) as a
// tokenizer.json for Hugging Face `tokenizers`, in the layout of its Llama 2 conversion. Used for
// llama2.c's tokenizer files and for GGUF files whose tokenizer.ggml.model is `llama`.
//
// SentencePiece's BPE (and llama.cpp's llm_tokenizer_spm, and llama2.c's encode) start from single
// characters and repeatedly merge the adjacent pair whose joined text is a piece with the highest
// score. `tokenizers` applies merges by rank instead: ranking every two-piece split of every piece
// by that piece's score gives the same result.

import { bpeModelJson } from "./bytelevel.ts";

/** SentencePiece's word-boundary mark, which stands for a space inside pieces. */
export const SPIECE_UNDERLINE = "\u2581";

/**
 * Merges: every split of every piece (whose id `mergeable` accepts) into two pieces that both
 * exist and are mergeable, ranked by the merged piece's score, highest first (ties by id, then
 * by split point).
 */
export function sentencePieceMerges(pieces: string[], scores: number[], mergeable: (id: number) => boolean): [string, string][] {
  const ids = new Map<string, number>();
  pieces.forEach((p, i) => {
    if (!ids.has(p)) ids.set(p, i);
  });
  const candidates: { a: string; b: string; score: number; id: number; split: number }[] = [];
  pieces.forEach((piece, id) => {
    if (!mergeable(id)) return;
    const chars = [...piece];
    for (let k = 1; k < chars.length; k++) {
      const a = chars.slice(0, k).join("");
      const b = chars.slice(k).join("");
      const ia = ids.get(a);
      const ib = ids.get(b);
      if (ia !== undefined && ib !== undefined && mergeable(ia) && mergeable(ib)) candidates.push({ a, b, score: scores[id]!, id, split: k });
    }
  });
  candidates.sort((x, y) => y.score - x.score || x.id - y.id || x.split - y.split);
  return candidates.map((c) => [c.a, c.b]);
}

export interface SentencePieceOptions {
  /** The token put first by the post-processor (llama's `<s>`), or null for none. */
  bos?: { id: number; content: string } | null;
  /** The token put last by the post-processor, or null for none (the default). */
  eos?: { id: number; content: string } | null;
  /** Prepend `▁` to the text (SentencePiece's add_dummy_prefix; default true). */
  addSpacePrefix?: boolean;
  /** The unknown piece (default `<unk>`), or null for none. */
  unk?: string | null;
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
  opts: SentencePieceOptions = {},
): Record<string, unknown> {
  const bos = opts.bos === undefined ? { id: 1, content: "<s>" } : opts.bos;
  const eos = opts.eos ?? null;
  const prefix = opts.addSpacePrefix ?? true;
  const ends = [...(bos ? [bos] : []), ...(eos ? [eos] : [])];
  const single = [...(bos ? [{ SpecialToken: { id: bos.content, type_id: 0 } }] : []), { Sequence: { id: "A", type_id: 0 } }, ...(eos ? [{ SpecialToken: { id: eos.content, type_id: 0 } }] : [])];
  const pair = [
    ...single,
    ...(bos ? [{ SpecialToken: { id: bos.content, type_id: 1 } }] : []),
    { Sequence: { id: "B", type_id: 1 } },
    ...(eos ? [{ SpecialToken: { id: eos.content, type_id: 1 } }] : []),
  ];
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: addedTokens.map((t) => ({ ...t, single_word: false, lstrip: false, rstrip: false, normalized: false })),
    normalizer: {
      type: "Sequence",
      normalizers: [...(prefix ? [{ type: "Prepend", prepend: SPIECE_UNDERLINE }] : []), { type: "Replace", pattern: { String: " " }, content: SPIECE_UNDERLINE }],
    },
    pre_tokenizer: null,
    post_processor:
      ends.length === 0
        ? null
        : {
            type: "TemplateProcessing",
            single,
            pair,
            special_tokens: Object.fromEntries(ends.map((t) => [t.content, { id: t.content, ids: [t.id], tokens: [t.content] }])),
          },
    decoder: {
      type: "Sequence",
      decoders: [
        { type: "Replace", pattern: { String: SPIECE_UNDERLINE }, content: " " },
        { type: "ByteFallback" },
        { type: "Fuse" },
        ...(prefix ? [{ type: "Strip", content: " ", start: 1, stop: 0 }] : []),
      ],
    },
    model: bpeModelJson(vocab, merges, { unk: opts.unk === undefined ? "<unk>" : opts.unk, byteFallback: true }),
  };
}
