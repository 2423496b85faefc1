// serve's flags for the engine's protections: what compiling one request's schemas may cost,
// the grammar cache, and the supervision of model workers (each also read from SLUICE_<NAME>).
import type { CreateEngineOptions } from "../engine/index.ts";
import { DEFAULT_GRAMMAR_CACHE_BYTES, DEFAULT_SUPERVISION } from "../engine/supervision-defaults.ts";
// The budget's own module: the structured room's entry would load the whole compiler.
import { DEFAULT_COMPILE_LIMITS } from "../structured/compile-budget.ts";
import { DEFAULT_ORT_BINDING, isOrtBinding, ORT_BINDINGS, type OrtBinding } from "../engine/ort-binding.ts";
import { UsageError, type CommandArgs, type OptionSpec } from "./framework.ts";

/** serve's and doctor's --ort-binding. */
export const ORT_BINDING_OPTION: OptionSpec = {
  name: "ort-binding",
  type: "string",
  help: "How ONNX Runtime is called on the CPU: capi (its C API; the KV cache stays in the execution provider's memory) or node (onnxruntime-node's JavaScript binding, which hands the cache to every run). CUDA always uses capi",
  default: DEFAULT_ORT_BINDING,
};

export function parseOrtBinding(args: CommandArgs): OrtBinding {
  const v = args.values["ort-binding"];
  if (!isOrtBinding(v)) throw new UsageError(`--ort-binding must be ${ORT_BINDINGS.join(" or ")}`);
  return v;
}

const L = DEFAULT_COMPILE_LIMITS;
const S = DEFAULT_SUPERVISION;

export const ENGINE_OPTIONS: OptionSpec[] = [
  { name: "max-schema-states", type: "string", help: "Grammar states one request's schemas may compile to (each costs 1 KiB); more: 400 schema_too_complex", default: String(L.maxStates) },
  { name: "max-schema-bytes", type: "string", help: "Characters of JSON in one request's schemas (response_format, or all tools)", default: String(L.maxSchemaBytes) },
  { name: "max-schema-depth", type: "string", help: "Nesting of objects and arrays in a schema, of $ref chains and of pattern groups", default: String(L.maxDepth) },
  { name: "max-schema-repeat", type: "string", help: "Largest count in a schema: a pattern's {n,m}, minLength, maxLength", default: String(L.maxRepeat) },
  { name: "max-schema-pattern-length", type: "string", help: "Characters in one pattern", default: String(L.maxPatternLength) },
  { name: "max-schema-seconds", type: "string", help: "CPU time to compile one request's schemas and prepare their token budgets (on the model's compile thread, at low priority; with more schemas compiling at once than cores, each gets this × cores / compiling)", default: String(L.maxMillis / 1000) },
  { name: "grammar-cache-mb", type: "string", help: "Memory for each model's compiled grammars, reused by requests with the same schema", default: String(DEFAULT_GRAMMAR_CACHE_BYTES / 2 ** 20) },
  { name: "worker-stall-seconds", type: "string", help: "A model worker that answers nothing this long while requests wait is restarted", default: String(S.stallMs / 1000) },
  { name: "crash-loop-crashes", type: "string", help: "Worker crashes within --crash-loop-seconds that make a model unavailable (503) for a growing pause", default: String(S.crashLoopCrashes) },
  { name: "crash-loop-seconds", type: "string", help: "The window of --crash-loop-crashes", default: String(S.crashLoopWindowMs / 1000) },
];

function positive(args: CommandArgs, name: string, integer: boolean): number {
  const v = Number(args.values[name]);
  if (!Number.isFinite(v) || v <= 0 || (integer && !Number.isInteger(v))) {
    throw new UsageError(`--${name} must be ${integer ? "an integer" : "a number"} > 0`);
  }
  return v;
}

export function parseEngineOptions(args: CommandArgs): Pick<CreateEngineOptions, "compileLimits" | "grammarCacheBytes" | "supervision"> {
  return {
    compileLimits: {
      maxStates: positive(args, "max-schema-states", true),
      maxSchemaBytes: positive(args, "max-schema-bytes", true),
      maxDepth: positive(args, "max-schema-depth", true),
      maxRepeat: positive(args, "max-schema-repeat", true),
      maxPatternLength: positive(args, "max-schema-pattern-length", true),
      maxMillis: Math.round(positive(args, "max-schema-seconds", false) * 1000),
    },
    grammarCacheBytes: Math.round(positive(args, "grammar-cache-mb", false) * 2 ** 20),
    supervision: {
      stallMs: Math.round(positive(args, "worker-stall-seconds", false) * 1000),
      crashLoopCrashes: positive(args, "crash-loop-crashes", true),
      crashLoopWindowMs: Math.round(positive(args, "crash-loop-seconds", false) * 1000),
    },
  };
}
