// Exact incremental detokenisation. The tokenizer's `decoder` configuration is compiled into a
// small pipeline that mirrors the Hugging Face decoders stage by stage, but streams: every stage
// only lets text through once no later token can change it. Hence the pieces always concatenate to
// the full `decode(ids, skipSpecialTokens)`, a character split over several byte tokens is never
// emitted half, and each token costs a few table lookups instead of a native decode call.
//
// Stages before the first "fuse" (Fuse, ByteLevel, or the implicit join) work on a list of token
// strings, as the Hugging Face decoders do; after it they work on one growing string.

import { byteLevelBytes } from "./byte-level.ts";
import type { TokenPieces } from "./token-pieces.ts";

export interface DecoderConfig {
  type: string;
  [key: string]: unknown;
}

export class UnsupportedDecoderError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UnsupportedDecoderError";
  }
}

type ListStageSpec =
  | { kind: "replace"; pattern: string; content: string }
  | { kind: "metaspace"; replacement: string; dropFirstPrefix: boolean }
  | { kind: "byteFallback" }
  | { kind: "strip"; content: string; start: number; stop: number };

type StreamStageSpec =
  | { kind: "replace"; pattern: string; content: string }
  | { kind: "strip"; content: string; start: number; stop: number };

type FuserSpec = "concat" | "byteLevel" | "joinWithSpace";

export interface DecodePlan {
  list: ListStageSpec[];
  fuser: FuserSpec;
  stream: StreamStageSpec[];
}

function flatten(config: DecoderConfig): DecoderConfig[] {
  if (config.type !== "Sequence") return [config];
  const inner = config.decoders;
  if (!Array.isArray(inner)) throw new UnsupportedDecoderError("Sequence decoder without a decoders list");
  return inner.flatMap((d) => flatten(d as DecoderConfig));
}

function replaceSpec(d: DecoderConfig): { kind: "replace"; pattern: string; content: string } {
  const pattern = d.pattern as { String?: unknown } | undefined;
  if (typeof pattern?.String !== "string" || typeof d.content !== "string") {
    throw new UnsupportedDecoderError("Replace decoder with a regex pattern is not supported for streaming");
  }
  return { kind: "replace", pattern: pattern.String, content: d.content };
}

function stripSpec(d: DecoderConfig): { kind: "strip"; content: string; start: number; stop: number } {
  return {
    kind: "strip",
    content: typeof d.content === "string" ? d.content : " ",
    start: typeof d.start === "number" ? d.start : 0,
    stop: typeof d.stop === "number" ? d.stop : 0,
  };
}

/** Turns a tokenizer.json `decoder` into a streaming plan; throws for decoders it cannot stream. */
export function compileDecoder(config: DecoderConfig | null): DecodePlan {
  if (config === null) return { list: [], fuser: "joinWithSpace", stream: [] };
  const plan: DecodePlan = { list: [], fuser: "concat", stream: [] };
  let fused = false;
  for (const d of flatten(config)) {
    switch (d.type) {
      case "Fuse":
        fused = true;
        break;
      case "ByteLevel":
        if (fused) throw new UnsupportedDecoderError("ByteLevel after Fuse is not supported");
        plan.fuser = "byteLevel";
        fused = true;
        break;
      case "Replace":
        (fused ? plan.stream : plan.list).push(replaceSpec(d));
        break;
      case "Strip":
        (fused ? plan.stream : plan.list).push(stripSpec(d));
        break;
      case "ByteFallback":
        if (fused) throw new UnsupportedDecoderError("ByteFallback after Fuse is not supported");
        plan.list.push({ kind: "byteFallback" });
        break;
      case "Metaspace": {
        if (fused) throw new UnsupportedDecoderError("Metaspace after Fuse is not supported");
        const scheme =
          typeof d.prepend_scheme === "string" ? d.prepend_scheme : d.add_prefix_space === false ? "never" : "always";
        plan.list.push({
          kind: "metaspace",
          replacement: typeof d.replacement === "string" ? d.replacement : "\u2581",
          dropFirstPrefix: scheme !== "never",
        });
        break;
      }
      default:
        throw new UnsupportedDecoderError(`decoder type ${d.type} is not supported for streaming`);
    }
  }
  return plan;
}

