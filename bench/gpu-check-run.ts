// The run half of bench/gpu-check (read its header first): started by `bench/gpu-check run` on a
// device machine with the staged Bun and node_modules, or here with `--cpu-only`.
//
// Builds two models with the synthetic kit (src/modelkit/synthetic.ts), both GroupQueryAttention
// graphs (the fused variant) in fp16 with the real Qwen3 tokenizer:
// - a random-weight model with Qwen3-0.6B's layer shape and 24 layers: 0.53B parameters, 96 KiB
//   of KV per position;
// - a scripted model (the kit's `script`) whose greedy answer is a fixed chain of 65 tokens.
// Then starts real `sluice serve` processes: --device cpu (the scripted model's 64 greedy tokens,
// a short request to the 0.53B model to show it runs, and its bytes per decode step at ~100
// tokens of context through onnxruntime-node's binding), and --device cuda --ort-binding capi
// --speculate off (the same 64 tokens; decode tok/s at 1, 16 and 64 streams; bytes per decode step
// each way at contexts of ~100 and ~2,000 tokens, from /metrics; device memory, from nvidia-smi).
// The CPU's 0.53B part comes last, being the slowest. Prints one table, and writes it to
// .cache/gpu-check/result.md (and $OUT/gpu-check.md when the device tool's OUT is set), once
// after the GPU half too.
//
//   bun bench/gpu-check-run.ts --cuda-lib-dir DIR    (what bench/gpu-check run does)
//   bun bench/gpu-check-run.ts --cpu-only            (here: the models and the CPU half)
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import OpenAI from "openai";
import { buildSyntheticModel, type SyntheticSpec } from "../src/modelkit/index.ts";
import { TextTokenizer } from "../src/engine/text/tokenizer.ts";
import { machine, median, table } from "./report.ts";
import { freshClients, readMetric, startServerProcess, type ServerProcess } from "./server-process.ts";
import { prose, streamChat, tpot } from "./stream-chat.ts";

const { values } = parseArgs({ args: process.argv.slice(2), options: { "cuda-lib-dir": { type: "string" }, "cpu-only": { type: "boolean" } } });
const CPU_ONLY = values["cpu-only"] ?? false;
const REPO = resolve(import.meta.dir, "..");
const OUT_DIR = join(REPO, ".cache", "gpu-check");
const MODELS = join(OUT_DIR, "models");

const BIG = "gpu-check/qwen3-shape-0.5b";
const SCRIPTED = "gpu-check/scripted";
const BIG_SPEC: SyntheticSpec = {
  preset: "tiny-qwen3",
  id: BIG,
  variant: "fused",
  dtype: "float16",
  seed: 7,
  shape: { hiddenSize: 1024, intermediateSize: 3072, numLayers: 24, numHeads: 16, numKvHeads: 8, headDim: 128, contextLength: 4096, tieWordEmbeddings: true },
};
/** The scripted answer: ordinary vocabulary ids, all different (a bigram table follows each by the next). */
const CHAIN = Array.from({ length: 65 }, (_, i) => 10000 + 97 * i);
const SCRIPTED_SPEC: SyntheticSpec = {
  preset: "tiny-qwen3",
  id: SCRIPTED,
  variant: "fused",
  dtype: "float16",
  shape: { hiddenSize: 256, intermediateSize: 512, numLayers: 2, numHeads: 4, numKvHeads: 2, headDim: 64 },
  // The prompt's last token is the "\n" that opens the assistant's turn.
  script: { chains: [["\n", ...CHAIN, "<|im_end|>"]] },
};
const GREEDY_TOKENS = 64;
const LEVELS: [streams: number, rounds: number][] = [
  [1, 3],
  [16, 2],
  [64, 2],
];
const STREAM_TOKENS = 64;
const CONTEXTS = [100, 2000];

function log(msg: string) {
  console.log(`gpu-check: ${msg}`);
}

async function buildModels(): Promise<void> {
  for (const spec of [SCRIPTED_SPEC, BIG_SPEC]) {
    const dir = join(MODELS, spec.id!.split("/")[1]!);
    if (existsSync(join(dir, "sluice.json"))) continue;
    const t0 = performance.now();
    await buildSyntheticModel(dir, spec);
    log(`built ${spec.id} in ${((performance.now() - t0) / 1000).toFixed(0)} s`);
  }
}

