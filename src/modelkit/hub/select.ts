// Which files of a repository a model needs: its configs and tokenizer, and the ONNX files of one
// dtype (transformers.js's layout) or the files onnxruntime-genai's config names. Pure: it reads
// listings, never the network, so every rule is tested on plain lists.
import { DTYPE_SUFFIX, isExternalDataOf, ONNX_DTYPES, onnxFileName, type OnnxDType } from "../../onnx-dtypes.ts";
import { PullError } from "./errors.ts";

export type Device = "cuda" | "cpu";
export type DTypeChoice = OnnxDType | "auto";

/** Small files a model directory reads, fetched when the repository has them. */
export const CONFIG_FILES = [
  "config.json",
  "generation_config.json",
  "genai_config.json",
  "tokenizer.json",
  "tokenizer_config.json",
  "special_tokens_map.json",
  "added_tokens.json",
  "chat_template.jinja",
  "chat_template.json",
  "preprocessor_config.json",
  "processor_config.json",
  "sluice.json",
];

/** `auto` on each device, best first (the issue's rule: CUDA fp16 or q4f16; CPU q4, else fp32). */
export const AUTO_ORDER: Record<Device, OnnxDType[]> = {
  cuda: ["fp16", "q4f16", "fp32", "q4", "q8", "int8", "uint8", "bnb4"],
  cpu: ["q4", "fp32", "q8", "int8", "uint8", "fp16", "q4f16", "bnb4"],
};

export interface Listing {
  /** Paths of files (not folders) relative to the model's folder in the repository. */
  files: string[];
}

export interface Selection {
  layout: "transformers.js" | "genai";
  /** The dtype whose files were chosen; null for onnxruntime-genai (its config names them). */
  dtype: OnnxDType | null;
  /** Dtypes the repository offers completely (every graph the layout needs). */
  available: OnnxDType[];
  /** What was chosen and why, for the output ("dtype q4 (auto on CPU; the repo has fp32, q4)"). */
  note: string;
  files: string[];
}

const base = (p: string) => p.slice(p.lastIndexOf("/") + 1);
const folderOf = (p: string) => (p.includes("/") ? p.slice(0, p.lastIndexOf("/")) : "");
const join = (folder: string, name: string) => (folder ? `${folder}/${name}` : name);

export function hasOnnx(files: string[]): boolean {
  return files.some((f) => f.endsWith(".onnx"));
}

export function hasSafetensors(files: string[]): boolean {
  return files.some((f) => f.endsWith(".safetensors"));
}

/** External data beside each graph file: `model.onnx_data`, `model.onnx_data_1`, `model.onnx.data`. */
function withExternalData(files: string[], graphs: string[]): string[] {
  const out: string[] = [];
  for (const g of graphs) {
    out.push(g);
    for (const f of files) if (folderOf(f) === folderOf(g) && isExternalDataOf(base(g), base(f))) out.push(f);
  }
  return out;
}

function configsOf(files: string[]): string[] {
  const present = new Set(files);
  const configs = CONFIG_FILES.filter((c) => present.has(c));
  if (!present.has("tokenizer.json")) {
    throw new PullError("no_model", "the repository has no tokenizer.json (Sluice reads the tokenizer from it; repositories with only a slow tokenizer cannot be served)");
  }
  return configs;
}

/** The graphs a transformers.js export of this kind loads, by base name. */
function sessionsOf(names: Set<string>): string[] | null {
  const has = (b: string) => ONNX_DTYPES.some((d) => names.has(onnxFileName(b, d)));
  if (has("vision_encoder")) return ["vision_encoder", "embed_tokens", "decoder_model_merged"];
  if (has("model")) return ["model"];
  if (has("decoder_model_merged")) return ["decoder_model_merged"];
  return null;
}

