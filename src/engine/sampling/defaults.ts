// A model's own sampling defaults, and how a request's parameters are completed with them.
//
// The api passes on only what the request gave (an omitted temperature, top_p, top_k or min_p is
// undefined). The engine fills each missing one from the model: its generation_config.json (as
// vLLM does with its default `--generation-config auto`), overridden field by field by sluice.json
// `defaults`; what is still missing takes the OpenAI API's default (temperature 1, top_p 1, top_k
// and min_p off). A value the request gives always wins, one field at a time.
//
// Where this differs from vLLM (which reads the same four fields, plus repetition_penalty and
// max_new_tokens, through transformers' GenerationConfig.to_diff_dict):
// - `do_sample: false` means greedy (temperature 0), as in transformers' generate(); vLLM ignores
//   do_sample. Without `do_sample` the file's values apply as written, as in vLLM (transformers'
//   default for a missing do_sample would be greedy, which no chat server does).
// - Values equal to transformers' own defaults (temperature 1, top_k 50, top_p 1) apply as written;
//   vLLM drops them because to_diff_dict compares with those defaults, so a model shipping
//   `top_k: 50` samples without top-k there.
// - repetition_penalty and max_new_tokens are not applied: the OpenAI API has no repetition
//   penalty, and a missing max_tokens means "up to the context" here.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { SamplingDefaults } from "../../protocol/sampling.ts";
import type { SamplingParams } from "../types.ts";

export type { SamplingDefaults } from "../../protocol/sampling.ts";

/** sluice.json `defaults`: the same fields by their request names; false ignores generation_config.json. */
export type SamplingDefaultsCard = false | { temperature?: number; top_p?: number; top_k?: number; min_p?: number };

/** The OpenAI API's defaults, for what neither the request nor the model sets. */
export const API_SAMPLING_DEFAULTS: Readonly<Required<SamplingDefaults>> = { temperature: 1, topP: 1, topK: 0, minP: 0 };

export class SamplingDefaultsError extends Error {
  constructor(message: string) {
    super(`sluice.json "defaults": ${message}`);
    this.name = "SamplingDefaultsError";
  }
}

type Field = keyof SamplingDefaults;

/** Request name → field, with the range a value must lie in (the API's own ranges, top_k any whole number ≥ -1). */
const FIELDS: readonly { key: "temperature" | "top_p" | "top_k" | "min_p"; field: Field; ok: (v: number) => boolean; range: string }[] = [
  { key: "temperature", field: "temperature", ok: (v) => v >= 0 && v <= 2, range: "a number from 0 to 2" },
  { key: "top_p", field: "topP", ok: (v) => v > 0 && v <= 1, range: "a number above 0, at most 1" },
  { key: "top_k", field: "topK", ok: (v) => Number.isInteger(v) && v >= -1, range: "a whole number ≥ -1 (0 and -1: off)" },
  { key: "min_p", field: "minP", ok: (v) => v >= 0 && v <= 1, range: "a number from 0 to 1" },
];

const valid = (f: (typeof FIELDS)[number], v: unknown): v is number => typeof v === "number" && Number.isFinite(v) && f.ok(v);

/**
 * The defaults generation_config.json declares: its temperature, top_p, top_k and min_p, a value
 * out of the API's range left out (the file comes from upstream: one odd field must not stop the
 * model), and temperature 0 where `do_sample` is false.
 */
export function generationConfigDefaults(config: Record<string, unknown> | null): SamplingDefaults {
  const out: SamplingDefaults = {};
  if (!config) return out;
  for (const f of FIELDS) if (valid(f, config[f.key])) out[f.field] = config[f.key] as number;
  if (config.do_sample === false) out.temperature = 0;
  return out;
}

/** sluice.json `defaults` checked: an operator's mistake is refused, naming the field. */
export function cardDefaults(card: unknown): SamplingDefaults | false {
  if (card === undefined || card === null) return {};
  if (card === false) return false;
  if (typeof card !== "object" || Array.isArray(card)) throw new SamplingDefaultsError("must be false or an object with temperature, top_p, top_k and min_p");
  const out: SamplingDefaults = {};
  for (const [key, value] of Object.entries(card)) {
    const f = FIELDS.find((x) => x.key === key);
    if (!f) throw new SamplingDefaultsError(`unknown field ${JSON.stringify(key)} (known: ${FIELDS.map((x) => x.key).join(", ")})`);
    if (!valid(f, value)) throw new SamplingDefaultsError(`${key} must be ${f.range}, not ${JSON.stringify(value)}`);
    out[f.field] = value;
  }
  return out;
}

function readJsonObject(path: string): Record<string, unknown> | null {
  if (!existsSync(path)) return null;
  const value: unknown = JSON.parse(readFileSync(path, "utf8"));
  return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : null;
}

/**
 * The model directory's defaults: generation_config.json's, each field overridden by sluice.json
 * `defaults` (`card`, the card's value). `defaults: false` ignores generation_config.json, so the
 * API's defaults apply (vLLM's `--generation-config vllm`). Throws SamplingDefaultsError for a bad card.
 */
export function modelSamplingDefaults(dir: string, card: unknown): SamplingDefaults {
  const fromCard = cardDefaults(card);
  if (fromCard === false) return {};
  let fromFile: SamplingDefaults = {};
  try {
    fromFile = generationConfigDefaults(readJsonObject(join(dir, "generation_config.json")));
  } catch {
    // An unreadable generation_config.json: the tokenizer reports it where it matters (eos ids).
  }
  return { ...fromFile, ...fromCard };
}

/** The request's sampling with every parameter it left out taken from the model's defaults. */
export function withModelDefaults(params: SamplingParams, defaults: SamplingDefaults): SamplingParams {
  return {
    ...params,
    temperature: params.temperature ?? defaults.temperature,
    topP: params.topP ?? defaults.topP,
    topK: params.topK ?? defaults.topK,
    minP: params.minP ?? defaults.minP,
  };
}

/** Every parameter set: what is still missing takes the OpenAI API's default. */
export function completeSampling(params: SamplingParams): SamplingParams & Required<SamplingDefaults> {
  return {
    ...params,
    temperature: params.temperature ?? API_SAMPLING_DEFAULTS.temperature,
    topP: params.topP ?? API_SAMPLING_DEFAULTS.topP,
    topK: params.topK ?? API_SAMPLING_DEFAULTS.topK,
    minP: params.minP ?? API_SAMPLING_DEFAULTS.minP,
  };
}
