// Loads a Hugging Face model directory's tokenizer and its surrounding configuration (special
// tokens, EOS ids, chat templates). Encoding and decoding go through the native `tokenizers`
// package; streaming detokenisation does not (see detokenizer.ts), because each native call is an
// async round trip that costs tens of microseconds.

import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { Tokenizer as NativeTokenizer } from "tokenizers";
import { Detokenizer, compileDecoder, pieceBytes, type DecodePlan, type DecoderConfig } from "./detokenizer.ts";
import { TokenPieces } from "./token-pieces.ts";
import { nativeCall } from "../../native-calls.ts";
import { readChatTemplates, readJson, type ChatTemplates } from "./chat-templates.ts";

export { chatTemplatesOf, type ChatTemplates } from "./chat-templates.ts";

export class TokenizerLoadError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "TokenizerLoadError";
  }
}

export interface AddedTokenInfo {
  id: number;
  content: string;
  special: boolean;
}

type Json = Record<string, unknown>;


/** A token entry in tokenizer_config / special_tokens_map: a string or an AddedToken object. */
function tokenContent(value: unknown): string | null {
  if (typeof value === "string" && value.length > 0) return value;
  if (value !== null && typeof value === "object" && typeof (value as Json).content === "string") {
    return (value as Json).content as string;
  }
  return null;
}

function idList(value: unknown): number[] {
  if (typeof value === "number" && Number.isInteger(value)) return [value];
  if (Array.isArray(value)) return value.filter((v): v is number => typeof v === "number" && Number.isInteger(v));
  return [];
}

export interface EncodeOptions {
  /** Add BOS/EOS as the tokenizer's post-processor says. Off for chat-templated prompts. */
  addSpecialTokens?: boolean;
}

export interface DecodeOptions {
  skipSpecialTokens?: boolean;
}

export class TextTokenizer {
  readonly bosToken: string | null;
  readonly bosTokenId: number | null;
  readonly eosToken: string | null;
  readonly eosTokenId: number | null;
  /** Every id that ends generation: generation_config, config.json and the tokenizer's eos. */
  readonly eosTokenIds: readonly number[];
  readonly padToken: string | null;
  readonly padTokenId: number | null;
  readonly unkToken: string | null;
  readonly addedTokens: readonly AddedTokenInfo[];
  readonly chatTemplates: ChatTemplates;
  /** bos_token, eos_token, … as transformers.js hands them to the chat template. */
  readonly templateTokens: Readonly<Record<string, string>>;
  /** Number of token ids the tokenizer knows, added tokens included. */
  readonly vocabSize: number;
  readonly pieces: TokenPieces;
  private readonly specialIds: Set<number>;
  private readonly decodePlan: DecodePlan | Error;

  private constructor(
    private readonly native: NativeTokenizer,
    tokenizerJson: Json,
    tokenizerConfig: Json | null,
    specialTokensMap: Json | null,
    generationConfig: Json | null,
    modelConfig: Json | null,
    dir: string,
  ) {
    this.vocabSize = native.getVocabSize(true);
    const added: AddedTokenInfo[] = [];
    for (const t of (tokenizerJson.added_tokens as unknown[] | undefined) ?? []) {
      const e = t as Json;
      if (typeof e.id === "number" && typeof e.content === "string") {
        added.push({ id: e.id, content: e.content, special: e.special === true });
      }
    }
    this.addedTokens = added;
    this.specialIds = new Set(added.filter((t) => t.special).map((t) => t.id));

    const lookup = (key: string): string | null =>
      tokenContent(tokenizerConfig?.[key]) ?? tokenContent(specialTokensMap?.[key]);
    const idOf = (token: string | null): number | null => (token === null ? null : native.tokenToId(token));
    const fromConfigId = (key: string): string | null => {
      const id = idList(generationConfig?.[key])[0] ?? idList(modelConfig?.[key])[0];
      return id === undefined ? null : native.idToToken(id);
    };

    this.bosToken = lookup("bos_token") ?? fromConfigId("bos_token_id");
    this.bosTokenId = idOf(this.bosToken);
    this.eosToken = lookup("eos_token") ?? fromConfigId("eos_token_id");
    this.eosTokenId = idOf(this.eosToken);
    this.padToken = lookup("pad_token") ?? fromConfigId("pad_token_id");
    this.padTokenId = idOf(this.padToken);
    this.unkToken = lookup("unk_token");

    const eos = new Set<number>([
      ...idList(generationConfig?.eos_token_id),
      ...idList(modelConfig?.eos_token_id),
    ]);
    if (this.eosTokenId !== null) eos.add(this.eosTokenId);
    this.eosTokenIds = [...eos];

    // transformers.js passes exactly these attributes (when set) to the template.
    const templateTokens: Record<string, string> = {};
    for (const key of ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]) {
      const v = lookup(key);
      if (v) templateTokens[key] = v;
    }
    this.templateTokens = templateTokens;
    this.chatTemplates = readChatTemplates(dir, tokenizerConfig);

