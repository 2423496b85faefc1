// Per token id, the bytes it stands for. Grammar masks are computed on bytes, so this is the only
// place that knows about tokenizer families: GPT-2 style byte-level BPE (Qwen, Llama 3, GPT-2),
// and SentencePiece-style vocabularies ("▁" for space, "<0xNN>" byte fallback pieces).

import { buildTokenTrie, type TokenTrie } from "./trie.ts";

export interface TokenVocabulary {
  /** Number of token ids covered (highest id + 1). */
  readonly size: number;
  /** Bytes per id; null for special tokens (never produced under a grammar) and unused ids. */
  readonly bytes: readonly (Uint8Array | null)[];
  /** Sorted-vocabulary trie of the non-special tokens, shared by all grammars on this vocabulary. */
  readonly trie: TokenTrie;
}

export interface VocabularyOptions {
  /**
   * Special tokens whose text should still count as text, e.g. "[TOOL_CALLS]" when the tool-call
   * grammar has to produce the marker as a single control token.
   */
  readonly textSpecialTokens?: readonly string[];
}

interface TokenizerJson {
  model?: { type?: string; vocab?: unknown; byte_fallback?: boolean };
  added_tokens?: Array<{ id: number; content: string; special?: boolean }>;
  decoder?: unknown;
  pre_tokenizer?: unknown;
}

const encoder = new TextEncoder();

/** The GPT-2 byte-to-unicode table, inverted: printable stand-in character → byte. */
function byteLevelDecoder(): Map<number, number> {
  const keep: number[] = [];
  for (let b = 0x21; b <= 0x7e; b++) keep.push(b);
  for (let b = 0xa1; b <= 0xac; b++) keep.push(b);
  for (let b = 0xae; b <= 0xff; b++) keep.push(b);
  const map = new Map<number, number>();
  for (const b of keep) map.set(b, b);
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (!keep.includes(b)) map.set(256 + n++, b);
  }
  return map;
}

function mentionsType(node: unknown, type: string): boolean {
  if (Array.isArray(node)) return node.some((n) => mentionsType(n, type));
  if (typeof node !== "object" || node === null) return false;
  const o = node as Record<string, unknown>;
  if (o.type === type) return true;
  return Object.values(o).some((v) => typeof v === "object" && mentionsType(v, type));
}

function pieceBytesByteLevel(piece: string, table: Map<number, number>): Uint8Array | null {
  const out: number[] = [];
  for (const ch of piece) {
    const b = table.get(ch.codePointAt(0)!);
    if (b === undefined) return null;
    out.push(b);
  }
  return Uint8Array.from(out);
}

function pieceBytesSentencePiece(piece: string): Uint8Array {
  const m = /^<0x([0-9A-Fa-f]{2})>$/.exec(piece);
  if (m) return Uint8Array.of(parseInt(m[1], 16));
  return encoder.encode(piece.replace(/\u2581/g, " "));
}

/** Token bytes from a Hugging Face tokenizer.json object. */
export function tokenVocabulary(tokenizerJson: object, options: VocabularyOptions = {}): TokenVocabulary {
  const tj = tokenizerJson as TokenizerJson;
  const pieces = new Map<number, string>();
  const vocab = tj.model?.vocab;
  if (Array.isArray(vocab)) {
    vocab.forEach((entry, id) => {
      if (Array.isArray(entry) && typeof entry[0] === "string") pieces.set(id, entry[0]);
    });
  } else if (vocab && typeof vocab === "object") {
    for (const [piece, id] of Object.entries(vocab as Record<string, number>)) pieces.set(id, piece);
  } else {
    throw new TypeError("tokenizer.json has no model.vocab");
  }
  const byteLevel = mentionsType(tj.decoder, "ByteLevel") || mentionsType(tj.pre_tokenizer, "ByteLevel");
  const table = byteLevel ? byteLevelDecoder() : null;
  let size = 0;
  for (const id of pieces.keys()) size = Math.max(size, id + 1);
  for (const t of tj.added_tokens ?? []) size = Math.max(size, t.id + 1);
  const bytes: (Uint8Array | null)[] = new Array(size).fill(null);
  for (const [id, piece] of pieces) {
    bytes[id] = table ? pieceBytesByteLevel(piece, table) : pieceBytesSentencePiece(piece);
  }
  const keep = new Set(options.textSpecialTokens ?? []);
  for (const t of tj.added_tokens ?? []) {
    // Added tokens are matched on their literal content, not through the byte-level table.
    bytes[t.id] = t.special && !keep.has(t.content) ? null : encoder.encode(t.content);
  }
  return vocabularyFromBytes(bytes);
}

/** A vocabulary from explicit bytes per id (null = special / never produced). */
export function vocabularyFromBytes(bytes: readonly (Uint8Array | null)[]): TokenVocabulary {
  const clean = bytes.map((b) => (b && b.length > 0 ? b : null));
  return { size: clean.length, bytes: clean, trie: buildTokenTrie(clean) };
}

/**
 * A vocabulary as plain data in shared memory, for another thread (a model's compile thread,
 * which prepares token budgets for its grammars): structured cloning shares the memory instead of
 * copying it, and trie node numbers stay the same on both sides.
 */
export interface SharedVocabulary {
  readonly size: number;
  /** Every token's bytes, one after another; token i is flat[offsets[i] .. offsets[i + 1]) (empty: none). */
  readonly flat: Uint8Array;
  readonly offsets: Int32Array;
  readonly trie: TokenTrie;
}

/** A copy of `a` in shared memory: posting it to another thread shares it instead of copying it. */
export function inSharedMemory<T extends ArrayBufferView>(a: T): T {
  const C = a.constructor as new (b: SharedArrayBuffer) => T;
  const out = new C(new SharedArrayBuffer(a.byteLength));
  new Uint8Array(out.buffer, out.byteOffset, out.byteLength).set(new Uint8Array(a.buffer, a.byteOffset, a.byteLength));
  return out;
}

/**
 * The vocabulary moved into shared memory: use the returned vocabulary in this thread (so its
 * tables are held once) and pass `data` to the other thread (see vocabularyFromShared).
 */
export function shareVocabulary(v: TokenVocabulary): { vocab: TokenVocabulary; data: SharedVocabulary } {
  let total = 0;
  for (const b of v.bytes) total += b?.length ?? 0;
  const flat = new Uint8Array(new SharedArrayBuffer(total));
  const offsets = new Int32Array(new SharedArrayBuffer(4 * (v.size + 1)));
  let at = 0;
  v.bytes.forEach((b, i) => {
    offsets[i] = at;
    if (!b) return;
    flat.set(b, at);
    at += b.length;
  });
  offsets[v.size] = at;
  const trie = Object.fromEntries(Object.entries(v.trie).map(([k, x]) => [k, ArrayBuffer.isView(x) ? inSharedMemory(x) : x])) as unknown as TokenTrie;
  const data: SharedVocabulary = { size: v.size, flat, offsets, trie };
  return { vocab: vocabularyFromShared(data), data };
}

/** The vocabulary another thread shared (see shareVocabulary), without copying its memory. */
export function vocabularyFromShared(d: SharedVocabulary): TokenVocabulary {
  const bytes: (Uint8Array | null)[] = new Array(d.size);
  for (let i = 0; i < d.size; i++) bytes[i] = d.offsets[i + 1] > d.offsets[i] ? d.flat.subarray(d.offsets[i], d.offsets[i + 1]) : null;
  return { size: d.size, bytes, trie: d.trie };
}
