// Writes the model kit's weights as a Hugging Face checkpoint directory (config.json, safetensors,
// single or sharded with model.safetensors.index.json): what tests and benchmarks import.

import { copyFileSync, existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { hfConfigJson, type LlamaConfig } from "../llama/config.ts";
import type { LlamaWeights } from "../llama/weights.ts";
import { FLOAT_DTYPES, type SafetensorsFloat, writeSafetensors } from "./safetensors.ts";
import { checkpointEntries } from "./weights.ts";

export interface HfCheckpointSpec {
  config: LlamaConfig;
  weights: LlamaWeights;
  dtype: SafetensorsFloat;
  /** Split the weights over this many files (default 1: model.safetensors). */
  shards?: number;
  /** Keys merged over (or, when undefined, removed from) the generated config.json. */
  configJson?: Record<string, unknown>;
  /** Files copied in from another directory (tokenizer.json, tokenizer_config.json, ...). */
  copyFrom?: { dir: string; files: string[] };
}

const TORCH_DTYPE: Record<SafetensorsFloat, string> = { F32: "float32", F16: "float16", BF16: "bfloat16" };

export function writeHfCheckpoint(dir: string, spec: HfCheckpointSpec): void {
  mkdirSync(dir, { recursive: true });
  const json: Record<string, unknown> = { ...hfConfigJson(spec.config, "float32"), torch_dtype: TORCH_DTYPE[spec.dtype] };
  for (const [k, v] of Object.entries(spec.configJson ?? {})) {
    if (v === undefined) delete json[k];
    else json[k] = v;
  }
  writeFileSync(join(dir, "config.json"), `${JSON.stringify(json, null, 2)}\n`);
  const entries = checkpointEntries(spec.config, spec.weights, spec.dtype);
  const shards = Math.max(1, Math.min(spec.shards ?? 1, entries.length));
  if (shards === 1) writeSafetensors(join(dir, "model.safetensors"), entries);
  else {
    const bytes = (e: (typeof entries)[number]) => e.values.length * FLOAT_DTYPES[e.dtype];
    const total = entries.reduce((n, e) => n + bytes(e), 0);
    const groups: (typeof entries)[] = Array.from({ length: shards }, () => []);
    let seen = 0;
    for (const e of entries) {
      groups[Math.min(shards - 1, Math.floor((seen / total) * shards))]!.push(e);
      seen += bytes(e);
    }
    const weightMap: Record<string, string> = {};
    groups
      .filter((g) => g.length > 0)
      .forEach((g, i, all) => {
        const name = `model-${String(i + 1).padStart(5, "0")}-of-${String(all.length).padStart(5, "0")}.safetensors`;
        writeSafetensors(join(dir, name), g);
        for (const e of g) weightMap[e.name] = name;
      });
    writeFileSync(join(dir, "model.safetensors.index.json"), `${JSON.stringify({ metadata: { total_size: total }, weight_map: weightMap }, null, 2)}\n`);
  }
  for (const f of spec.copyFrom?.files ?? []) {
    const from = join(spec.copyFrom!.dir, f);
    if (existsSync(from)) copyFileSync(from, join(dir, f));
  }
}
