// Commands beyond the store: importing models and reporting the machine.
import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import { discoverModelDirs } from "../engine/discovery.ts";
import { checkCudaLibraries, chooseProviders, onnxRuntimeLibDir } from "../engine/providers.ts";
import { importLlama2c } from "../modelkit/index.ts";
import { VERSION } from "../version.ts";
import { DATA_OPTION } from "./commands.ts";
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
    summary: "Report the version, platform, execution providers, CUDA libraries, directories and models.",
    options: [DATA_OPTION, { name: "models", type: "string", help: "Models directory", default: "./models" }],
    run(args) {
      const out: string[] = [];
      out.push(`sluice ${VERSION}`, `platform: ${process.platform}-${process.arch}, bun ${Bun.version}`);
      const libDir = onnxRuntimeLibDir();
      out.push(`onnx runtime libraries: ${libDir}`);
      const auto = chooseProviders("auto", libDir);
      out.push(`execution providers: ${auto.providers.join(", ")}`);
      if (auto.cudaUnavailable) out.push(`  cuda: unavailable: ${auto.cudaUnavailable}`);
      out.push("cuda libraries:");
      for (const c of checkCudaLibraries(libDir)) {
        out.push(`  ${c.found ? "found  " : "missing"} ${c.role.padEnd(30)} ${c.name}${c.found ? "" : `: ${c.detail}`}`);
      }
      const data = resolve(String(args.values.data));
      out.push(`data directory: ${data} (${existsSync(join(data, "sluice.db")) ? "database present" : "no database yet"})`);
      const models = resolve(String(args.values.models));
      const found = discoverModelDirs(models);
      out.push(`models directory: ${models} (${found.length} model${found.length === 1 ? "" : "s"})`);
      for (const m of found) {
        out.push(`  ${m.id}: ${m.problem ? `not servable: ${m.problem}` : `would run on ${auto.providers[0]}`} (${m.dir})`);
      }
      console.log(out.join("\n"));
      return 0;
    },
  },
];