export function chooseDType(requested: DTypeChoice, available: OnnxDType[], device: Device, describe: (d: OnnxDType) => string): { dtype: OnnxDType; note: string } {
  const offered = available.length ? available.join(", ") : "none";
  if (requested !== "auto") {
    if (!available.includes(requested)) {
      throw new PullError("usage", `the repository has no ${requested} export (${describe(requested)}); it has: ${offered}`);
    }
    return { dtype: requested, note: `dtype ${requested} (the repo has ${offered})` };
  }
  const dtype = AUTO_ORDER[device].find((d) => available.includes(d));
  if (!dtype) throw new PullError("no_model", "the repository's ONNX files are not a complete export of any dtype");
  const why = device === "cuda" ? "auto on CUDA: fp16, else q4f16" : "auto on CPU: q4, else fp32";
  return { dtype, note: `dtype ${dtype} (${why}; the repo has ${offered})` };
}

/** transformers.js's layout: graphs under onnx/ (or at the top), one file per dtype. */
export function selectTransformersJs(listing: Listing, requested: DTypeChoice, device: Device): Selection {
  const onnxFiles = listing.files.filter((f) => f.endsWith(".onnx"));
  const folder = onnxFiles.some((f) => folderOf(f) === "onnx") ? "onnx" : "";
  const names = new Set(onnxFiles.filter((f) => folderOf(f) === folder).map(base));
  const sessions = sessionsOf(names);
  if (!sessions) {
    throw new PullError("no_model", `the repository's ONNX files are not a decoder export Sluice loads (it looks for ${join(folder, "model.onnx")}, ${join(folder, "decoder_model_merged.onnx")} or a vision_encoder/embed_tokens/decoder_model_merged set; found ${[...names].slice(0, 8).join(", ")})`);
  }
  const available = ONNX_DTYPES.filter((d) => sessions.every((s) => names.has(onnxFileName(s, d))));
  const describe = (d: OnnxDType) => sessions.map((s) => join(folder, onnxFileName(s, d))).join(", ") + (DTYPE_SUFFIX[d] ? "" : " without a suffix");
  const { dtype, note } = chooseDType(requested, available, device, describe);
  const graphs = sessions.map((s) => join(folder, onnxFileName(s, dtype)));
  return { layout: "transformers.js", dtype, available, note, files: [...configsOf(listing.files), ...withExternalData(listing.files, graphs)] };
}

/** Every `filename` under genai_config.json's model sections (decoder, embedding, vision, …). */
export function genaiFileNames(config: unknown): string[] {
  const model = (config as { model?: Record<string, unknown> } | null)?.model;
  if (!model || typeof model !== "object") throw new PullError("no_model", "genai_config.json has no model section");
  const out: string[] = [];
  for (const section of Object.values(model)) {
    const f = (section as { filename?: unknown } | null)?.filename;
    if (typeof section === "object" && typeof f === "string" && f) out.push(f);
  }
  if (out.length === 0) throw new PullError("no_model", "genai_config.json names no ONNX file (model.decoder.filename)");
  return out;
}

/** onnxruntime-genai's layout: genai_config.json names the graphs; there is one dtype per folder. */
export function selectGenai(listing: Listing, genaiConfig: unknown, requested: DTypeChoice): Selection {
  const present = new Set(listing.files);
  const graphs = genaiFileNames(genaiConfig);
  for (const g of graphs) if (!present.has(g)) throw new PullError("no_model", `genai_config.json names ${g}, which the repository does not have`);
  const note =
    requested === "auto"
      ? "onnxruntime-genai export: the files its genai_config.json names"
      : `onnxruntime-genai export: the files its genai_config.json names (--dtype ${requested} does not apply: a genai folder holds one dtype)`;
  return { layout: "genai", dtype: null, available: [], note, files: [...configsOf(listing.files), ...withExternalData(listing.files, graphs)] };
}

/** For a safetensors checkpoint: its weights, their index and the configs. */
export function safetensorsFiles(listing: Listing): string[] {
  const weights = listing.files.filter((f) => !f.includes("/") && (f.endsWith(".safetensors") || f === "model.safetensors.index.json"));
  return [...configsOf(listing.files), ...weights];
}

export function hasGguf(files: string[]): boolean {
  return files.some((f) => f.endsWith(".gguf"));
}

/** A shard's name: `NAME-00001-of-00003.gguf` (llama.cpp's gguf-split). */
const GGUF_SHARD = /^(.*)-(\d{5})-of-(\d{5})\.gguf$/;

