// Commands beyond the store: importing models and reporting the machine.
import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { isCanonicalModelId } from "../engine/discovery.ts";
// Only these light modules at load: the importers are loaded by the commands that run them.
import { GGUF_ARCHITECTURES } from "../modelkit/gguf/config.ts";
import type { GgufImportDType } from "../modelkit/gguf/import.ts";
import { SUPPORTED_ARCHITECTURES } from "../modelkit/hf/config.ts";
import type { HfImportDType } from "../modelkit/index.ts";
import { doctorReport } from "./doctor.ts";
import { ORT_BINDING_OPTION, parseOrtBinding } from "./engine-options.ts";
import { configureNative } from "../packaging/native.ts";
import { inspectPostgres, openPostgresStore } from "../store/index.ts";
import { redactUrl } from "../store/postgres-db.ts";
import { DATA_OPTION, DATABASE_OPTION, databaseOf } from "./commands.ts";
import { positional, requireString, UsageError, type Command, type CommandArgs, type OptionSpec } from "./framework.ts";
import { AUTO_DEVICE_OPTION, deviceFor } from "./pull-command.ts";

const IMPORT_OUT_OPTION: OptionSpec = { name: "out", type: "string", help: "Output directory, which must not exist yet (put it under the models directory to serve it)", argument: true };

/** An import command's --id (a canonical model id), --out, --dtype (one of `dtypes`) and --context. */
function importTarget(args: CommandArgs, dtypes: readonly string[]): { id: string; out: string; dtype: string; contextLength: number | undefined } {
  const id = requireString(args, "id");
  if (!isCanonicalModelId(id)) throw new UsageError(`--id ${JSON.stringify(id)} is not a canonical model id (letters, digits, '.', '_', '-' in '/'-separated segments)`);
  const dtype = String(args.values.dtype);
  if (!dtypes.includes(dtype)) throw new UsageError(`--dtype must be one of ${dtypes.join(", ")}`);
  let contextLength: number | undefined;
  if (typeof args.values.context === "string" && args.values.context !== "") {
    contextLength = Number(args.values.context);
    if (!Number.isInteger(contextLength) || contextLength <= 0) throw new UsageError("--context must be a positive integer");
  }
  return { id, out: resolve(requireString(args, "out")), dtype, contextLength };
}

