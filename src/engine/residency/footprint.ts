// What a model directory will take in memory once loaded, estimated before loading it (a load
// decision needs it, and loading is the expensive thing being decided).
//
// Weights: the sizes of the ONNX files the engine loads and their external data (the decoder of the
// directory's dtype, and a vision encoder or embedding graph beside it). ONNX Runtime holds each
// initializer once in its own memory, so the file sizes are the weights' size where they run (on
// CUDA, in the GPU's memory). What a load adds beyond them is not counted: on the CPU, prepacked
// MatMul weights, activation arenas, the worker thread and its tokenizer; bench/cold-load.ts
// measured the server's resident memory growing by 1.5× to 3× the file size for float32 models
// of 50M to 150M parameters, and by 16 MiB and more for the smallest. That is why the default
// budget leaves a quarter of RAM free, and why --memory-budget may need to be lower on the CPU.
//
// KV memory: the KV budget the model will get (see kvGrant). Its KV buffers grow as sequences need
// them, up to that budget, so the budget is what the model may come to hold.
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { isExternalDataOf, onnxFileName } from "../../onnx-dtypes.ts";
import { locateModelFiles } from "../runtime/decoder-spec.ts";

/** Sequences at full context an automatic KV budget is sized for, at most. */
export const KV_SEQUENCES = 64;
const MIN_AUTO_KV = 256 * 2 ** 20;
const MAX_AUTO_KV = 8 * 2 ** 30;

export interface Footprint {
  weightsBytes: number;
  /** KV bytes per position (every layer's key and value), when the directory's configs tell; else null. */
  kvBytesPerToken: number | null;
  /** Positions one sequence may hold, as declared (sluice.json, genai_config.json, config.json). */
  contextLength: number | null;
}

/** A file of weights: an ONNX graph or external data next to one. */
function isWeights(name: string): boolean {
  return name.endsWith(".onnx") || name.includes(".onnx.") || name.includes(".onnx_") || name.endsWith(".data");
}

const size = (path: string) => {
  const s = statSync(path, { throwIfNoEntry: false });
  return s?.isFile() ? s.size : 0;
};

/**
 * The bytes of the graphs the engine loads (the decoder of the chosen dtype, and the vision encoder
 * and embedding graph beside it when present) with their external data; null when the directory
 * does not say (the caller then counts every ONNX file in it).
 */
function loadedGraphBytes(dir: string): number | null {
  let files;
  try {
    files = locateModelFiles(dir);
  } catch {
    return null;
  }
  const folder = dirname(files.onnxPath);
  const graphs = [basename(files.onnxPath), onnxFileName("vision_encoder", files.dtype), onnxFileName("embed_tokens", files.dtype)];
  const names = existsSync(folder) ? readdirSync(folder) : [];
  let bytes = 0;
  for (const g of graphs) {
    if (!names.includes(g)) continue;
    bytes += size(join(folder, g));
    for (const n of names) if (isExternalDataOf(g, n)) bytes += size(join(folder, n));
  }
  // A vision encoder at the directory's top level (an older layout) is loaded too.
  const topVision = join(dir, onnxFileName("vision_encoder", files.dtype));
  if (folder !== dir && existsSync(topVision)) bytes += size(topVision);
  return bytes;
}

function readJson(path: string): Record<string, unknown> {
  try {
    const v: unknown = JSON.parse(readFileSync(path, "utf8"));
    return typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

const num = (v: unknown): number | null => (typeof v === "number" && Number.isFinite(v) && v > 0 ? v : null);

export function estimateFootprint(dir: string): Footprint {
  let weightsBytes = loadedGraphBytes(dir) ?? 0;
  if (weightsBytes === 0) {
    for (const sub of [dir, join(dir, "onnx")]) {
      if (existsSync(sub)) for (const name of readdirSync(sub)) if (isWeights(name)) weightsBytes += size(join(sub, name));
    }
  }
  const card = readJson(join(dir, "sluice.json"));
  const config = readJson(join(dir, "config.json"));
  const genai = (readJson(join(dir, "genai_config.json")).model ?? {}) as Record<string, unknown>;
  const decoder = (genai.decoder ?? {}) as Record<string, unknown>;
  const text = (config.text_config ?? config) as Record<string, unknown>;
  const graph = (card.graph ?? {}) as Record<string, unknown>;

  const layers = num(decoder.num_hidden_layers) ?? num(text.num_hidden_layers);
  const heads = num(decoder.num_attention_heads) ?? num(text.num_attention_heads);
  const kvHeads = num(decoder.num_key_value_heads) ?? num(text.num_key_value_heads) ?? heads;
  const hidden = num(decoder.hidden_size) ?? num(text.hidden_size);
  const headDim = num(graph.kv_head_dim) ?? num(decoder.head_size) ?? num(text.head_dim) ?? (hidden && heads ? hidden / heads : null);
  const kvType = String(graph.kv_cache_dtype ?? text.torch_dtype ?? "float32");
  const bytes = /16/.test(kvType) ? 2 : 4;
  const kvBytesPerToken = layers && kvHeads && headDim ? 2 * layers * kvHeads * headDim * bytes : null;
  const contextLength = num(card.context_length) ?? num(genai.context_length) ?? num(text.max_position_embeddings);
  return { weightsBytes, kvBytesPerToken, contextLength };
}

/** The automatic KV budget of a model under a memory budget: a quarter of it, 256 MiB to 8 GiB. */
export function autoKvBytes(memoryBudgetBytes: number): number {
  return Math.max(MIN_AUTO_KV, Math.min(Math.floor(memoryBudgetBytes / 4), MAX_AUTO_KV));
}

/**
 * The KV budget a model is loaded with: the operator's (serve --kv-budget-mb) when set; else the
 * automatic one, but no more than KV_SEQUENCES sequences at its full context would use (a small
 * model does not hold gigabytes it can never fill; the worker applies the same cap exactly).
 */
export function kvGrant(footprint: Footprint, memoryBudgetBytes: number, explicitBytes: number): number {
  if (explicitBytes > 0) return explicitBytes;
  const auto = autoKvBytes(memoryBudgetBytes);
  const { kvBytesPerToken, contextLength } = footprint;
  if (kvBytesPerToken === null || contextLength === null) return auto;
  return Math.min(auto, KV_SEQUENCES * kvBytesPerToken * contextLength);
}