/** Projector files of vision models, which are not the language model. */
const isProjector = (f: string) => /(^|[/_-])mmproj[^/]*\.gguf$/i.test(f);

/** The file's quantisation label from its name (llama.cpp's and the Hub's convention: `…-Q4_K_M.gguf`). */
export function ggufQuantOf(file: string, parse: (name: string) => string | undefined): string | null {
  const name = base(file).replace(GGUF_SHARD, "$1").replace(/\.gguf$/i, "");
  return parse(name)?.toUpperCase() ?? null;
}

export interface GgufSelection {
  /** The model's files: one, or every shard of a split model (first shard first). */
  files: string[];
  quant: string | null;
  note: string;
}

/** Every shard of a split file, in order; the file alone when it is not one; throws when one is missing. */
function withShards(files: string[], file: string): string[] {
  const m = GGUF_SHARD.exec(file);
  if (!m) return [file];
  const total = Number(m[3]);
  const shards = Array.from({ length: total }, (_, i) => `${m[1]}-${String(i + 1).padStart(5, "0")}-of-${m[3]}.gguf`);
  const missing = shards.filter((s) => !files.includes(s));
  if (missing.length > 0) throw new PullError("no_model", `${base(file)} is part of a model split in ${total} files, and the repository lacks ${missing.map(base).join(", ")}`);
  return shards;
}

/**
 * The GGUF file a pull takes, as `llama-server -hf REPO:QUANT` and Ollama's `hf.co/REPO:QUANT`
 * do: the file named by --file, or the one whose name carries the quantisation asked for; with
 * neither, Q4_K_M when the repository has it (their default), or its only model. Vision
 * projectors (mmproj) are never the model. `parse` reads a name's quantisation label.
 */
export function selectGguf(listing: Listing, want: { quant?: string; file?: string }, parse: (name: string) => string | undefined): GgufSelection {
  const models = listing.files.filter((f) => f.endsWith(".gguf") && !isProjector(f));
  if (want.file) {
    if (!listing.files.includes(want.file)) {
      throw new PullError("usage", `the repository has no ${want.file}; its GGUF files: ${models.join(", ") || "none"}`);
    }
    const files = withShards(listing.files, want.file);
    const quant = ggufQuantOf(want.file, parse);
    return { files, quant, note: `GGUF ${files.length > 1 ? `${files.length} files from ${files[0]}` : want.file}` };
  }
  // One entry per model: a split model by its first shard.
  const firsts = models.filter((f) => !GGUF_SHARD.exec(f) || GGUF_SHARD.exec(f)![2] === "00001");
  const byQuant = new Map<string, string[]>();
  for (const f of firsts) {
    const q = ggufQuantOf(f, parse) ?? "(no quantisation in the name)";
    byQuant.set(q, [...(byQuant.get(q) ?? []), f]);
  }
  const offered = [...byQuant.keys()].sort().join(", ") || "none";
  if (firsts.length === 0) throw new PullError("no_model", "the repository has no GGUF model file");
  let quant = want.quant?.toUpperCase();
  let why = "asked for";
  if (!quant) {
    if (byQuant.has("Q4_K_M")) [quant, why] = ["Q4_K_M", "the default, as llama.cpp and Ollama choose"];
    else if (firsts.length === 1) [quant, why] = [[...byQuant.keys()][0]!, "the repository's only GGUF model"];
    else throw new PullError("usage", `the repository holds several GGUF models; choose one with REPO:QUANT or --file (it has: ${offered})`);
  }
  const chosen = byQuant.get(quant);
  if (!chosen) throw new PullError("usage", `the repository has no ${quant} GGUF file; it has: ${offered}`);
  if (chosen.length > 1) throw new PullError("usage", `the repository has several ${quant} GGUF files; choose one with --file: ${chosen.join(", ")}`);
  const files = withShards(listing.files, chosen[0]!);
  return { files, quant, note: `GGUF ${quant} (${why}; the repo has ${offered})${files.length > 1 ? `, split in ${files.length} files` : ""}` };
}
