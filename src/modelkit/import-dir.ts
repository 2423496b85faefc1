// The model directory an importer writes from a checkpoint on disk (hf/ for safetensors, gguf/
// for GGUF files): the fused decoder built from a LlamaWeightSource that reads each tensor when
// the graph takes it, every large initializer written to the external data file as it is added,
// in float32, float16, or 4-bit weights (MatMulNBits) with float32 or float16 activations. The
// import holds a matrix or two (in float32) and its largest tensor, never the whole model.
//
// The directory is assembled beside `out` (in a dot directory, which the catalog never reads) and
// renamed into place at the end: a failed import leaves nothing behind, and a server watching the
// models directory never sees half a model.

import { existsSync, mkdirSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import type { GraphVariant, LlamaConfig, WeightDType } from "./llama/config.ts";
import { buildDecoderModel, gqaHeadDim } from "./llama/graph.ts";
import type { LlamaWeightSource } from "./llama/weights.ts";
import { genaiConfig, type SluiceGraphInfo, type SluiceJson, writeJson } from "./modeldir.ts";
import { ExternalDataFile } from "./onnx/builder.ts";
import { Q4_BLOCK } from "./quant/q4.ts";
import { onnxFileName } from "../onnx-dtypes.ts";

export const IMPORT_DTYPES = ["fp32", "fp16", "q4", "q4f16"] as const;
export type ImportDType = (typeof IMPORT_DTYPES)[number];

/** transformers.js's file name for each dtype (it loads `dtype: "q4"` from onnx/model_q4.onnx). */
export const ONNX_FILES = Object.fromEntries(IMPORT_DTYPES.map((d) => [d, onnxFileName("model", d)])) as Record<ImportDType, string>;

export const DEFAULT_ACCURACY_LEVEL = 4;

export const isQuantized = (dtype: ImportDType) => dtype === "q4" || dtype === "q4f16";
export const activationsOf = (dtype: ImportDType): WeightDType => (dtype === "fp16" || dtype === "q4f16" ? "float16" : "float32");

/** Throws unless `dtype` and `variant` go together; returns the variant. */
export function checkImportDType(dtype: ImportDType, variant: GraphVariant | undefined): GraphVariant {
  if (!IMPORT_DTYPES.includes(dtype)) throw new Error(`unsupported dtype ${JSON.stringify(dtype)}; supported: ${IMPORT_DTYPES.join(", ")}`);
  const v = variant ?? "fused";
  if (isQuantized(dtype) && v !== "fused") throw new Error(`${dtype} needs the fused variant`);
  return v;
}

/** Throws unless `out` is free to write (absent or an empty directory). */
export function checkOutDir(out: string): void {
  if (existsSync(out) && (!statSync(out).isDirectory() || readdirSync(out).length > 0)) {
    throw new Error(`${out} already exists and is not empty; choose a new directory or remove it`);
  }
}

/** The context served: the model's, or less when asked. */
export function servedContext(modelContext: number, asked: number | undefined, what: string): number {
  if (asked === undefined) return modelContext;
  if (!Number.isInteger(asked) || asked <= 0) throw new Error("the context length must be a positive integer");
  if (asked > modelContext) throw new Error(`the context length ${asked} is beyond what the ${what} supports (${modelContext})`);
  return asked;
}

export function describeWeights(dtype: ImportDType): string {
  return isQuantized(dtype) ? `4-bit weights (MatMulNBits, block ${Q4_BLOCK})${dtype === "q4f16" ? ", float16 activations" : ""}` : `${dtype} weights`;
}

export interface ImportDirOptions {
  /** What the source calls its architecture, for the log line. */
  architecture: string;
  /** What the operator should know, logged first. */
  notes: string[];
  out: string;
  id: string;
  dtype: ImportDType;
  variant: GraphVariant;
  config: LlamaConfig;
  context: number;
  accuracyLevel?: number;
  /** The weights; `onLayer` is to be called as each layer is read. */
  source: (onLayer: (i: number) => void) => LlamaWeightSource;
  /** Writes the tokenizer, chat template and generation files into the staging directory. */
  writeFiles: (staging: string) => void;
  /** config.json before the dtype and transformers.js's fields are set. */
  configJson: Record<string, unknown>;
  /** The sluice.json card's fields beside id, context and graph. */
  card: (staging: string) => Omit<SluiceJson, "id" | "context_length" | "graph">;
  log: (line: string) => void;
}

export interface ImportedDir {
  dir: string;
  sluice: SluiceJson;
  /** The decoder, relative to `dir`. */
  onnxFile: string;
}

/** Writes the directory; throws, leaving nothing at `out`, on anything it cannot write exactly. */
export function writeImportedDir(o: ImportDirOptions): ImportedDir {
  const out = resolve(o.out);
  const { config, dtype, variant, context } = o;
  const quantized = isQuantized(dtype);
  const activations = activationsOf(dtype);
  const staging = join(dirname(out), `.${basename(out)}.importing-${process.pid}`);
  for (const n of o.notes) o.log(n);
  o.log(`${o.architecture}: ${config.numLayers} layers, hidden ${config.hiddenSize}, ${config.numHeads}/${config.numKvHeads} heads of ${config.headDim}, vocab ${config.vocabSize}; writing ${dtype}`);
  try {
    rmSync(staging, { recursive: true, force: true });
    mkdirSync(join(staging, "onnx"), { recursive: true });
    const file = ONNX_FILES[dtype];
    const accuracyLevel = o.accuracyLevel ?? DEFAULT_ACCURACY_LEVEL;
    const external = new ExternalDataFile(join(staging, "onnx", `${file}_data`), `${file}_data`);
    let model: Uint8Array;
    try {
      const source = o.source((i) => {
        // The previous layer's arrays are garbage now: collect them before the next layer's are
        // read. JavaScriptCore's collector otherwise lags far behind large typed arrays, and the
        // import's memory would grow towards the model's size instead of staying near a layer's.
        Bun.gc(true);
        o.log(`layer ${i + 1}/${config.numLayers}`);
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

    o.writeFiles(staging);
    const tjs = (o.configJson["transformers.js_config"] ?? {}) as Record<string, unknown>;
    writeJson(join(staging, "config.json"), {
      ...o.configJson,
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
    const { display_name, ...card } = o.card(staging);
    const sluice: SluiceJson = { id: o.id, display_name, context_length: context, ...card, graph };
    writeJson(join(staging, "sluice.json"), sluice);
    if (variant === "fused") writeJson(join(staging, "genai_config.json"), genaiConfig(config, context, `onnx/${file}`));
    if (existsSync(out)) rmSync(out, { recursive: true });
    renameSync(staging, out);
    o.log(`wrote ${out} (onnx/${file}: ${((statSync(join(out, "onnx", file)).size + externalBytes) / 1e6).toFixed(1)} MB)`);
    return { dir: out, sluice, onnxFile: `onnx/${file}` };
  } catch (e) {
    rmSync(staging, { recursive: true, force: true });
    if (e instanceof RangeError && activations === "float16") {
      throw new Error(`${e.message}; import this model with --dtype ${dtype === "q4f16" ? "q4" : "fp32"} (float32 activations) instead`);
    }
    throw e;
  }
}
