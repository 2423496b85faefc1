// What the engine must know to drive a decoder graph, read from the session's own metadata and
// the directory's config.json / genai_config.json rather than assumed.
import { existsSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { SEQLENS_INPUT, TOTAL_LENGTH_INPUT } from "./lengths-input.ts";
import { DTYPE_SUFFIX, isOnnxDType, ONNX_DTYPES, onnxFileName, type OnnxDType } from "../../onnx-dtypes.ts";

export type KvDType = "float32" | "float16";

export interface TensorInfo {
  name: string;
  type: string;
  shape: (number | string)[];
}

export interface DecoderSpec {
  /** The token input; null when the graph takes `inputsEmbeds` instead (split VLM exports). */
  inputIds: string | null;
  /** inputs_embeds [batch, seq, hidden], fed from the directory's embed_tokens graph. */
  inputsEmbeds: string | null;
  embedsType: KvDType | null;
  attentionMask: string | null;
  /**
   * GroupQueryAttention's per-row lengths and total length as inputs of their own, where the
   * graph was loaded with them in place of the mask (see lengths-input.ts); else null.
   */
  seqlensK: string | null;
  totalLength: string | null;
  positionIds: string | null;
  /**
   * 1: position_ids [batch, seq]. 3: [3, batch, seq], multimodal rotary (Qwen2-VL): temporal,
   * height and width rows, which only the padded (standard) KV backend feeds.
   */
  positionRows: 1 | 3;
  logits: string;
  logitsType: KvDType;
  /** Per layer: [past key input, past value input, present key output, present value output]. */
  layers: { pastKey: string; pastValue: string; presentKey: string; presentValue: string }[];
  kvType: KvDType;
  kvHeads: number;
  headDim: number;
  vocabSize: number;
  contextLength: number;
  /**
   * GroupQueryAttention-style cache (sluice.json graph.past_present_share_buffer, or genai_config's
   * search.past_present_share_buffer): each row's tokens sit at [0, length) of a fixed buffer, the
   * batch is right padded, and feeding the same buffer as past and present writes in place.
   * Otherwise the standard contract: present = concat(past, new), batches left padded.
   */
  sharedBuffer: boolean;
  /** Longest cache buffer the graph accepts (its rotary table's size). */
  maxCacheLength: number;
}

export interface ModelFiles {
  onnxPath: string;
  /** Which of an export's dtype files the directory's graphs are (see modelDType). */
  dtype: OnnxDType;
  config: Record<string, unknown>;
  genai: GenaiConfig | null;
  card: SluiceGraphCard | null;
}

interface SluiceGraphCard {
  dtype?: unknown;
  graph?: { variant?: string; past_present_share_buffer?: boolean; max_cache_length?: number; file?: string };
}

interface GenaiConfig {
  search?: { past_present_share_buffer?: boolean; max_length?: number };
  model?: {
    context_length?: number;
    vocab_size?: number;
    eos_token_id?: number | number[];
    bos_token_id?: number;
    decoder?: {
      filename?: string;
      head_size?: number;
      num_key_value_heads?: number;
      inputs?: Record<string, string>;
      outputs?: Record<string, string>;
    };
  };
}

function readJson<T>(path: string): T | null {
  return existsSync(path) ? (JSON.parse(readFileSync(path, "utf8")) as T) : null;
}

/** Where a transformers.js export keeps its decoder, by base name, in the order they are tried. */
const DECODER_PLACES = [
  ["onnx", "model"],
  ["", "model"],
  ["onnx", "decoder_model_merged"],
] as const;

const decoderPaths = (dir: string, dtype: OnnxDType) => DECODER_PLACES.map(([sub, base]) => join(dir, sub, onnxFileName(base, dtype)));

/**
 * Which dtype's files to load (transformers.js names them onnx/model_q4.onnx, …): the one the
 * card's `dtype` names; without one, fp32's names, or the only dtype present. A directory holding
 * several dtypes and no choice is refused rather than guessed.
 */
export function modelDType(dir: string): OnnxDType {
  const card = readJson<SluiceGraphCard>(join(dir, "sluice.json"));
  if (card?.dtype !== undefined) {
    if (!isOnnxDType(card.dtype)) throw new Error(`sluice.json's dtype ${JSON.stringify(card.dtype)} is not one of ${ONNX_DTYPES.join(", ")}`);
    return card.dtype;
  }
  if (decoderPaths(dir, "fp32").some((p) => existsSync(p))) return "fp32";
  const present = ONNX_DTYPES.filter((d) => decoderPaths(dir, d).some((p) => existsSync(p)));
  if (present.length > 1) {
    throw new Error(`the directory holds the dtypes ${present.join(", ")} and sluice.json names none: add e.g. "dtype": "${present[0]}" to sluice.json`);
  }
  return present[0] ?? "fp32";
}

/** The ONNX file and JSON configs of a model directory. */
export function locateModelFiles(dir: string): ModelFiles {
  const genai = readJson<GenaiConfig>(join(dir, "genai_config.json"));
  const config = readJson<Record<string, unknown>>(join(dir, "config.json")) ?? {};
  const card = readJson<SluiceGraphCard>(join(dir, "sluice.json"));
  const cardFile = card?.graph?.file;
  const dtype = modelDType(dir);
  const candidates = [
    // Only a path inside the directory: a card cannot point the engine at other files.
    typeof cardFile === "string" && !relative(dir, join(dir, cardFile)).startsWith("..") ? join(dir, cardFile) : null,
    genai?.model?.decoder?.filename ? join(dir, genai.model.decoder.filename) : null,
    ...decoderPaths(dir, dtype),
  ].filter((p): p is string => p !== null);
  const onnxPath = candidates.find((p) => existsSync(p));
  if (!onnxPath) {
    const why = DTYPE_SUFFIX[dtype] ? ` (dtype ${dtype})` : "";
    throw new Error(`no decoder ONNX file${why} (looked for ${candidates.map((c) => c.slice(dir.length + 1)).join(", ")})`);
  }
  return { onnxPath, dtype, config, genai, card };
}

/** Whether the directory's card or genai_config says the graph's past and present share a buffer. */
export function declaresSharedBuffer(files: ModelFiles): boolean {
  return files.card?.graph?.past_present_share_buffer === true || files.genai?.search?.past_present_share_buffer === true;
}

const num = (v: unknown): number | null => (typeof v === "number" && Number.isFinite(v) ? v : null);

function dtypeOf(t: TensorInfo, what: string): KvDType {
  if (t.type === "float32" || t.type === "float16") return t.type;
  throw new Error(`${what} ${t.name} has type ${t.type}; only float32 and float16 are supported`);
}

/**
 * Builds the spec from session metadata; throws with a precise reason when the graph is unusable.
 * `stepLayers`: past key inputs whose layer has step outputs instead of presents (a graph
 * rewritten at load, see split-attention.ts).
 */
export function decoderSpec(files: ModelFiles, inputs: TensorInfo[], outputs: TensorInfo[], stepLayers?: Set<string>): DecoderSpec {
  const gi = files.genai?.model?.decoder?.inputs ?? {};
  const go = files.genai?.model?.decoder?.outputs ?? {};
  const inputByName = new Map(inputs.map((i) => [i.name, i]));
  const outputByName = new Map(outputs.map((o) => [o.name, o]));
  const pick = (names: string[]) => names.find((n) => inputByName.has(n)) ?? null;

  const inputIds = pick([gi.input_ids ?? "input_ids"]);
  const inputsEmbeds = inputIds ? null : pick([gi.inputs_embeds ?? "inputs_embeds"]);
  if (!inputIds && !inputsEmbeds) throw new Error(`the graph has neither input_ids nor inputs_embeds (inputs: ${inputs.map((i) => i.name).join(", ")})`);
  const logitsName = go.logits ?? "logits";
  const logits = outputByName.get(logitsName);
  if (!logits) throw new Error(`the graph has no ${logitsName} output`);

  // Past/present names: genai_config templates ("past_key_values.%d.key") or the HF export names.
  const pastKeyT = gi.past_key_names ?? "past_key_values.%d.key";
  const pastValueT = gi.past_value_names ?? "past_key_values.%d.value";
  const presentKeyT = go.present_key_names ?? "present.%d.key";
  const presentValueT = go.present_value_names ?? "present.%d.value";
  const layers: DecoderSpec["layers"] = [];
  for (let i = 0; ; i++) {
    const names = [pastKeyT, pastValueT, presentKeyT, presentValueT].map((t) => t.replace("%d", String(i)));
    const [pk, pv, ck, cv] = names as [string, string, string, string];
    if (!inputByName.has(pk)) break;
    const presents = stepLayers?.has(pk) || (outputByName.has(ck) && outputByName.has(cv));
    if (!inputByName.has(pv) || !presents) {
      throw new Error(`layer ${i}: expected inputs ${pk}, ${pv} and outputs ${ck}, ${cv}`);
    }
    layers.push({ pastKey: pk, pastValue: pv, presentKey: ck, presentValue: cv });
  }
  if (layers.length === 0) throw new Error(`the graph has no KV cache inputs named like ${pastKeyT}`);

  const first = inputByName.get(layers[0]!.pastKey)!;
  const kvType = dtypeOf(first, "KV input");
  // Vision-language configs keep the language model's sizes under text_config.
  const cfg = { ...((files.config.text_config as Record<string, unknown> | undefined) ?? {}), ...files.config };
  const heads = num(cfg.num_attention_heads);
  const shapeHeads = num(first.shape[1]);
  const shapeDim = num(first.shape[3]);
  const kvHeads = shapeHeads ?? num(files.genai?.model?.decoder?.num_key_value_heads) ?? num(cfg.num_key_value_heads) ?? heads;
  const headDim =
    shapeDim ??
    num(files.genai?.model?.decoder?.head_size) ??
    num(cfg.head_dim) ??
    (num(cfg.hidden_size) && heads ? num(cfg.hidden_size)! / heads : null);
  if (!kvHeads || !headDim) throw new Error("cannot tell the KV heads and head size from the graph or config.json");
  const vocabSize = num(logits.shape[2]) ?? num(files.genai?.model?.vocab_size) ?? num(cfg.vocab_size);
  if (!vocabSize) throw new Error("cannot tell the vocabulary size from the logits shape or config.json");
  const contextLength =
    num(files.genai?.model?.context_length) ?? num(cfg.max_position_embeddings) ?? num(cfg.n_positions) ?? 2048;

  const positionIds = pick([gi.position_ids ?? "position_ids"]);
  const positionRows = positionIds && inputByName.get(positionIds)!.shape.length === 3 ? 3 : 1;
  const sharedBuffer = declaresSharedBuffer(files);
  if (positionRows === 3 && sharedBuffer) {
    throw new Error(
      "the graph takes 3-D (multimodal rotary) position_ids but declares a shared past/present KV buffer: that cache derives positions from sequence lengths and cannot apply them; use a standard-ops export",
    );
  }

  return {
    inputIds,
    inputsEmbeds,
    embedsType: inputsEmbeds ? dtypeOf(inputByName.get(inputsEmbeds)!, "inputs_embeds input") : null,
    attentionMask: pick([gi.attention_mask ?? "attention_mask"]),
    seqlensK: pick([SEQLENS_INPUT]),
    totalLength: pick([TOTAL_LENGTH_INPUT]),
    positionIds,
    positionRows,
    logits: logitsName,
    logitsType: dtypeOf(logits, "logits output"),
    layers,
    kvType,
    kvHeads,
    headDim,
    vocabSize,
    contextLength,
    sharedBuffer,
    maxCacheLength: num(files.card?.graph?.max_cache_length) ?? num(files.genai?.search?.max_length) ?? contextLength,
  };
}