interface Greedy {
  tokens: string[];
  text: string;
  ms: number;
}

/** One greedy completion with the tokens it chose (logprobs), through the openai client. */
async function greedy(client: OpenAI, model: string, maxTokens: number): Promise<Greedy> {
  const t0 = performance.now();
  const r = await client.chat.completions.create({ model, messages: [{ role: "user", content: "Say what you were made to say." }], temperature: 0, max_tokens: maxTokens, logprobs: true });
  const choice = r.choices[0]!;
  return { tokens: (choice.logprobs?.content ?? []).map((t) => t.token), text: choice.message.content ?? "", ms: performance.now() - t0 };
}

const clientOf = (s: ServerProcess) => new OpenAI({ apiKey: s.key, baseURL: `${s.url}/v1`, maxRetries: 0, timeout: 600_000 });

interface GpuMemory {
  name: string;
  driver: string;
  totalMiB: number;
  usedMiB: number;
}

function nvidiaSmi(args: string[]): string[] | null {
  const r = Bun.spawnSync(["nvidia-smi", ...args, "--format=csv,noheader,nounits"], { stdout: "pipe", stderr: "pipe" });
  return r.exitCode === 0 ? r.stdout.toString().trim().split("\n").filter(Boolean) : null;
}

function gpuMemory(): GpuMemory | null {
  const line = nvidiaSmi(["--query-gpu=name,driver_version,memory.total,memory.used"])?.[0];
  if (!line) return null;
  const [name, driver, total, used] = line.split(",").map((s) => s.trim());
  return { name: name!, driver: driver!, totalMiB: Number(total), usedMiB: Number(used) };
}

/** What nvidia-smi says the process uses; null where it lists no processes (some VMs and containers). */
function processMemoryMiB(pid: number): number | null {
  const lines = nvidiaSmi(["--query-compute-apps=pid,used_memory"]) ?? [];
  const mine = lines.map((l) => l.split(",").map((s) => s.trim())).find(([p]) => Number(p) === pid);
  return mine ? Number(mine[1]) : null;
}

interface Counters {
  toDevice: number | null;
  toHost: number | null;
  steps: number | null;
  generated: number;
}

async function counters(server: ServerProcess, model: string): Promise<Counters> {
  return {
    toDevice: await readMetric(server, "sluice_host_device_bytes_total", { model, direction: "to_device" }),
    toHost: await readMetric(server, "sluice_host_device_bytes_total", { model, direction: "to_host" }),
    steps: await readMetric(server, "sluice_decode_steps_total", { model }),
    generated: (await readMetric(server, "sluice_generated_tokens_total", { model })) ?? 0,
  };
}

/** The counters once the server has counted `generated` tokens (its stats reach /metrics a little after the work). */
async function settled(server: ServerProcess, model: string, generated: number): Promise<Counters> {
  for (let i = 0; i < 50; i++) {
    const c = await counters(server, model);
    if (c.generated >= generated) {
      await Bun.sleep(200);
      return counters(server, model);
    }
    await Bun.sleep(100);
  }
  throw new Error(`${model}: /metrics never counted ${generated} generated tokens`);
}

interface StepBytes {
  promptTokens: number;
  toDevice: number | null;
  toHost: number | null;
}

/**
 * Bytes per decode step each way at a context of about `context` tokens. Two requests with
 * prompts of the same length, one generating 8 tokens and one 40 (the end of turn banned): the
 * difference of their counts is 32 tokens' decode steps alone, each request's prompt reading
 * cancelling out. A warm-up request first, so both find the same prefix cache. The 0.53B model, on
 * either server: through onnxruntime-node's binding (the CPU's) every step hands the KV pool over.
 */
