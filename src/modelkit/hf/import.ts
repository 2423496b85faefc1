// importHfCheckpoint: a Hugging Face checkpoint directory (config.json, safetensors, tokenizer
// files) -> a model directory the engine serves on its fast path (the fused graph), in float32,
// float16, or 4-bit weights (MatMulNBits) with float32 or float16 activations.
//
// Weights stream: each tensor is read from the checkpoint when the graph takes it and each
// initializer is written to the external data file as the graph is built, so the import holds a
// matrix or two (in float32) and its largest tensor, never the whole model.
//
// The directory is assembled beside `out` (in a dot directory, which the catalog never reads) and
// renamed into place at the end: a failed import leaves nothing behind, and a server watching the
// models directory never sees half a model.

import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { gqaHeadDim, buildDecoderModel } from "../llama/graph.ts";
import type { GraphVariant, LlamaConfig, WeightDType } from "../llama/config.ts";
import { genaiConfig, type SluiceGraphInfo, type SluiceJson, writeJson } from "../modeldir.ts";
import { ExternalDataFile } from "../onnx/builder.ts";
import { Q4_BLOCK } from "../quant/q4.ts";
import { readHfModelConfig } from "./config.ts";
import { SafetensorsCheckpoint } from "./safetensors.ts";
import { checkCheckpoint, checkpointSource } from "./weights.ts";

export const HF_IMPORT_DTYPES = ["fp32", "fp16", "q4", "q4f16"] as const;
export type HfImportDType = (typeof HF_IMPORT_DTYPES)[number];

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

/** transformers.js's file name for each dtype (it loads `dtype: "q4"` from onnx/model_q4.onnx). */
const ONNX_FILES: Record<HfImportDType, string> = {
  fp32: "model.onnx",
  fp16: "model_fp16.onnx",
  q4: "model_q4.onnx",
  q4f16: "model_q4f16.onnx",
};

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

const DEFAULT_ACCURACY_LEVEL = 4;

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
  const weights = dtype === "q4" || dtype === "q4f16" ? `4-bit weights (MatMulNBits, block ${Q4_BLOCK})${dtype === "q4f16" ? ", float16 activations" : ""}` : `${dtype} weights`;
  return `Imported from a Hugging Face checkpoint (${arch}, ${c.numLayers} layers, hidden ${c.hiddenSize}, vocab ${c.vocabSize}), ${weights}.`;
}

