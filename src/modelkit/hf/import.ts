// importHfCheckpoint: a Hugging Face checkpoint directory (config.json, safetensors, tokenizer
// files) -> a model directory the engine serves on its fast path (the fused graph), in float32,
// float16, or 4-bit weights (MatMulNBits) with float32 or float16 activations. The directory is
// written as every importer writes it (import-dir.ts); the tokenizer files are carried over.

import { copyFileSync, existsSync, readFileSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import type { GraphVariant, LlamaConfig } from "../llama/config.ts";
import { checkImportDType, checkOutDir, describeWeights, IMPORT_DTYPES, type ImportDType, servedContext, writeImportedDir } from "../import-dir.ts";
import { type SluiceJson, writeJson } from "../modeldir.ts";
import { readHfModelConfig } from "./config.ts";
import { SafetensorsCheckpoint } from "./safetensors.ts";
import { checkCheckpoint, checkpointSource } from "./weights.ts";

export const HF_IMPORT_DTYPES = IMPORT_DTYPES;
export type HfImportDType = ImportDType;

export interface ImportHfOptions {
  /** The checkpoint directory. */
  dir: string;
  /** The model directory to create; it must not exist (or be empty). */
  out: string;
  /** The model id written to sluice.json. */
  id: string;
  /** Default fp32. */
  dtype?: HfImportDType;
  /** Serve at most this many positions (default: the checkpoint's context). */
  contextLength?: number;
  /** Default fused (the engine's fast path); 4-bit weights need it. */
  variant?: GraphVariant;
  /** MatMulNBits accuracy_level for q4/q4f16 (default 4; see DecoderGraphOptions.q4). */
  accuracyLevel?: number;
  displayName?: string;
  description?: string;
  /** Progress lines (a line per layer, and what the operator should know). */
  log?: (line: string) => void;
}

export interface ImportedHfModel {
  dir: string;
  sluice: SluiceJson;
  config: LlamaConfig;
  architecture: string;
  /** The decoder, relative to `dir`. */
  onnxFile: string;
  notes: string[];
}

/** Tokenizer, chat template and generation settings, carried over as they are when present. */
const CARRIED_FILES = [
  "tokenizer.json",
  "tokenizer_config.json",
  "special_tokens_map.json",
  "added_tokens.json",
  "vocab.json",
  "merges.txt",
  "tokenizer.model",
  "chat_template.jinja",
  "chat_template.json",
  "generation_config.json",
  "README.md",
  "LICENSE",
  "LICENSE.txt",
  "LICENSE.md",
  "NOTICE",
  "USE_POLICY.md",
];

function readJsonObject(path: string): Record<string, unknown> {
  let v: unknown;
  try {
    v = JSON.parse(readFileSync(path, "utf8"));
  } catch (e) {
    throw new Error(`${path}: ${(e as Error).message}`);
  }
  if (v === null || typeof v !== "object" || Array.isArray(v)) throw new Error(`${path} does not hold a JSON object`);
  return v as Record<string, unknown>;
}

/** The chat template text the directory carries, if any (tokenizer_config.json or its own file). */
function chatTemplateText(dir: string): string {
  const parts: string[] = [];
  const tc = join(dir, "tokenizer_config.json");
  if (existsSync(tc)) {
    const t = readJsonObject(tc).chat_template;
    if (typeof t === "string") parts.push(t);
    else if (Array.isArray(t)) for (const e of t) if (typeof e?.template === "string") parts.push(e.template);
  }
  for (const f of ["chat_template.jinja", "chat_template.json"]) if (existsSync(join(dir, f))) parts.push(readFileSync(join(dir, f), "utf8"));
  return parts.join("\n");
}

function describe(arch: string, c: LlamaConfig, dtype: HfImportDType): string {
  return `Imported from a Hugging Face checkpoint (${arch}, ${c.numLayers} layers, hidden ${c.hiddenSize}, vocab ${c.vocabSize}), ${describeWeights(dtype)}.`;
}

/** Imports a checkpoint; throws, leaving nothing at `out`, on anything it cannot import exactly. */
export async function importHfCheckpoint(opts: ImportHfOptions): Promise<ImportedHfModel> {
  const log = opts.log ?? (() => {});
  const dtype = opts.dtype ?? "fp32";
  const variant = checkImportDType(dtype, opts.variant);
  const src = resolve(opts.dir);
  const out = resolve(opts.out);
  if (!existsSync(src) || !statSync(src).isDirectory()) throw new Error(`no such directory: ${src}`);
  const configPath = join(src, "config.json");
  if (!existsSync(configPath)) throw new Error(`no config.json in ${src}: not a Hugging Face checkpoint directory`);
  const rawConfig = readJsonObject(configPath);
  const hf = readHfModelConfig(rawConfig);
  const { config } = hf;
  const context = servedContext(hf.contextLength, opts.contextLength, "checkpoint");
  if (!existsSync(join(src, "tokenizer.json"))) {
    throw new Error(`no tokenizer.json in ${src}: the engine reads the fast tokenizer's tokenizer.json (a checkpoint with only tokenizer.model or vocab.json needs one saved by transformers' AutoTokenizer first)`);
  }
  checkOutDir(out);
  const ckpt = SafetensorsCheckpoint.open(src);
  const notes = [...hf.notes];
  try {
    checkCheckpoint(config, ckpt);
    const written = writeImportedDir({
      architecture: hf.architecture,
      notes,
      out,
      id: opts.id,
      dtype,
      variant,
      config,
      context,
      accuracyLevel: opts.accuracyLevel,
      source: (onLayer) => checkpointSource(config, ckpt, onLayer),
      writeFiles(staging) {
        for (const f of CARRIED_FILES) if (existsSync(join(src, f))) copyFileSync(join(src, f), join(staging, f));
        if (!existsSync(join(staging, "generation_config.json"))) {
          writeJson(join(staging, "generation_config.json"), {
            bos_token_id: config.bosTokenId,
            eos_token_id: config.eosTokenId,
            ...(config.padTokenId !== undefined ? { pad_token_id: config.padTokenId } : {}),
          });
        }
      },
      configJson: rawConfig,
      card: (staging) => ({
        display_name: opts.displayName ?? opts.id,
        capabilities: { tools: /\btools\b/.test(chatTemplateText(staging)), structured_output: true, images: false },
        description: opts.description ?? describe(hf.architecture, config, dtype),
      }),
      log,
    });
    return { ...written, config, architecture: hf.architecture, notes };
  } finally {
    ckpt.close();
  }
}