export const extraCommands: Command[] = [
  {
    path: ["models", "import", "llama2c"],
    usage: "CHECKPOINT TOKENIZER --id ID --out DIR",
    summary:
      "Import a llama2.c checkpoint (.bin) and tokenizer (.bin) as a model directory (ONNX graph, tokenizer.json, chat template).",
    options: [
      { name: "id", type: "string", help: "Model id, e.g. karpathy/stories260k", argument: true },
      { name: "out", type: "string", help: "Output directory (put it under the models directory to serve it)", argument: true },
      { name: "variant", type: "string", help: "standard (any execution provider) or fused (ONNX Runtime contrib ops)", default: "fused", argument: true },
      { name: "dtype", type: "string", help: "float32 or float16 weights", default: "float32", argument: true },
    ],
    async run(args) {
      const checkpoint = positional(args, 0, "CHECKPOINT");
      const tokenizer = positional(args, 1, "TOKENIZER");
      for (const f of [checkpoint, tokenizer]) if (!existsSync(f)) throw new UsageError(`no such file: ${f}`);
      const variant = String(args.values.variant);
      if (variant !== "standard" && variant !== "fused") throw new UsageError("--variant must be standard or fused");
      const dtype = String(args.values.dtype);
      if (dtype !== "float32" && dtype !== "float16") throw new UsageError("--dtype must be float32 or float16");
      const outDir = resolve(requireString(args, "out"));
      const { importLlama2c } = await import("../modelkit/index.ts");
      await importLlama2c(checkpoint, tokenizer, { id: requireString(args, "id"), outDir, variant, dtype });
      console.log(`wrote ${outDir}`);
      return 0;
    },
  },
  {
    path: ["models", "import", "hf"],
    usage: "DIR --id ID --out OUT [--dtype fp32|fp16|q4|q4f16]",
    summary:
      `Import a Hugging Face checkpoint directory (config.json, *.safetensors, tokenizer.json; ${SUPPORTED_ARCHITECTURES.join(", ")}) as a model directory on the engine's fast path, with float32, float16 or 4-bit weights.`,
    options: [
      { name: "id", type: "string", help: "Model id, e.g. qwen/qwen3-0.6b-q4", argument: true },
      IMPORT_OUT_OPTION,
      {
        name: "dtype",
        type: "string",
        help: "fp32, fp16, q4 (4-bit weights in blocks of 32, float32 activations: the CPU choice) or q4f16 (4-bit weights, float16 activations: for CUDA)",
        default: "fp32",
        argument: true,
      },
      { name: "context", type: "string", help: "Serve at most this many positions (default: the checkpoint's max_position_embeddings)", argument: true },
    ],
    async run(args) {
      const dir = positional(args, 0, "DIR");
      if (!existsSync(dir)) throw new UsageError(`no such directory: ${dir}`);
      const { HF_IMPORT_DTYPES, importHfCheckpoint } = await import("../modelkit/index.ts");
      const { id, out, dtype, contextLength } = importTarget(args, HF_IMPORT_DTYPES);
      await importHfCheckpoint({ dir, out, id, dtype: dtype as HfImportDType, contextLength, log: (line) => console.error(line) });
      console.log(`wrote ${out}`);
      return 0;
    },
  },
  {
    path: ["models", "import", "gguf"],
    usage: "FILE --id ID --out DIR [--dtype fp32|fp16|q4|q4f16|auto]",
    summary:
      `Import a GGUF file (llama.cpp's and Ollama's format; architectures ${Object.keys(GGUF_ARCHITECTURES).join(", ")}; F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K weights; a split model from any of its parts) as a model directory on the engine's fast path, with its tokenizer and chat template.`,
    options: [
      { name: "id", type: "string", help: "Model id, e.g. qwen/qwen3-0.6b-q4_k_m", argument: true },
      IMPORT_OUT_OPTION,
      {
        name: "dtype",
        type: "string",
        help: "fp32, fp16, q4 (4-bit weights in blocks of 32, float32 activations), q4f16 (4-bit weights, float16 activations), or auto: the file's precision class (4- and 5-bit types: q4, q4f16 on CUDA; others: fp32, fp16 on CUDA)",
        default: "auto",
        argument: true,
      },
      AUTO_DEVICE_OPTION,
      { name: "context", type: "string", help: "Serve at most this many positions (default: the file's context_length)", argument: true },
    ],
    async run(args) {
      const file = positional(args, 0, "FILE");
      if (!existsSync(file)) throw new UsageError(`no such file: ${file}`);
      const { GGUF_IMPORT_DTYPES, importGguf } = await import("../modelkit/gguf/import.ts");
      const { id, out, dtype, contextLength } = importTarget(args, GGUF_IMPORT_DTYPES);
      const device = dtype === "auto" ? await deviceFor(String(args.values.device)) : "cpu";
      await importGguf({ file, out, id, dtype: dtype as GgufImportDType, device, contextLength, log: (line) => console.error(line) });
      console.log(`wrote ${out}`);
      return 0;
    },
  },
  {
    path: ["doctor"],
    usage: "",
    summary:
      "Report the version, platform, native libraries, execution providers (and why not), CUDA libraries, directories, models, and with --database the shared database and its live nodes.",
    options: [
      DATA_OPTION,
      DATABASE_OPTION,
      { name: "models", type: "string", help: "Models directory", default: "./models" },
      { name: "device", type: "string", help: "The device serve would be given: auto, cuda or cpu", default: "auto" },
      { ...ORT_BINDING_OPTION, help: "The binding serve would be given: capi or node (see serve --help)" },
      { name: "cuda-lib-dir", type: "string", help: "Directory holding the CUDA provider and CUDA libraries (see docs/GPU.md)" },
      { name: "cache-dir", type: "string", help: "Where the binary unpacks its native libraries (default ~/.cache/sluice)" },
    ],
    async run(args) {
      const device = String(args.values.device);
      if (device !== "auto" && device !== "cuda" && device !== "cpu") throw new UsageError("--device must be auto, cuda or cpu");
      const str = (v: string | boolean | undefined) => (typeof v === "string" && v !== "" ? v : undefined);
      configureNative({ cacheDir: str(args.values["cache-dir"]), cudaLibDir: str(args.values["cuda-lib-dir"]) });
      const binding = parseOrtBinding(args);
      const report = doctorReport({ dataDir: String(args.values.data), modelsDir: String(args.values.models), device, binding });
      const database = databaseOf(args);
      if (database) {
        const db = await databaseReport(database);
        report.lines.push(...db.lines);
        report.ok &&= db.ok;
      }
      console.log(report.lines.join("\n"));
      return report.ok ? 0 : 1;
    },
  },
];

/** The shared database (reachable, server, schema) and the nodes whose heartbeat is live, with their models. */
async function databaseReport(url: string): Promise<{ lines: string[]; ok: boolean }> {
  const where = redactUrl(url);
  const db = await inspectPostgres(url);
  if (!db.reachable) return { lines: [`database: ${where}: NOT reachable: ${db.error}`], ok: false };
  const lines = [`database: ${where} (${db.server}; schema version ${db.schemaVersion} of ${db.current})`];
  if (db.schemaVersion > db.current) return { lines: [...lines, "  newer than this build understands: use a newer sluice"], ok: false };
  if (db.schemaVersion < db.current) return { lines: [...lines, "  not migrated yet: the first `sluice serve --database` brings it up to date"], ok: true };
  const store = await openPostgresStore(url);
  try {
    const nodes = await store.nodes.live();
    lines.push(`live nodes: ${nodes.length}${nodes.length ? "" : " (none: start one with sluice serve --database)"}`);
    const now = Date.now();
    for (const n of nodes) {
      const models = n.models.map((m) => `${m.id} (queue ${m.queueDepth})`).join(", ") || "no models";
      lines.push(`  ${n.id} at ${n.url}, sluice ${n.version}, heartbeat ${Math.max(0, (now - n.heartbeatAt) / 1000).toFixed(1)} s ago: ${models}`);
    }
    return { lines, ok: true };
  } finally {
    await store.close();
  }
}