// ---- list stages: token strings in, token strings out ----

interface ListStage {
  push(token: string, out: string[]): void;
  end(out: string[]): void;
}

const strictUtf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** "<0xAB>" -> 0xAB, exactly as the Rust ByteFallback decoder recognises byte tokens. */
function byteToken(token: string): number {
  if (token.length !== 6 || !token.startsWith("<0x") || token[5] !== ">") return -1;
  const hex = token.slice(3, 5);
  if (!/^\+?[0-9a-fA-F]+$/.test(hex)) return -1;
  return parseInt(hex, 16);
}

class ByteFallbackStage implements ListStage {
  private bytes: number[] = [];

  push(token: string, out: string[]): void {
    const b = byteToken(token);
    if (b >= 0) {
      this.bytes.push(b);
      return;
    }
    this.end(out);
    out.push(token);
  }

  end(out: string[]): void {
    if (this.bytes.length === 0) return;
    // A run of byte tokens is either valid UTF-8 as a whole or becomes one U+FFFD per byte.
    try {
      out.push(strictUtf8.decode(new Uint8Array(this.bytes)));
    } catch {
      for (let i = 0; i < this.bytes.length; i++) out.push("\uFFFD");
    }
    this.bytes = [];
  }
}

class MetaspaceStage implements ListStage {
  private index = 0;
  constructor(private readonly spec: { replacement: string; dropFirstPrefix: boolean }) {}

  push(token: string, out: string[]): void {
    let t = token.split(this.spec.replacement).join(" ");
    if (this.index === 0 && this.spec.dropFirstPrefix && t.startsWith(" ")) t = t.slice(1);
    this.index++;
    out.push(t);
  }

  end(): void {}
}

function stripToken(token: string, content: string, start: number, stop: number): string {
  const chars = [...token];
  let from = 0;
  while (from < start && from < chars.length && chars[from] === content) from++;
  let to = chars.length;
  let stripped = 0;
  while (stripped < stop && to > from && chars[to - 1] === content) {
    to--;
    stripped++;
  }
  return from === 0 && to === chars.length ? token : chars.slice(from, to).join("");
}

function listStage(spec: ListStageSpec): ListStage {
  switch (spec.kind) {
    case "replace":
      return {
        push: (t, out) => out.push(t.split(spec.pattern).join(spec.content)),
        end: () => {},
      };
    case "strip":
      return { push: (t, out) => out.push(stripToken(t, spec.content, spec.start, spec.stop)), end: () => {} };
    case "byteFallback":
      return new ByteFallbackStage();
    case "metaspace":
      return new MetaspaceStage(spec);
  }
}

// ---- fusers: token strings in, text out ----

interface Fuser {
  push(tokens: string[]): string;
  end(): string;
}

class ByteLevelFuser implements Fuser {
  // Streaming UTF-8 decoding holds an incomplete trailing sequence back and replaces invalid
  // bytes the way Rust's from_utf8_lossy does; ignoreBOM keeps a leading U+FEFF as Rust does.
  private readonly utf8 = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });

  push(tokens: string[]): string {
    let text = "";
    for (const t of tokens) text += this.utf8.decode(byteLevelBytes(t), { stream: true });
    return text;
  }

  end(): string {
    return this.utf8.decode();
  }
}

class JoinFuser implements Fuser {
  private first = true;
  constructor(private readonly separator: string) {}

  push(tokens: string[]): string {
    let text = "";
    for (const t of tokens) {
      text += this.first ? t : this.separator + t;
      this.first = false;
    }
    return text;
  }

  end(): string {
    return "";
  }
}

// ---- stream stages: text in, text out, holding back what may still change ----

interface StreamStage {
  push(text: string): string;
  end(): string;
}

/** Length of the longest suffix of `text` that is a proper prefix of `pattern`. */
export function partialSuffixLength(text: string, pattern: string): number {
  for (let n = Math.min(text.length, pattern.length - 1); n > 0; n--) {
    if (text.endsWith(pattern.slice(0, n))) return n;
  }
  return 0;
}

class StreamReplace implements StreamStage {
  private held = "";
  constructor(
    private readonly pattern: string,
    private readonly content: string,
  ) {}