async function bytesPerStep(server: ServerProcess, fresh: () => Promise<OpenAI>, eos: number[], context: number): Promise<StepBytes> {
  const words = context - 12;
  const logitBias = Object.fromEntries(eos.map((e) => [e, -100]));
  const before = await counters(server, BIG);
  const warm = await streamChat(await fresh(), BIG, prose(words, 1), 4, { logitBias });
  const c0 = await settled(server, BIG, before.generated + warm.tokens);
  const a = await streamChat(await fresh(), BIG, prose(words, 2), 8, { logitBias });
  const c1 = await settled(server, BIG, c0.generated + a.tokens);
  const b = await streamChat(await fresh(), BIG, prose(words, 3), 40, { logitBias });
  const c2 = await settled(server, BIG, c1.generated + b.tokens);
  const per = (k: "toDevice" | "toHost") => {
    const [x0, x1, x2, s0, s1, s2] = [c0[k], c1[k], c2[k], c0.steps, c1.steps, c2.steps];
    if (x0 === null || x1 === null || x2 === null || s0 === null || s1 === null || s2 === null) return null;
    return (x2 - x1 - (x1 - x0)) / (s2 - s1 - (s1 - s0));
  };
  if (c0.steps !== null && c1.steps !== null && c2.steps !== null) {
    log(`${b.promptTokens}-token prompts: ${c2.steps - c1.steps - (c1.steps - c0.steps)} decode steps counted for the ${b.tokens - a.tokens} tokens between the two requests`);
  }
  return { promptTokens: b.promptTokens, toDevice: per("toDevice"), toHost: per("toHost") };
}

interface Level {
  streams: number;
  tokPerS: number;
  tpotMs: number;
}

/** Aggregate decode tokens/s of `streams` concurrent streams of STREAM_TOKENS tokens each, the median of `rounds`. */
async function level(fresh: () => Promise<OpenAI>, eos: number[], streams: number, rounds: number): Promise<Level> {
  const logitBias = Object.fromEntries(eos.map((e) => [e, -100]));
  const rates: number[] = [];
  const tpots: number[] = [];
  for (let round = 0; round < rounds; round++) {
    const clients = await Promise.all(Array.from({ length: streams }, () => fresh()));
    const t0 = performance.now();
    const results = await Promise.all(clients.map((c, i) => streamChat(c, BIG, prose(8 + (i % 5), i + round), STREAM_TOKENS, { logitBias })));
    const wall = (performance.now() - t0) / 1000;
    rates.push(results.reduce((s, r) => s + r.tokens, 0) / wall);
    tpots.push(...results.map(tpot));
  }
  return { streams, tokPerS: median(rates), tpotMs: median(tpots) };
}

interface CpuSide {
  scripted: Greedy;
  /** The 0.53B model's 4-token request; null until measured (it runs after the GPU half). */
  big: { ms: number; tokens: number } | null;
  /** At the first of CONTEXTS only: a long prompt through the 0.53B model is slow on a CPU. */
  bytes: StepBytes | null;
}

/** The 0.53B model on the CPU: slow, so measured after the GPU half, whose numbers come first. */
async function cpuBig(server: ServerProcess, eos: number[], cpu: CpuSide): Promise<void> {
  const t0 = performance.now();
  const big = await clientOf(server).chat.completions.create({ model: BIG, messages: [{ role: "user", content: "Hello" }], temperature: 0, max_tokens: 4 });
  cpu.big = { ms: performance.now() - t0, tokens: big.usage?.completion_tokens ?? 0 };
  cpu.bytes = await bytesPerStep(server, freshClients(server, "gpu-check-cpu"), eos, CONTEXTS[0]!);
}

interface GpuSide {
  discovery: string;
  scripted: Greedy;
  levels: Level[];
  bytes: StepBytes[];
  memory: { before: GpuMemory | null; loaded: GpuMemory | null; after: GpuMemory | null; serverMiB: number | null };
}

/**
 * The CUDA server, found as an operator's would be (--cuda-lib-dir, no LD_LIBRARY_PATH); if that
 * fails, once more with LD_LIBRARY_PATH, so the rest is still measured and the table says so.
 */
