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

/** `auto` on each device, best first (the rule: CUDA fp16 or q4f16; CPU q4, else fp32). */
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
