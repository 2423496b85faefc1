// Finds model directories under the models root and reads what the catalog needs from them.
// Loading the ONNX sessions is the runtime's job; this only reads small JSON files.
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative, sep } from "node:path";
import { isCanonicalModelId } from "../model-ids.ts";
import { isOnnxDType, ONNX_DTYPES, onnxFileName } from "../onnx-dtypes.ts";
import { modelDType } from "./runtime/decoder-spec.ts";
import { modelSamplingDefaults, type SamplingDefaultsCard } from "./sampling/defaults.ts";
import { chatTemplatesOf } from "./text/chat-templates.ts";
import { resolveToolFormat, toolCardProblem } from "./tool-format.ts";
import type { EngineModel, SamplingDefaults } from "./types.ts";

export { isCanonicalModelId, MODEL_ID } from "../model-ids.ts";

export interface ModelCard {
  id?: string;
  display_name?: string;
  context_length?: number;
  description?: string;
  owned_by?: string;
  capabilities?: { tools?: boolean; structured_output?: boolean; images?: boolean };
  /** Which dtype's ONNX files to load when the directory holds several (transformers.js names). */
  dtype?: string;
  /** How long the model stays loaded once idle: seconds, -1 (always), or "30s", "5m", "2h". */
  keep_alive?: number | string;
  /** Sampling defaults over generation_config.json's, or false to ignore that file (sampling/defaults.ts). */
  defaults?: SamplingDefaultsCard;
  /** The tool-call format (protocol/tools.ts) or "none"; absent: detected from the chat template. */
  tool_format?: string;
  /** false: a template with no known tool syntax takes no tools rather than the JSON envelope. */
  tool_fallback?: boolean;
}

export interface DiscoveredModelDir {
  id: string;
  dir: string;
  card: ModelCard;
  config: Record<string, unknown>;
  /** Why the directory cannot be served, when it cannot. */
  problem: string | null;
  /** What the model samples with where a request leaves a parameter out. */
  samplingDefaults: SamplingDefaults;
  /**
   * Changes when the directory is replaced (a pull places a new one under the same name) or its
   * card is edited: a loaded model whose stamp changed is loaded again.
   */
  stamp: string;
}

const MARKERS = ["config.json", "genai_config.json", "sluice.json"];

function readJson(path: string): Record<string, unknown> | null {
  if (!existsSync(path)) return null;
  const value: unknown = JSON.parse(readFileSync(path, "utf8"));
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new Error(`${path} does not hold a JSON object`);
  }
  return value as Record<string, unknown>;
}

function hasOnnx(dir: string): boolean {
  for (const sub of [dir, join(dir, "onnx")]) {
    if (existsSync(sub) && readdirSync(sub).some((f) => f.endsWith(".onnx"))) return true;
  }
  return false;
}

function stampOf(dir: string): string {
  const card = join(dir, "sluice.json");
  return `${statSync(dir).ino}:${existsSync(card) ? statSync(card).mtimeMs : 0}`;
}

function inspect(root: string, dir: string): DiscoveredModelDir {
  const fallbackId = relative(root, dir).split(sep).join("/");
  const stamp = stampOf(dir);
  let card: ModelCard = {};
  let config: Record<string, unknown> = {};
  let samplingDefaults: SamplingDefaults = {};
  try {
    card = (readJson(join(dir, "sluice.json")) ?? {}) as ModelCard;
    config = readJson(join(dir, "config.json")) ?? readJson(join(dir, "genai_config.json")) ?? {};
  } catch (e) {
    return { id: fallbackId, dir, card, config, stamp, samplingDefaults, problem: `unreadable metadata: ${(e as Error).message}` };
  }
  let defaultsProblem: string | null = null;
  try {
    samplingDefaults = modelSamplingDefaults(dir, card.defaults);
  } catch (e) {
    defaultsProblem = (e as Error).message;
  }
  const id = typeof card.id === "string" ? card.id : fallbackId;
  let problem: string | null = null;
  if (!isCanonicalModelId(id)) problem = `model id ${JSON.stringify(id)} is not canonical`;
  else if (!hasOnnx(dir)) problem = "no .onnx file in the directory or its onnx/ folder";
  else if (!existsSync(join(dir, "tokenizer.json"))) problem = "no tokenizer.json";
  else if (card.dtype !== undefined && !isOnnxDType(card.dtype)) problem = `sluice.json's dtype ${JSON.stringify(card.dtype)} is not one of ${ONNX_DTYPES.join(", ")}`;
  else if (defaultsProblem) problem = defaultsProblem;
  else problem = toolCardProblem(card);
  return { id, dir, card, config, stamp, samplingDefaults, problem };
}

/**
 * Every directory below root that holds a model marker file; a model directory's own
 * subdirectories (onnx/ …) are not searched further.
 */
export function discoverModelDirs(root: string): DiscoveredModelDir[] {
  if (!existsSync(root)) return [];
  const found: DiscoveredModelDir[] = [];
  const walk = (dir: string, depth: number) => {
    const entries = readdirSync(dir);
    if (dir !== root && MARKERS.some((m) => entries.includes(m))) {
      found.push(inspect(root, dir));
      return;
    }
    if (depth >= 4) return;
    for (const e of entries.sort()) {
      if (e.startsWith(".")) continue;
      const p = join(dir, e);
      if (statSync(p).isDirectory()) walk(p, depth + 1);
    }
  };
  walk(root, 0);
  const seen = new Map<string, DiscoveredModelDir>();
  for (const m of found) {
    const prior = seen.get(m.id);
    if (prior) m.problem = `duplicate model id ${m.id} (also in ${prior.dir})`;
    else seen.set(m.id, m);
  }
  return found;
}

/** The context length a card or config declares, or the given fallback. */
export function declaredContextLength(m: DiscoveredModelDir, fallback = 2048): number {
  const c = m.card.context_length ?? m.config.max_position_embeddings;
  const search = (m.config.search as { max_length?: number } | undefined)?.max_length;
  const v = typeof c === "number" ? c : typeof search === "number" ? search : fallback;
  return Number.isInteger(v) && v > 0 ? v : fallback;
}

/** Whether the directory holds a vision encoder of its dtype (the engine then accepts images). */
export function hasVisionEncoder(dir: string): boolean {
  let dtype;
  try {
    dtype = modelDType(dir);
  } catch {
    return false;
  }
  const file = onnxFileName("vision_encoder", dtype);
  return existsSync(join(dir, "onnx", file)) || existsSync(join(dir, file));
}

/**
 * The model as its directory declares it, for the catalog before it is loaded: the same rules the
 * loaded model applies where files can tell (images: an encoder is there and the card does not
 * switch them off); the context as declared (a loaded model may report less, and then the
 * catalog is corrected).
 */
export function declaredModel(m: DiscoveredModelDir): EngineModel {
  const caps = m.card.capabilities ?? {};
  return {
    id: m.id,
    displayName: m.card.display_name ?? m.id,
    contextLength: declaredContextLength(m),
    supportsImages: caps.images !== false && hasVisionEncoder(m.dir),
    supportsTools: caps.tools ?? false,
    supportsStructuredOutput: caps.structured_output ?? false,
    toolFormat: declaredToolFormat(m),
    dir: m.dir,
    provider: "not loaded",
    samplingDefaults: m.samplingDefaults,
  };
}

/** The tool format the directory's card and chat template give (null: none, or unreadable). */
function declaredToolFormat(m: DiscoveredModelDir): EngineModel["toolFormat"] {
  try {
    return resolveToolFormat(m.card, chatTemplatesOf(m.dir))?.name ?? null;
  } catch {
    return null;
  }
}