async function startCudaServer(cudaLibDir: string): Promise<{ server: ServerProcess; discovery: string }> {
  const args = ["--ort-binding", "capi", "--cuda-lib-dir", cudaLibDir, "--speculate", "off"];
  let why = "";
  for (const env of [{ LD_LIBRARY_PATH: undefined }, { LD_LIBRARY_PATH: cudaLibDir }]) {
    let server: ServerProcess | null = null;
    try {
      server = await startServerProcess(MODELS, args, { device: "cuda", env });
      // The first request loads the model: where the provider and its libraries are really loaded.
      await greedy(clientOf(server), SCRIPTED, 4);
      const discovery = env.LD_LIBRARY_PATH ? `only with LD_LIBRARY_PATH (without: ${why})` : "--cuda-lib-dir alone";
      return { server, discovery };
    } catch (e) {
      why = (e as Error).message.split("\n")[0]!.slice(0, 300);
      log(`CUDA server${env.LD_LIBRARY_PATH ? " with LD_LIBRARY_PATH" : ""} failed: ${why}`);
      await server?.stop();
    }
  }
  throw new Error(`the CUDA server did not serve: ${why}`);
}

async function gpuSide(cudaLibDir: string, eos: number[]): Promise<GpuSide> {
  const before = gpuMemory();
  log(`CUDA server (--device cuda --ort-binding capi) on ${before?.name ?? "an unnamed GPU"}`);
  const { server, discovery } = await startCudaServer(cudaLibDir);
  try {
    const scripted = await greedy(clientOf(server), SCRIPTED, GREEDY_TOKENS);
    const fresh = freshClients(server, "gpu-check");
    // Loads the 0.53B model and runs every batch shape the levels use once.
    await level(fresh, eos, 16, 1);
    const loaded = gpuMemory();
    const levels: Level[] = [];
    for (const [streams, rounds] of LEVELS) {
      levels.push(await level(fresh, eos, streams, rounds));
      log(`${streams} streams: ${levels.at(-1)!.tokPerS.toFixed(1)} tok/s`);
    }
    const after = gpuMemory();
    const serverMiB = processMemoryMiB(server.pid);
    const bytes: StepBytes[] = [];
    for (const context of CONTEXTS) bytes.push(await bytesPerStep(server, fresh, eos, context));
    return { discovery, scripted, levels, bytes, memory: { before, loaded, after, serverMiB } };
  } finally {
    await server.stop();
  }
}

/** Where two token lists first differ, or -1. */
function firstDifference(a: string[], b: string[]): number {
  for (let i = 0; i < Math.max(a.length, b.length); i++) if (a[i] !== b[i]) return i;
  return -1;
}

const n0 = (x: number | null) => (x === null ? "metric absent" : Math.round(x).toLocaleString("en-US"));