    this.pieces = new TokenPieces((id) => native.idToToken(id), this.specialIds);
    let plan: DecodePlan | Error;
    try {
      plan = compileDecoder((tokenizerJson.decoder ?? null) as DecoderConfig | null);
    } catch (err) {
      plan = err instanceof Error ? err : new Error(String(err));
    }
    this.decodePlan = plan;
  }

  /** Loads `dir/tokenizer.json` and the optional config files next to it. */
  static load(dir: string): TextTokenizer {
    const path = join(dir, "tokenizer.json");
    if (!existsSync(path)) throw new TokenizerLoadError(`no tokenizer.json in ${dir}`);
    const text = readFileSync(path, "utf8");
    let native: NativeTokenizer;
    let json: Json;
    try {
      native = NativeTokenizer.fromString(text);
      json = JSON.parse(text) as Json;
    } catch (err) {
      throw new TokenizerLoadError(`cannot load ${path}: ${err instanceof Error ? err.message : String(err)}`);
    }
    return new TextTokenizer(
      native,
      json,
      readJson(join(dir, "tokenizer_config.json")),
      readJson(join(dir, "special_tokens_map.json")),
      readJson(join(dir, "generation_config.json")),
      // onnxruntime-genai exports carry the model's ids in genai_config.json instead.
      readJson(join(dir, "config.json")) ?? ((readJson(join(dir, "genai_config.json"))?.model as Json | undefined) ?? null),
      dir,
    );
  }

  async encode(text: string, options: EncodeOptions = {}): Promise<number[]> {
    const enc = await nativeCall(() => this.native.encode(text, null, { addSpecialTokens: options.addSpecialTokens ?? false }));
    return enc.getIds();
  }

  decode(ids: readonly number[], options: DecodeOptions = {}): Promise<string> {
    return nativeCall(() => this.native.decode([...ids], options.skipSpecialTokens ?? false));
  }

  idToToken(id: number): string | null {
    return this.native.idToToken(id);
  }

  tokenToId(token: string): number | null {
    return this.native.tokenToId(token);
  }

  isSpecial(id: number): boolean {
    return this.specialIds.has(id);
  }

  isEos(id: number): boolean {
    return this.eosTokenIds.includes(id);
  }

  /** What one token stands for on its own, as bytes (OpenAI logprobs' `bytes`); null if unknown. */
  tokenBytes(id: number): Uint8Array | null {
    const piece = this.pieces.piece(id);
    if (piece === null) return null;
    if (this.decodePlan instanceof Error || this.isSpecial(id)) return new TextEncoder().encode(piece);
    return pieceBytes(this.decodePlan, piece);
  }

  /**
   * A streaming decoder whose pieces concatenate to `decode(ids, {skipSpecialTokens: true})`.
   * Throws if the tokenizer's decoder uses a component the streaming decoder does not model.
   */
  createDetokenizer(textTokens: readonly string[] = []): Detokenizer {
    if (this.decodePlan instanceof Error) throw this.decodePlan;
    return new Detokenizer(this.decodePlan, textTokens.length === 0 ? this.pieces : this.piecesShowing(textTokens));
  }

  private readonly showing = new Map<string, TokenPieces>();

  /**
   * Pieces in which these special tokens are text (a tool format's control tokens, such as
   * Phi-4's <|tool_call|>, that its parser must see); one cache per set.
   */
  private piecesShowing(textTokens: readonly string[]): TokenPieces {
    const key = textTokens.join("\u0000");
    let p = this.showing.get(key);
    if (!p) {
      const shown = new Set(textTokens.map((t) => this.native.tokenToId(t)).filter((id): id is number => id !== null && id !== undefined));
      p = new TokenPieces((id) => this.native.idToToken(id), new Set([...this.specialIds].filter((id) => !shown.has(id))));
      this.showing.set(key, p);
    }
    return p;
  }
}