  push(text: string): string {
    const buf = this.held + text;
    if (this.pattern.length === 0) return buf;
    const hold = partialSuffixLength(buf, this.pattern);
    this.held = buf.slice(buf.length - hold);
    return buf.slice(0, buf.length - hold).split(this.pattern).join(this.content);
  }

  end(): string {
    const rest = this.held;
    this.held = "";
    return rest;
  }
}

class StreamStrip implements StreamStage {
  private leadingSeen = 0;
  private leadingDone: boolean;
  private held = "";
  constructor(
    private readonly content: string,
    private readonly start: number,
    private readonly stop: number,
  ) {
    this.leadingDone = start === 0;
  }

  push(text: string): string {
    let t = text;
    while (!this.leadingDone && t.length > 0) {
      if (this.leadingSeen < this.start && t.startsWith(this.content)) {
        t = t.slice(this.content.length);
        this.leadingSeen++;
      } else this.leadingDone = true;
    }
    if (this.stop === 0) return t;
    // The final `stop` trailing occurrences vanish at the end, so keep them until more text comes.
    const buf = this.held + t;
    let cut = buf.length;
    let n = 0;
    while (n < this.stop && cut >= this.content.length && buf.endsWith(this.content, cut)) {
      cut -= this.content.length;
      n++;
    }
    this.held = buf.slice(cut);
    return buf.slice(0, cut);
  }

  end(): string {
    this.held = "";
    return "";
  }
}

function streamStage(spec: StreamStageSpec): StreamStage {
  return spec.kind === "replace"
    ? new StreamReplace(spec.pattern, spec.content)
    : new StreamStrip(spec.content, spec.start, spec.stop);
}

/**
 * One generation's streaming decoder. `push` returns the text that token made final (often "",
 * while a character or a stop of the decoder is pending); `finish` returns the rest.
 */
export class Detokenizer {
  private readonly list: ListStage[];
  private readonly fuser: Fuser;
  private readonly stream: StreamStage[];
  private bufA: string[] = [];
  private bufB: string[] = [];

  constructor(
    plan: DecodePlan,
    private readonly pieces: TokenPieces,
  ) {
    this.list = plan.list.map(listStage);
    this.fuser =
      plan.fuser === "byteLevel"
        ? new ByteLevelFuser()
        : new JoinFuser(plan.fuser === "joinWithSpace" ? " " : "");
    this.stream = plan.stream.map(streamStage);
  }

  push(id: number): string {
    if (this.pieces.isSpecial(id)) return "";
    const piece = this.pieces.piece(id);
    if (piece === null) return "";
    const tokens = this.bufA;
    tokens.length = 0;
    tokens.push(piece);
    return this.run(tokens, false);
  }

  finish(): string {
    const tokens = this.bufA;
    tokens.length = 0;
    return this.run(tokens, true);
  }

  /** Passes tokens through every stage; `ending` flushes what each stage holds back. */
  private run(tokens: string[], ending: boolean): string {
    let cur = tokens;
    for (let i = 0; i < this.list.length; i++) {
      const next = cur === this.bufA ? this.bufB : this.bufA;
      next.length = 0;
      const stage = this.list[i]!;
      for (const t of cur) stage.push(t, next);
      if (ending) stage.end(next);
      cur = next;
    }
    let text = this.fuser.push(cur);
    if (ending) text += this.fuser.end();
    for (const s of this.stream) {
      text = s.push(text);
      if (ending) text += s.end();
    }
    return text;
  }
}

const utf8Encoder = new TextEncoder();

/**
 * The bytes one token stands for on its own (for logprobs' `bytes`): the decoder's per-token
 * rewriting without the position-dependent parts (no leading-space stripping).
 */
export function pieceBytes(plan: DecodePlan, piece: string): Uint8Array {
  let t = piece;
  for (const s of plan.list) {
    if (s.kind === "replace") t = t.split(s.pattern).join(s.content);
    else if (s.kind === "metaspace") t = t.split(s.replacement).join(" ");
    else if (s.kind === "byteFallback") {
      const b = byteToken(t);
      if (b >= 0) return Uint8Array.of(b);
    }
  }
  if (plan.fuser === "byteLevel") return byteLevelBytes(t);
  return utf8Encoder.encode(t);
}
