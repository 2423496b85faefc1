// Time to first token of a model's first request when it is not loaded (it loads on demand) against
// the same request once it is, for synthetic models of four sizes, through a serve process and the
// openai client. Also the server's resident memory growth when each loads, beside the memory
// budget's estimate of its weights (the size of its ONNX files). Writes `## Cold loads` of
// docs/BENCHMARKS.md.  Run: bun bench/cold-load.ts [--quick]
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { readControlFile } from "../src/control-file.ts";
import type { ModelResidency } from "../src/engine/types.ts";
import { formatBytes } from "../src/format-bytes.ts";
import { buildSyntheticModel, type SyntheticSpec } from "../src/modelkit/index.ts";
import { spawnServe } from "../test/helpers/serve-process.ts";
import { REPO } from "../test/helpers/paths.ts";
import { machine, median, table, writeSection } from "./report.ts";
import { streamChat } from "./stream-chat.ts";

const ROOT = join(REPO, ".cache", "bench-cold-load");
const quick = process.argv.includes("--quick");
const ROUNDS = quick ? 1 : 3;

const MODELS: { id: string; spec: SyntheticSpec }[] = [
  { id: "size/tiny", spec: { preset: "tiny-bytes", variant: "fused", id: "size/tiny" } },
  { id: "size/qwen3-vocab", spec: { preset: "tiny-qwen3", variant: "fused", id: "size/qwen3-vocab" } },
  { id: "size/50m", spec: { preset: "bench-50m", variant: "fused", id: "size/50m" } },
  {
    id: "size/150m",
    spec: {
      preset: "bench-50m",
      variant: "fused",
      id: "size/150m",
      shape: { hiddenSize: 768, intermediateSize: 3072, numLayers: 12, numHeads: 12, numKvHeads: 4, headDim: 64 },
    },
  },
];

function rssBytes(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return Number(m?.[1] ?? 0) * 1024;
}

async function control(data: string, path: string, model?: string): Promise<ModelResidency> {
  const c = readControlFile(data)!;
  const res = await fetch(`${c.url}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${c.token}`, "content-type": "application/json" },
    body: JSON.stringify({ model }),
  });
  const body = (await res.json()) as ModelResidency & { error?: { message: string } };
  if (!res.ok) throw new Error(body.error?.message);
  return body;
}

async function main() {
  const modelsDir = join(ROOT, "models");
  for (const m of MODELS) {
    const dir = join(modelsDir, m.id);
    if (!existsSync(join(dir, "sluice.json"))) {
      console.log(`building ${m.id}`);
      await buildSyntheticModel(dir, m.spec);
    }
  }
  const data = mkdtempSync(join(tmpdir(), "sluice-bench-cold-"));
  const load0 = loadavg()[0]!;
  const server = await spawnServe(["--data", data, "--models", modelsDir, "--no-demo", "--device", "cpu", "--log-level", "error", "--memory-budget", "8G"], { stderr: "inherit" });
  const rows: (string | number)[][] = [];
  try {
    const client = new OpenAI({ apiKey: server.key!, baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 600_000 });
    // The server's own code warmed up on the smallest model first (its first request compiles a lot).
    for (let i = 0; i < 5; i++) await streamChat(client, "size/tiny", "warm up", 8);
    for (const m of MODELS) {
      const cold: number[] = [];
      const warm: number[] = [];
      const loads: number[] = [];
      const growth: number[] = [];
      let weights = 0;
      let kv = 0;
      for (let r = 0; r < ROUNDS; r++) {
        await control(data, "/residency/unload", m.id);
        Bun.gc(true);
        await Bun.sleep(300);
        const before = rssBytes(server.proc.pid);
        cold.push((await streamChat(client, m.id, `a cold question ${r}`, 4)).ttft);
        growth.push(rssBytes(server.proc.pid) - before);
        warm.push((await streamChat(client, m.id, `a warm question ${r}`, 4)).ttft);
        const c = readControlFile(data)!;
        const s = (await (await fetch(`${c.url}/residency`, { headers: { authorization: `Bearer ${c.token}` } })).json()) as { models: ModelResidency[] };
        const info = s.models.find((x) => x.model === m.id)!;
        loads.push(info.lastLoadMs ?? NaN);
        weights = info.weightsBytes;
        kv = info.kvBytes;
      }
      rows.push([
        m.id,
        formatBytes(weights),
        formatBytes(kv),
        median(cold).toFixed(0),
        median(warm).toFixed(0),
        (median(cold) / median(warm)).toFixed(1) + "×",
        median(loads).toFixed(0),
        formatBytes(median(growth)),
        (median(growth) / weights).toFixed(2),
      ]);
      console.log(rows.at(-1)!.join("\t"));
    }
  } finally {
    await server.stop();
    rmSync(data, { recursive: true, force: true });
  }
  const body = [
    `Written by \`bun bench/cold-load.ts${quick ? " --quick" : ""}\` on ${new Date().toISOString().slice(0, 10)}. Machine: ${machine()}; 1-minute load average ${load0.toFixed(1)} at the start, ${loadavg()[0]!.toFixed(1)} at the end. ` +
      `Synthetic models (fused graphs, float32, random weights) in one serve process (\`--memory-budget 8G\`, nothing preloaded). Each round unloads the model (\`models unload\`' route), sends a streamed request of 4 tokens (cold: it waits for the load) and then the same again (warm); ${ROUNDS} round(s), medians, times in ms. ` +
      `RSS growth: the server's resident memory after the cold request minus before it; the memory budget counts the weights as the ONNX file's size (and the KV budget, which is allocated as sequences need it, so little of it shows here).`,
    "",
    table(["model", "weights (ONNX files)", "KV budget", "cold TTFT", "warm TTFT", "cold / warm", "load (server)", "RSS growth", "RSS growth / weights"], rows),
  ].join("\n");
  console.log(body);
  writeSection("Cold loads", body);
}

await main();
