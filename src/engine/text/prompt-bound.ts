// A lower bound on a text's token count, without tokenising it: tokenising 15 MB took 40 s only to
// learn that it does not fit the context. Each token covers a run of the (normalised) text's
// UTF-8 bytes, and a token holding byte b is at most longest[b] bytes long (the longest vocabulary
// entry containing b). So every byte b contributes at least 1/longest[b] of its token, and the
// sum over the text's bytes is at most its token count. Long whitespace runs are single tokens,
// but an emoji or a letter rarely shares one with more than a few dozen bytes: the bound is tight
// enough to refuse those prompts at once, and is exact in its direction (never refuses a prompt
// that fits). Tokenizers whose normaliser may delete or rewrite text get no bound.
import { byteLevelBytes } from "./byte-level.ts";

interface Normalizer {
  type?: string;
  normalizers?: Normalizer[];
  pattern?: { String?: string; Regex?: string };
  content?: string;
}

type Form = "NFC" | "NFD" | "NFKC" | "NFKD";

interface TokenizerJson {
  normalizer?: Normalizer | null;
  pre_tokenizer?: { type?: string; pretokenizers?: Array<{ type?: string }> } | null;
  decoder?: { type?: string; decoders?: Array<{ type?: string }> } | null;
  model?: { vocab?: unknown };
  added_tokens?: Array<{ content?: string }>;
}

/** The normalisation to apply before counting; null when the normaliser may shrink text unpredictably. */
function normalization(n: Normalizer | null | undefined, acc: { form: Form | null; lower: boolean }): boolean {
  if (!n) return true;
  switch (n.type) {
    case "NFC":
    case "NFD":
    case "NFKC":
    case "NFKD":
      if (acc.form && acc.form !== n.type) return false;
      acc.form = n.type;
      return true;
    case "Lowercase":
      acc.lower = true;
      return true;
    case "Prepend":
      return true;
    // SentencePiece's space to "▁": vocabulary entries are measured with "▁" as a space below.
    case "Replace":
      return n.pattern?.String === " " && n.content === "\u2581";
    case "Sequence":
      return (n.normalizers ?? []).every((x) => normalization(x, acc));
    default:
      return false;
  }
}

const hasType = (t: { type?: string; pretokenizers?: Array<{ type?: string }>; decoders?: Array<{ type?: string }> } | null | undefined, type: string) =>
  !!t && (t.type === type || (t.pretokenizers ?? t.decoders ?? []).some((x) => x.type === type));

const utf8 = new TextEncoder();

/** The input bytes one vocabulary entry stands for. */
function entryBytes(piece: string, byteLevel: boolean): Uint8Array {
  if (byteLevel) return byteLevelBytes(piece);
  if (/^<0x[0-9A-Fa-f]{2}>$/.test(piece)) return new Uint8Array([parseInt(piece.slice(3, 5), 16)]);
  return utf8.encode(piece.replaceAll("\u2581", " "));
}

export class PromptBound {
  private constructor(
    /** Per byte value, 1 / the longest entry (in bytes) that contains it. */
    private readonly share: Float64Array,
    private readonly form: Form | null,
    private readonly lower: boolean,
  ) {}

  /** From a parsed tokenizer.json; null when no bound can be promised for it. */
  static fromTokenizerJson(json: unknown): PromptBound | null {
    const t = json as TokenizerJson;
    const acc: { form: Form | null; lower: boolean } = { form: null, lower: false };
    if (!normalization(t.normalizer, acc)) return null;
    const vocab = t.model?.vocab;
    const pieces: string[] = Array.isArray(vocab) ? vocab.map((e) => String((e as unknown[])[0] ?? "")) : vocab && typeof vocab === "object" ? Object.keys(vocab) : [];
    if (pieces.length === 0) return null;
    const byteLevel = hasType(t.pre_tokenizer, "ByteLevel") || hasType(t.decoder, "ByteLevel");
    const longest = new Int32Array(256);
    let overall = 1;
    const note = (bytes: Uint8Array) => {
      overall = Math.max(overall, bytes.length);
      for (const b of bytes) if (bytes.length > longest[b]!) longest[b] = bytes.length;
    };
    for (const p of pieces) note(entryBytes(p, byteLevel));
    for (const a of t.added_tokens ?? []) note(utf8.encode(a.content ?? ""));
    // A byte no entry holds is covered by an unknown token of unknown length: assume the longest.
    const share = new Float64Array(256);
    for (let b = 0; b < 256; b++) share[b] = 1 / (longest[b]! > 0 ? longest[b]! : overall);
    return new PromptBound(share, acc.form, acc.lower);
  }

  /** Whether `text` certainly tokenises to at least `limit` tokens (stops counting once it does). */
  atLeast(text: string, limit: number): boolean {
    let s = text;
    if (this.form) s = s.normalize(this.form);
    if (this.lower) s = s.toLowerCase();
    const w = this.share;
    // Above the bound by a whole token, so float rounding cannot tip a prompt that fits.
    const over = limit + 1;
    let sum = 0;
    for (let i = 0; i < s.length; i++) {
      const c = s.charCodeAt(i);
      if (c < 0x80) sum += w[c]!;
      else if (c < 0x800) sum += w[0xc0 | (c >> 6)]! + w[0x80 | (c & 63)]!;
      else if (c >= 0xd800 && c < 0xdc00 && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
        const cp = ((c - 0xd800) << 10) + (s.charCodeAt(i + 1) - 0xdc00) + 0x10000;
        i++;
        sum += w[0xf0 | (cp >> 18)]! + w[0x80 | ((cp >> 12) & 63)]! + w[0x80 | ((cp >> 6) & 63)]! + w[0x80 | (cp & 63)]!;
      } else if (c >= 0xd800 && c < 0xe000) sum += w[0xef]! + w[0xbf]! + w[0xbd]!; // a lone surrogate is encoded as U+FFFD
      else sum += w[0xe0 | (c >> 12)]! + w[0x80 | ((c >> 6) & 63)]! + w[0x80 | (c & 63)]!;
      if ((i & 4095) === 0 && sum >= over) return true;
    }
    return sum >= over;
  }
}
