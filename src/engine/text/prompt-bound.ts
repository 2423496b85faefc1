// How long a rendered prompt may be before it certainly holds more tokens than a context: one
// token stands for at most as many characters as its longest vocabulary entry (a byte-level
// entry has one character per byte; a byte's UTF-16 length is at most one), times what the
// tokenizer's normaliser can shrink text by. A prompt longer than that is refused before it is
// tokenised: tokenising 15 MB took 40 s only to find it does not fit.

interface Normalizer {
  type?: string;
  normalizers?: Normalizer[];
  pattern?: { String?: string; Regex?: string };
  content?: string;
}

/** Input characters per character after normalisation, at most; Infinity when it may delete text. */
function shrinkFactor(n: Normalizer | null | undefined): number {
  if (!n) return 1;
  switch (n.type) {
    // Composition folds a base and its marks (or Hangul jamo) into one code unit: 3 to 1 at most.
    case "NFC":
    case "NFD":
    case "NFKC":
    case "NFKD":
      return 4;
    case "Lowercase":
    case "Prepend":
      return 1;
    case "Replace":
      return n.pattern?.String !== undefined && (n.content ?? "").length >= n.pattern.String.length ? 1 : Infinity;
    case "Sequence":
      return (n.normalizers ?? []).reduce((f, x) => f * shrinkFactor(x), 1);
    default:
      return Infinity;
  }
}

/**
 * Characters of text one token can cover at most, from a parsed tokenizer.json; Infinity when it
 * cannot be bounded (an unknown model type, or a normaliser that may delete characters).
 */
export function charsPerTokenBound(tokenizerJson: unknown): number {
  const json = tokenizerJson as { normalizer?: Normalizer | null; model?: { vocab?: unknown }; added_tokens?: Array<{ content?: string }> };
  const factor = shrinkFactor(json.normalizer);
  if (!Number.isFinite(factor)) return Infinity;
  const vocab = json.model?.vocab;
  let longest = 1;
  if (Array.isArray(vocab)) for (const e of vocab) longest = Math.max(longest, String((e as unknown[])[0] ?? "").length);
  else if (vocab !== null && typeof vocab === "object") for (const k of Object.keys(vocab)) longest = Math.max(longest, k.length);
  else return Infinity;
  for (const t of json.added_tokens ?? []) longest = Math.max(longest, (t.content ?? "").length);
  return longest * factor;
}
