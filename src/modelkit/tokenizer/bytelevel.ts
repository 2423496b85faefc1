// GPT-2 byte-level BPE: the byte <-> printable-character table, the pre-tokenizer split, a
// deterministic merge learner, and the tokenizer.json that Hugging Face `tokenizers` loads.

/** GPT-2's bytes_to_unicode: printable bytes map to themselves, the rest to U+0100 upwards. */
export function byteToUnicode(): string[] {
  const table: string[] = new Array(256);
  const printable = (b: number) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  let n = 0;
  for (let b = 0; b < 256; b++) {
    table[b] = printable(b) ? String.fromCharCode(b) : String.fromCharCode(256 + n++);
  }
  return table;
}

/** The pattern of the ByteLevel pre-tokenizer with use_regex (GPT-2's). */
export const GPT2_SPLIT = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;

const B2U = byteToUnicode();
const ENC = new TextEncoder();

export function toByteLevel(text: string): string {
  let s = "";
  for (const b of ENC.encode(text)) s += B2U[b];
  return s;
}

export interface SpecialToken {
  content: string;
  /** false for markup such as <tool_call> that must stay visible in decoded text. */
  special: boolean;
}

export interface ByteBpe {
  vocab: Map<string, number>;
  merges: [string, string][];
}

/**
 * Learns up to `numMerges` merges from `text`: most frequent adjacent pair first, ties broken by
 * the pair's string order so the result depends on nothing but the text.
 */
export function learnByteBpe(text: string, numMerges: number): ByteBpe {
  const wordCounts = new Map<string, number>();
  for (const m of text.matchAll(GPT2_SPLIT)) {
    const w = toByteLevel(m[0]);
    wordCounts.set(w, (wordCounts.get(w) ?? 0) + 1);
  }
  const words = [...wordCounts.entries()].map(([w, n]) => ({ parts: [...w], n }));
  const vocab = new Map<string, number>();
  for (const ch of B2U) vocab.set(ch, vocab.size);
  const merges: [string, string][] = [];
  while (merges.length < numMerges) {
    const counts = new Map<string, number>();
    for (const { parts, n } of words) {
      for (let i = 0; i + 1 < parts.length; i++) {
        const key = `${parts[i]}\u0000${parts[i + 1]}`;
        counts.set(key, (counts.get(key) ?? 0) + n);
      }
    }
    let best: string | null = null;
    let bestN = 1; // a pair seen once teaches nothing
    for (const [k, n] of counts) {
      if (n > bestN || (n === bestN && best !== null && k < best)) {
        best = k;
        bestN = n;
      }
    }
    if (best === null) break;
    const [a, b] = best.split("\u0000") as [string, string];
    merges.push([a, b]);
    vocab.set(a + b, vocab.size);
    for (const w of words) {
      const p = w.parts;
      const out: string[] = [];
      for (let i = 0; i < p.length; i++) {
        if (i + 1 < p.length && p[i] === a && p[i + 1] === b) {
          out.push(a + b);
          i++;
        } else out.push(p[i]);
      }
      w.parts = out;
    }
  }
  return { vocab, merges };
}

/**
 * Extends a BPE to `targetSize` tokens with generated pseudo-words: each new word of syllables
 * adds the merges that build it left to right. Quick at any size; the vocabulary is nonsense
 * but a valid, loadable byte-level BPE (for benchmarks, where only its size matters).
 */
export function extendWithPseudoWords(bpe: ByteBpe, targetSize: number, nextRandom: () => number): void {
  const onsets = ["", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "st", "tr", "pl", "ch", "sh", "th"];
  const vowels = ["a", "e", "i", "o", "u", "ai", "ea", "ou", "y"];
  const codas = ["", "n", "r", "s", "t", "l", "m", "ng", "ck"];
  const pick = (xs: string[]) => xs[Math.floor(nextRandom() * xs.length)];
  while (bpe.vocab.size < targetSize) {
    const syll = 1 + Math.floor(nextRandom() * 3);
    let word = nextRandom() < 0.7 ? " " : "";
    for (let s = 0; s < syll; s++) word += pick(onsets) + pick(vowels) + pick(codas);
    const chars = [...toByteLevel(word)];
    let acc = chars[0];
    for (let i = 1; i < chars.length && bpe.vocab.size < targetSize; i++) {
      const next = acc + chars[i];
      if (!bpe.vocab.has(next)) {
        bpe.merges.push([acc, chars[i]]);
        bpe.vocab.set(next, bpe.vocab.size);
      }
      acc = next;
    }
  }
}

export interface AddedToken {
  id: number;
  content: string;
  single_word: boolean;
  lstrip: boolean;
  rstrip: boolean;
  normalized: boolean;
  special: boolean;
}

/** tokenizer.json (tokenizers' serialisation) for a byte-level BPE plus added tokens after it. */
export function byteLevelTokenizerJson(bpe: ByteBpe, added: SpecialToken[]): { json: Record<string, unknown>; addedTokens: AddedToken[] } {
  const addedTokens: AddedToken[] = added.map((t, i) => ({
    id: bpe.vocab.size + i,
    content: t.content,
    single_word: false,
    lstrip: false,
    rstrip: false,
    normalized: false,
    special: t.special,
  }));
  const json = {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: addedTokens,
    normalizer: null,
    pre_tokenizer: { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
    post_processor: { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: true },
    decoder: { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
    model: bpeModelJson(Object.fromEntries(bpe.vocab), bpe.merges),
  };
  return { json, addedTokens };
}

/**
 * tokenizer.json's `model` for a BPE: byte-level (no unknown token, no byte fallback) unless told
 * otherwise; `ignoreMerges` takes a word that is a token whole before merging (Llama 3's BPE).
 */
export function bpeModelJson(
  vocab: Record<string, number>,
  merges: [string, string][],
  opts: { unk?: string | null; byteFallback?: boolean; ignoreMerges?: boolean } = {},
): Record<string, unknown> {
  const fallback = opts.byteFallback === true;
  return {
    type: "BPE",
    dropout: null,
    unk_token: opts.unk ?? null,
    continuing_subword_prefix: null,
    end_of_word_suffix: null,
    fuse_unk: fallback,
    byte_fallback: fallback,
    ignore_merges: opts.ignoreMerges === true,
    vocab,
    merges,
  };
}
