// Commands beyond the store: importing models and reporting the machine.
import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { importLlama2c } from "../modelkit/index.ts";
import { doctorReport } from "../packaging/doctor.ts";
import { configureNative } from "../packaging/native.ts";
import { inspectPostgres, openPostgresStore } from "../store/index.ts";
import { redactUrl } from "../store/postgres-db.ts";
import { DATA_OPTION, DATABASE_OPTION, databaseOf } from "./commands.ts";
import { positional, requireString, UsageError, type Command } from "./framework.ts";

export const extraCommands: Command[] = [
  {
    path: ["models", "import", "llama2c"],
    usage: "CHECKPOINT TOKENIZER --id ID --out DIR",
    summary:
      "Import a llama2.c checkpoint (.bin) and tokenizer (.bin) as a model directory (ONNX graph, tokenizer.json, chat template).",
    options: [
      { name: "id", type: "string", help: "Model id, e.g. karpathy/stories260k" },
      { name: "out", type: "string", help: "Output directory (put it under the models directory to serve it)" },
      { name: "variant", type: "string", help: "standard (any execution provider) or fused (ONNX Runtime contrib ops)", default: "fused" },
      { name: "dtype", type: "string", help: "float32 or float16 weights", default: "float32" },
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
      await importLlama2c(checkpoint, tokenizer, { id: requireString(args, "id"), outDir, variant, dtype });
      console.log(`wrote ${outDir}`);
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
      { name: "cuda-lib-dir", type: "string", help: "Directory holding the CUDA provider and CUDA libraries (see docs/GPU.md)" },
      { name: "cache-dir", type: "string", help: "Where the binary unpacks its native libraries (default ~/.cache/sluice)" },
    ],
    async run(args) {
      const device = String(args.values.device);
      if (device !== "auto" && device !== "cuda" && device !== "cpu") throw new UsageError("--device must be auto, cuda or cpu");
      const str = (v: string | boolean | undefined) => (typeof v === "string" && v !== "" ? v : undefined);
      configureNative({ cacheDir: str(args.values["cache-dir"]), cudaLibDir: str(args.values["cuda-lib-dir"]) });
      const report = doctorReport({ dataDir: String(args.values.data), modelsDir: String(args.values.models), device });
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