/** Imports a checkpoint; throws, leaving nothing at `out`, on anything it cannot import exactly. */
export async function importHfCheckpoint(opts: ImportHfOptions): Promise<ImportedHfModel> {
  const log = opts.log ?? (() => {});
  const dtype = opts.dtype ?? "fp32";
  if (!HF_IMPORT_DTYPES.includes(dtype)) throw new Error(`unsupported dtype ${JSON.stringify(dtype)}; supported: ${HF_IMPORT_DTYPES.join(", ")}`);
  const variant = opts.variant ?? "fused";
  const quantized = dtype === "q4" || dtype === "q4f16";
  if (quantized && variant !== "fused") throw new Error(`${dtype} needs the fused variant`);
  const src = resolve(opts.dir);
  const out = resolve(opts.out);
  if (!existsSync(src) || !statSync(src).isDirectory()) throw new Error(`no such directory: ${src}`);
  const configPath = join(src, "config.json");
  if (!existsSync(configPath)) throw new Error(`no config.json in ${src}: not a Hugging Face checkpoint directory`);
  const rawConfig = readJsonObject(configPath);
  const hf = readHfModelConfig(rawConfig);
  const { config } = hf;
  let context = hf.contextLength;
  if (opts.contextLength !== undefined) {
    if (!Number.isInteger(opts.contextLength) || opts.contextLength <= 0) throw new Error("the context length must be a positive integer");
    if (opts.contextLength > context) throw new Error(`the context length ${opts.contextLength} is beyond what the checkpoint supports (${context})`);
    context = opts.contextLength;
  }
  if (!existsSync(join(src, "tokenizer.json"))) {
    throw new Error(`no tokenizer.json in ${src}: the engine reads the fast tokenizer's tokenizer.json (a checkpoint with only tokenizer.model or vocab.json needs one saved by transformers' AutoTokenizer first)`);
  }
  if (existsSync(out) && (!statSync(out).isDirectory() || readdirSync(out).length > 0)) {
    throw new Error(`${out} already exists and is not empty; choose a new directory or remove it`);
  }
  const ckpt = SafetensorsCheckpoint.open(src);
  const notes = [...hf.notes];
  const staging = join(dirname(out), `.${basename(out)}.importing-${process.pid}`);
  const activations: WeightDType = dtype === "fp16" || dtype === "q4f16" ? "float16" : "float32";
  try {
    checkCheckpoint(config, ckpt);
    for (const n of notes) log(n);
    rmSync(staging, { recursive: true, force: true });
    mkdirSync(join(staging, "onnx"), { recursive: true });
    const file = ONNX_FILES[dtype];
    const accuracyLevel = opts.accuracyLevel ?? DEFAULT_ACCURACY_LEVEL;
    log(`${hf.architecture}: ${config.numLayers} layers, hidden ${config.hiddenSize}, ${config.numHeads}/${config.numKvHeads} heads of ${config.headDim}, vocab ${config.vocabSize}; writing ${dtype}`);
    const external = new ExternalDataFile(join(staging, "onnx", `${file}_data`), `${file}_data`);
    let model: Uint8Array;
    try {
      const source = checkpointSource(config, ckpt, (i) => {
        // The previous layer's arrays are garbage now: collect them before the next layer's are
        // read. JavaScriptCore's collector otherwise lags far behind large typed arrays, and the
        // import's memory would grow towards the model's size instead of staying near a layer's.
        Bun.gc(true);
        log(`layer ${i + 1}/${config.numLayers}`);
      });
      model = buildDecoderModel(config, source, {
        variant,
        dtype: activations,
        rotaryCacheLength: context,
        // One product for q, k and v and one for gate and up, as onnxruntime-genai's builder
        // packs them: fewer operator calls per layer (see DecoderGraphOptions).
        packedQkv: variant === "fused",
        packedMlp: variant === "fused",
        externalData: external,
        ...(quantized ? { q4: { accuracyLevel } } : {}),
      }).model;
    } finally {
      external.close();
    }
    writeFileSync(join(staging, "onnx", file), model);
    const externalBytes = external.bytes;
    if (externalBytes === 0) rmSync(join(staging, "onnx", `${file}_data`));

    for (const f of CARRIED_FILES) if (existsSync(join(src, f))) copyFileSync(join(src, f), join(staging, f));
    if (!existsSync(join(staging, "generation_config.json"))) {
      writeJson(join(staging, "generation_config.json"), {
        bos_token_id: config.bosTokenId,
        eos_token_id: config.eosTokenId,
        ...(config.padTokenId !== undefined ? { pad_token_id: config.padTokenId } : {}),
      });
    }
    const tjs = (rawConfig["transformers.js_config"] ?? {}) as Record<string, unknown>;
    writeJson(join(staging, "config.json"), {
      ...rawConfig,
      torch_dtype: activations,
      "transformers.js_config": {
        ...tjs,
        dtype,
        ...(externalBytes > 0 ? { use_external_data_format: { [file]: 1 } } : {}),
      },
    });
    const graph: SluiceGraphInfo = {
      variant,
      dtype: activations,
      kv_cache_dtype: activations,
      logits_dtype: activations,
      past_present_share_buffer: variant === "fused",
      max_cache_length: context,
      kv_head_dim: variant === "fused" ? gqaHeadDim(config.headDim) : config.headDim,
      external_data: externalBytes > 0,
      file: `onnx/${file}`,
      ...(quantized ? { quantization: { method: "MatMulNBits" as const, bits: 4 as const, block_size: Q4_BLOCK, accuracy_level: accuracyLevel } } : {}),
    };
    const template = chatTemplateText(staging);
    const sluice: SluiceJson = {
      id: opts.id,
      display_name: opts.displayName ?? opts.id,
      context_length: context,
      capabilities: { tools: /\btools\b/.test(template), structured_output: true, images: false },
      description: opts.description ?? describe(hf.architecture, config, dtype),
      graph,
    };
    writeJson(join(staging, "sluice.json"), sluice);
    if (variant === "fused") writeJson(join(staging, "genai_config.json"), genaiConfig(config, context, `onnx/${file}`));
    if (existsSync(out)) rmSync(out, { recursive: true });
    renameSync(staging, out);
    log(`wrote ${out} (onnx/${file}: ${((statSync(join(out, "onnx", file)).size + externalBytes) / 1e6).toFixed(1)} MB)`);
    return { dir: out, sluice, config, architecture: hf.architecture, onnxFile: `onnx/${file}`, notes };
  } catch (e) {
    rmSync(staging, { recursive: true, force: true });
    if (e instanceof RangeError && activations === "float16") {
      throw new Error(`${e.message}; import this checkpoint with --dtype ${dtype === "q4f16" ? "q4" : "fp32"} (float32 activations) instead`);
    }
    throw e;
  } finally {
    ckpt.close();
  }
}
