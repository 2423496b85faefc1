// importGguf: a GGUF file (llama.cpp's and Ollama's format) -> the model directory the HF importer
// writes (import-dir.ts): the fused decoder in float32, float16 or 4-bit weights, and the
// tokenizer, chat template and generation settings from the file's metadata (tokenizer.ts).
//
// Tensors are read by offset, one at a time, and dequantised exactly as ggml defines each type
// (ggml.ts); Q4_0, Q4_1 and Q4_K projections keep their blocks in a 4-bit import. `auto` keeps
// the file's precision class: 4- and 5-bit files become q4 (q4f16 for CUDA), 6-bit, 8-bit and
// float files fp32 (fp16 for CUDA).

import { join, resolve } from "node:path";
import { hfConfigJson, type GraphVariant, type LlamaConfig } from "../llama/config.ts";
import { checkImportDType, checkOutDir, describeWeights, type ImportDType, servedContext, writeImportedDir } from "../import-dir.ts";
import { type SluiceJson, writeJson } from "../modeldir.ts";
import { checkTensors, readGgufConfig } from "./config.ts";
import { GgufFile } from "./file.ts";
import { ggufTokenizerFiles } from "./tokenizer.ts";
import { ggufSource } from "./weights.ts";

export const GGUF_IMPORT_DTYPES = ["fp32", "fp16", "q4", "q4f16", "auto"] as const;
export type GgufImportDType = (typeof GGUF_IMPORT_DTYPES)[number];

export interface ImportGgufOptions {
  /** The .gguf file (for a split model, any of its parts). */
  file: string;
  out: string;
  id: string;
  /** Default auto. */
  dtype?: GgufImportDType;
  /** What `auto` chooses for (default cpu). */
  device?: "cpu" | "cuda";
  contextLength?: number;
  variant?: GraphVariant;
  accuracyLevel?: number;
  displayName?: string;
  description?: string;
  log?: (line: string) => void;
}

export interface ImportedGgufModel {
  dir: string;
  sluice: SluiceJson;
  config: LlamaConfig;
  architecture: string;
  onnxFile: string;
  /** The dtype written (what `auto` chose). */
  dtype: ImportDType;
  /** The file's weight types and how many weights each holds. */
  types: Record<string, number>;
  notes: string[];
}

/** Weights per ggml type among the projections and tables (the file's precision class). */
function weightTypes(file: GgufFile): Record<string, number> {
  const out: Record<string, number> = {};
  for (const t of file.tensors.values()) {
    if (t.dims.length < 2) continue;
    const n = t.dims.reduce((a, b) => a * b, 1);
    out[t.type.name] = (out[t.type.name] ?? 0) + n;
  }
  return out;
}

/**
 * `auto`: the precision class of most of the file's weights. 4- and 5-bit types (Q4_0, Q4_1,
 * Q4_K, Q5_0, Q5_1, Q5_K: the Q4_K_M and Q5_K_M mixes) become 4-bit weights; 6 bits and more
 * (Q6_K, Q8_0, F16, BF16, F32) float weights, float16 on CUDA and float32 on the CPU.
 */
export function autoDType(file: GgufFile, device: "cpu" | "cuda"): ImportDType {
  let low = 0;
  let high = 0;
  for (const t of file.tensors.values()) {
    if (t.dims.length < 2) continue;
    const n = t.dims.reduce((a, b) => a * b, 1);
    if (t.type.bits <= 5) low += n;
    else high += n;
  }
  if (low > high) return device === "cuda" ? "q4f16" : "q4";
  return device === "cuda" ? "fp16" : "fp32";
}

const summary = (types: Record<string, number>) =>
  Object.entries(types)
    .sort((a, b) => b[1] - a[1])
    .map(([t, n]) => `${t} ${((100 * n) / Object.values(types).reduce((a, b) => a + b, 0)).toFixed(0)}%`)
    .join(", ");

/** Imports a GGUF file; throws, leaving nothing at `out`, on anything it cannot import exactly. */
export async function importGguf(opts: ImportGgufOptions): Promise<ImportedGgufModel> {
  const log = opts.log ?? (() => {});
  const asked = opts.dtype ?? "auto";
  if (!GGUF_IMPORT_DTYPES.includes(asked)) throw new Error(`unsupported dtype ${JSON.stringify(asked)}; supported: ${GGUF_IMPORT_DTYPES.join(", ")}`);
  const out = resolve(opts.out);
  checkOutDir(out);
  const file = await GgufFile.open(resolve(opts.file));
  try {
    const g = readGgufConfig(file);
    const tok = ggufTokenizerFiles(file.metadata, g.contextLength);
    const config: LlamaConfig = {
      ...g.config,
      bosTokenId: tok.bosTokenId ?? g.config.bosTokenId,
      eosTokenId: tok.eosTokenIds.length === 1 ? tok.eosTokenIds[0]! : tok.eosTokenIds.length > 0 ? tok.eosTokenIds : g.config.eosTokenId,
      ...(tok.padTokenId !== null ? { padTokenId: tok.padTokenId } : {}),
    };
    const tokens = file.metadata["tokenizer.ggml.tokens"] as string[];
    if (tokens.length > config.vocabSize) throw new Error(`the tokenizer has ${tokens.length} tokens, but the embedding only ${config.vocabSize} rows`);
    checkTensors(config, file);
    const types = weightTypes(file);
    const dtype = asked === "auto" ? autoDType(file, opts.device ?? "cpu") : asked;
    const variant = checkImportDType(dtype, opts.variant);
    const context = servedContext(g.contextLength, opts.contextLength, "file");
    const notes = [...g.notes, ...tok.notes];
    if (asked === "auto") notes.push(`--dtype auto: ${dtype} (the file's weights: ${summary(types)})`);
    const name = typeof file.metadata["general.name"] === "string" ? (file.metadata["general.name"] as string) : g.architecture;
    const written = writeImportedDir({
      architecture: g.architecture,
      notes,
      out,
      id: opts.id,
      dtype,
      variant,
      config,
      context,
      accuracyLevel: opts.accuracyLevel,
      source: (onLayer) => ggufSource(config, file, { adjacentPairRotary: g.adjacentPairRotary, q4: dtype === "q4" || dtype === "q4f16", onLayer }),
      writeFiles(staging) {
        writeJson(join(staging, "tokenizer.json"), tok.tokenizerJson);
        writeJson(join(staging, "tokenizer_config.json"), tok.tokenizerConfig);
        writeJson(join(staging, "special_tokens_map.json"), tok.specialTokensMap);
        writeJson(join(staging, "generation_config.json"), tok.generationConfig);
      },
      configJson: hfConfigJson(config, "float32"),
      card: () => ({
        display_name: opts.displayName ?? opts.id,
        capabilities: { tools: /\btools\b/.test(String(tok.tokenizerConfig.chat_template)), structured_output: true, images: false },
        description:
          opts.description ??
          `Imported from a GGUF file (${name}: ${g.architecture}, ${config.numLayers} layers, hidden ${config.hiddenSize}, vocab ${config.vocabSize}; ${summary(types)}), ${describeWeights(dtype)}.${tok.baseTemplate ? " It has no chat template: a base model, it continues text." : ""}`,
      }),
      log,
    });
    return { ...written, config, architecture: g.architecture, dtype, types, notes };
  } finally {
    file.close();
  }
}