function report(cpu: CpuSide, gpu: GpuSide | null, gpuWhy: string, expected: string): string {
  const notRun = `not run (${gpuWhy})`;
  const cpuAsScripted = cpu.scripted.text === expected;
  const rows: string[][] = [];
  const gpuScripted = gpu
    ? (() => {
        const d = firstDifference(gpu.scripted.tokens, cpu.scripted.tokens);
        return `${gpu.scripted.tokens.length} tokens: ${d < 0 ? "equal to the CPU's" : `NOT equal to the CPU's (first difference at token ${d})`}`;
      })()
    : notRun;
  rows.push([`scripted model: the first ${GREEDY_TOKENS} greedy tokens`, gpuScripted, `${cpu.scripted.tokens.length} tokens: ${cpuAsScripted ? "as scripted" : "NOT as scripted"}`]);
  rows.push(["0.53B model: a request of 4 tokens (loads it)", gpu ? "served (the levels below)" : notRun, cpu.big ? `${cpu.big.tokens} tokens in ${(cpu.big.ms / 1000).toFixed(1)} s` : "not reached"]);
  for (const [streams] of LEVELS) {
    const l = gpu?.levels.find((x) => x.streams === streams);
    rows.push([`decode tok/s, ${streams} stream${streams === 1 ? "" : "s"} of ${STREAM_TOKENS} tokens (median round)`, l ? `${l.tokPerS.toFixed(1)} (TPOT ${l.tpotMs.toFixed(1)} ms)` : notRun, "not measured"]);
  }
  CONTEXTS.forEach((context, i) => {
    const b = gpu?.bytes[i];
    const at = b ? `${b.promptTokens} prompt tokens` : `~${context} tokens`;
    const c = i === 0 ? cpu.bytes : null;
    const cpuAt = c ? ` (CPU: ${c.promptTokens})` : "";
    const cpuCell = (v: number | null | undefined) => (c ? n0(v ?? null) : i === 0 ? "not reached" : "not measured");
    rows.push([`bytes per decode step to the device, context ${at}${cpuAt}`, b ? n0(b.toDevice) : notRun, cpuCell(c?.toDevice)]);
    rows.push([`bytes per decode step to the host, context ${at}${cpuAt}`, b ? n0(b.toHost) : notRun, cpuCell(c?.toHost)]);
  });
  const m = gpu?.memory;
  rows.push([
    "device memory used (nvidia-smi)",
    m?.after
      ? `${m.after.usedMiB} of ${m.after.totalMiB} MiB after the levels (before the server: ${m.before?.usedMiB ?? "?"}; models loaded: ${m.loaded?.usedMiB ?? "?"}; the server process: ${m.serverMiB ?? "not listed"})`
      : gpu
        ? "nvidia-smi did not answer"
        : notRun,
    "—",
  ]);
  const ort = (JSON.parse(readFileSync(join(REPO, "node_modules", "onnxruntime-node", "package.json"), "utf8")) as { version: string }).version;
  const card = gpu?.memory.before ? `${gpu.memory.before.name}, driver ${gpu.memory.before.driver}` : "no GPU";
  return [
    `bench/gpu-check on ${new Date().toISOString().slice(0, 10)}: ${card}; host ${machine()}; ONNX Runtime ${ort}${gpu ? `; CUDA libraries found by ${gpu.discovery}` : ""}.`,
    `Models (src/modelkit/synthetic.ts, fused GroupQueryAttention graphs, fp16, Qwen3 tokenizer): ${BIG} (random weights, Qwen3-0.6B's layers ×24, 0.53B parameters) and ${SCRIPTED} (its greedy answer is a fixed chain). ` +
      `CUDA: \`serve --device cuda --ort-binding capi --speculate off\`; CPU: \`serve --device cpu --ort-binding node\`. Streams are greedy with the end of turn banned, each from a new account; bytes per decode step are sluice_host_device_bytes_total over sluice_decode_steps_total, the difference of a 40-token and an 8-token request at the same prompt length.`,
    "",
    table(["measure", "CUDA", "CPU"], rows),
  ].join("\n");
}

async function main() {
  mkdirSync(MODELS, { recursive: true });
  await buildModels();
  const tok = TextTokenizer.load(join(MODELS, "qwen3-shape-0.5b"));
  const eos = [...tok.eosTokenIds];
  const expected = await TextTokenizer.load(join(MODELS, "scripted")).decode(CHAIN.slice(0, GREEDY_TOKENS));
  log("CPU server (--device cpu --ort-binding node: the JavaScript binding, whose bytes per step are the pool's)");
  const cpuServer = await startServerProcess(MODELS, ["--ort-binding", "node"]);
  let gpu: GpuSide | null = null;
  let gpuWhy = "--cpu-only";
  let cpu: CpuSide;
  try {
    cpu = { scripted: await greedy(clientOf(cpuServer), SCRIPTED, GREEDY_TOKENS), big: null, bytes: null };
    if (!CPU_ONLY) {
      const dir = values["cuda-lib-dir"];
      if (!dir) throw new Error("--cuda-lib-dir DIR is needed (bench/gpu-check run finds it)");
      try {
        gpu = await gpuSide(dir, eos);
      } catch (e) {
        gpuWhy = `failed: ${(e as Error).message.slice(0, 300)}`;
        log(gpuWhy);
      }
      // Written now too: should the CPU's slow half outlast the device call, the GPU's numbers are kept.
      write(report(cpu, gpu, gpuWhy, expected));
    }
    await cpuBig(cpuServer, eos, cpu);
  } finally {
    await cpuServer.stop();
  }
  const text = report(cpu, gpu, gpuWhy, expected);
  console.log(`\n${text}\n`);
  write(text);
  // A check that did not do what it is for fails, so the device call's status says so.
  if (cpu.scripted.text !== expected || (!CPU_ONLY && (!gpu || firstDifference(gpu.scripted.tokens, cpu.scripted.tokens) >= 0))) process.exitCode = 1;
}

function write(text: string): void {
  writeFileSync(join(OUT_DIR, "result.md"), `${text}\n`);
  if (process.env.OUT && existsSync(process.env.OUT)) writeFileSync(join(process.env.OUT, "gpu-check.md"), `${text}\n`);
}

await main();
