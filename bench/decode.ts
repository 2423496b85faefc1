// Single-stream decode speed and time to first token: Sluice's engine through its HTTP API (the
// openai client, streaming) side by side with transformers.js on the same model directory, in the
// same run. Also the engine's own per-token work at a 151k vocabulary against the model's run time.
//
//   bun bench/decode.ts [--tokens 128] [--runs 9] [--quick]
//   bun bench/decode.ts --engine-only   (only the per-token engine work; rewrites just its table)
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import OpenAI from "openai";
import { parseArgs } from "node:util";
import { buildSyntheticModel, importLlama2c } from "../src/modelkit/index.ts";
import { startServerProcess, threadsCpu } from "./server-process.ts";
import { TextTokenizer } from "../src/engine/text/tokenizer.ts";
import { createSampler, DEFAULT_SAMPLING } from "../src/engine/sampling/index.ts";
import { StopMatcher } from "../src/engine/text/stop.ts";
import { BENCHMARKS_MD, machine, median, rotated, table, writeSection } from "./report.ts";
import type { SamplingParams } from "../src/engine/types.ts";
import type { Measure } from "./in-process-engine.ts";
import { RunnerProcess, type RunnerSpec } from "./runner-process.ts";
import { streamChat } from "./stream-chat.ts";
import { rawReadMs, weightFloor, type WeightFloor } from "./weight-floor.ts";
import { modelFileBytes } from "../src/engine/runtime/decoder.ts";
import { NodeDecoder } from "../src/engine/runtime/node-decoder.ts";

const { values } = parseArgs({
  options: {
    tokens: { type: "string", default: "128" },
    runs: { type: "string", default: "9" },
    quick: { type: "boolean" },
    "engine-only": { type: "boolean" },
  },
});
const TOKENS = Number(values.tokens);
const RUNS = values.quick ? 2 : Number(values.runs);
const ROOT = resolve(import.meta.dir, "../.cache/bench-models");
const STORIES = resolve(import.meta.dir, "../../shared/models/stories260k");

interface Target {
  label: string;
  /** Directory name under ROOT for each variant. */
  dirs: { fused: string; standard: string };
  prompt: string;
  /**
   * Untimed runs of each runner first. Bun's JIT keeps tiering the server's per-token code up for
   * a couple of thousand tokens, and transformers.js's in-process code likewise: a small model,
   * whose tokens take a fraction of a millisecond, is compared at its steady state on both sides.
   */
  warmRuns: number;
}

async function prepare(): Promise<Target[]> {
  mkdirSync(ROOT, { recursive: true });
  const targets: Target[] = [];
  if (existsSync(join(STORIES, "stories260K.bin"))) {
    for (const variant of ["fused", "standard"] as const) {
      const out = join(ROOT, `stories260k-${variant}`);
      if (!existsSync(join(out, "sluice.json"))) {
        await importLlama2c(join(STORIES, "stories260K.bin"), join(STORIES, "tok512.bin"), { id: `bench/stories260k-${variant}`, outDir: out, variant });
      }
    }
    targets.push({ label: "stories260K", dirs: { fused: "stories260k-fused", standard: "stories260k-standard" }, prompt: "Once upon a time", warmRuns: values.quick ? 2 : 250 });
  } else console.warn(`stories260K absent at ${STORIES}: skipped`);
  for (const variant of ["fused", "standard"] as const) {
    const out = join(ROOT, `bench-50m-${variant}`);
    if (!existsSync(join(out, "sluice.json"))) await buildSyntheticModel(out, { preset: "bench-50m", variant, id: `bench/bench-50m-${variant}` });
  }
  targets.push({ label: "synthetic ~50M (vocab 32k)", dirs: { fused: "bench-50m-fused", standard: "bench-50m-standard" }, prompt: "The quick brown fox jumps over the lazy dog", warmRuns: 2 });
  return targets;
}

interface EngineWork {
  modelMs: number;
  /** [label, µs per token] for each sampling setting. */
  sampling: [string, number][];
  detokUs: number;
  /** CPU of the server's HTTP thread per streamed token (SSE chunk, worker message). */
  streamUs: number;
}

/** CPU time (µs) the server's main (HTTP) thread has used. */
const httpThreadCpuUs = (pid: number) => threadsCpu(pid).find((t) => t.tid === pid)!.cpuNs / 1000;

/** The HTTP thread's CPU per token while the server streams a long greedy completion. */
async function streamingCostUs(dir: string, eos: number[]): Promise<number> {
  const models = mkdtempSync(join(tmpdir(), "sluice-bench-stream-"));
  symlinkSync(dir, join(models, "wide"));
  const server = await startServerProcess(models);
  try {
    // Each request from a new account: none is drafted from the other's answer (see in-process-engine.ts).
    const keys = await server.newAccountKeys("stream", 2);
    const logitBias = Object.fromEntries(eos.map((e) => [e, -100]));
    const run = async () => {
      const client = new OpenAI({ apiKey: keys.pop()!, baseURL: `${server.url}/v1`, maxRetries: 0 });
      return (await streamChat(client, "bench/tiny-qwen3-wide", "Tell me a story.", 256, { logitBias })).tokens;
    };
    await run();
    const before = httpThreadCpuUs(server.pid);
    const tokens = await run();
    return (httpThreadCpuUs(server.pid) - before) / tokens;
  } finally {
    await server.stop();
    rmSync(models, { recursive: true, force: true });
  }
}

/** Sampling settings whose per-token cost the table reports. */
const SETTINGS: [string, Partial<SamplingParams>, number][] = [
  ["greedy sampling", { temperature: 0 }, 0],
  ["temperature 1", {}, 0],
  ["temperature 0.7 + top_p 0.9", { temperature: 0.7, topP: 0.9 }, 0],
  ["top_k 40 + top_p 0.95 + min_p 0.05", { topK: 40, topP: 0.95, minP: 0.05 }, 0],
  ["top_p 0.9 + presence/frequency penalties + logit_bias", { topP: 0.9, presencePenalty: 0.5, frequencyPenalty: 0.5, logitBias: { 100: 2, 200: -100 } }, 0],
  ["temperature 0.7 + top_p 0.9 + logprobs (top 5)", { temperature: 0.7, topP: 0.9 }, 5],
];

async function overheadAt151k(): Promise<EngineWork> {
  const dir = join(ROOT, "tiny-qwen3-wide");
  if (!existsSync(join(dir, "sluice.json"))) {
    await buildSyntheticModel(dir, { preset: "tiny-qwen3", id: "bench/tiny-qwen3-wide", variant: "fused", shape: { hiddenSize: 256, intermediateSize: 768, numLayers: 4, numHeads: 4, numKvHeads: 2, headDim: 64 } });
  }
  const d = await NodeDecoder.create(dir, { providers: ["cpu"], threads: 0 });
  const tok = TextTokenizer.load(dir);
  const kv = d.emptyCache();
  let logits = await d.forward([1, 2, 3, 4, 5, 6, 7, 8], kv);
  const rows: Float32Array[] = [];
  // Measured as the sampling below is: the best of five rounds (of 12 steps) after an untimed one.
  let modelMs = Infinity;
  for (let round = 0; round < 6; round++) {
    const t0 = performance.now();
    for (let i = 0; i < 12; i++) {
      rows.push(logits);
      logits = await d.forward([100 + rows.length], kv);
    }
    if (round > 0) modelMs = Math.min(modelMs, (performance.now() - t0) / 12);
  }
  // Steady state, as in a long generation: one untimed round first, so the JIT has compiled
  // the loops; then the best of five timed rounds (the machine may be shared).
  const time = (fn: (l: Float32Array, i: number) => void) => {
    rows.forEach(fn);
    let best = Infinity;
    for (let round = 0; round < 5; round++) {
      const t = performance.now();
      for (let r = 0; r < 2; r++) rows.forEach(fn);
      best = Math.min(best, ((performance.now() - t) / (rows.length * 2)) * 1000);
    }
    return best;
  };
  const counts = new Map<number, number>();
  for (let i = 0; i < 200; i++) counts.set(1000 + i * 17, 1 + (i % 4));
  const sampling: [string, number][] = SETTINGS.map(([label, p, topLogprobs]) => {
    const s = createSampler({ ...DEFAULT_SAMPLING, seed: 1, ...p }, tok.vocabSize);
    const penalised = p.presencePenalty !== undefined;
    return [
      label,
      time((l) => {
        const id = s.sample(l, penalised ? counts : null);
        if (topLogprobs > 0) s.logprobs(l, id, topLogprobs);
      }),
    ];
  });
  const detok = tok.createDetokenizer();
  const stop = new StopMatcher(["\n\nUser:"]);
  const detokUs = time((_l, i) => stop.push(detok.push(1000 + i)));
  await d.release();
  const streamUs = await streamingCostUs(dir, [...tok.eosTokenIds]);
  return { modelMs, sampling, detokUs, streamUs };
}

const ENGINE_WORK_INTRO = "The engine's own per-token work against one model step at a 151k vocabulary";

/** The paragraph and table of the engine's per-token work (the end of the Decode section). */
function engineWorkText(o: EngineWork): string {
  const stepUs = o.modelMs * 1000;
  const share = (us: number, digits: number) => `${((us / stepUs) * 100).toFixed(digits)}%`;
  const overhead = table(
    ["vocab 151,936", "µs per token", "share of the model step"],
    [
      ["model step (4 layers, hidden 256, fused)", stepUs.toFixed(0), "100%"],
      ...o.sampling.map(([label, us]) => [label, us.toFixed(0), share(us, 1)]),
      ["detokenise + stop strings", o.detokUs.toFixed(1), share(o.detokUs, 2)],
      ["streaming: the HTTP thread's CPU per token (SSE)", o.streamUs.toFixed(0), share(o.streamUs, 1)],
    ],
  );
  console.log(overhead);
  return (
    `${ENGINE_WORK_INTRO} (tiny-qwen3 widened; model step measured on ONNX Runtime directly, the best of five rounds of 12 steps after an untimed one; sampling on that model's ` +
    `own logits, steady state after one untimed round, best of five; streaming is the server's HTTP thread's CPU time (from /proc's schedstat) ` +
    `over a streamed 256-token greedy completion of the same model through the openai client; ${new Date().toISOString().slice(0, 10)}, ` +
    `1-minute load average ${loadavg()[0]!.toFixed(1)} on ${cpus().length} cores; ` +
    "`bun bench/decode.ts --engine-only` refreshes just this table):\n\n" +
    overhead
  );
}

/** Rewrites only the engine-work part of the Decode section, keeping the speed table above it. */
async function engineOnly(): Promise<void> {
  const text = existsSync(BENCHMARKS_MD) ? readFileSync(BENCHMARKS_MD, "utf8") : "";
  const section = /## Decode \(bench\/decode\.ts\)\n([\s\S]*?)(?=\n## |$)/.exec(text)?.[1] ?? "";
  const at = section.indexOf(ENGINE_WORK_INTRO);
  const before = at >= 0 ? section.slice(0, at) : section;
  writeSection("Decode (bench/decode.ts)", `${before.trim()}\n\n${engineWorkText(await overheadAt151k())}\n`);
}

async function main() {
  const targets = await prepare();

  const server = await startServerProcess(ROOT);
  const baseURL = `${server.url}/v1`;
  const rows: (string | number)[][] = [];
  const floorRows: (string | number)[][] = [];
  try {
    for (const t of targets) {
      const tok = TextTokenizer.load(join(ROOT, t.dirs.standard));
      const eos = [...tok.eosTokenIds];
      // The same prompt ids for both: the engine renders the chat template, so feed transformers.js that.
      const { renderChatPrompt } = await import("../src/engine/text/chat-template.ts");
      const promptIds = await tok.encode(renderChatPrompt(tok, [{ role: "user", content: t.prompt }]));
      // Each run from a new account: the same prompt again would be drafted from its earlier answer
      // (see in-process-engine.ts); the in-process engine does the same by default.
      const http = async (variant: string): Promise<RunnerSpec> => ({ kind: "http", baseURL, key: server.key, keys: await server.newAccountKeys(variant, t.warmRuns + RUNS), model: `bench/${variant}`, prompt: t.prompt, eos, tokens: TOKENS });
      const tjs = (threads: number): RunnerSpec => ({ kind: "transformers", root: ROOT, dir: t.dirs.standard, promptIds, threads, tokens: TOKENS });
      // Each runner in a process of its own (see runner-process.ts).
      const runners: [string, RunnerProcess][] = [];
      for (const [name, spec] of [
        ["sluice engine in-process, fused", { kind: "engine", dir: join(ROOT, t.dirs.fused), id: `bench/${t.dirs.fused}`, prompt: t.prompt, eos, tokens: TOKENS }],
        ["sluice fused", await http(t.dirs.fused)],
        ["sluice standard", await http(t.dirs.standard)],
        ["transformers.js", tjs(0)],
        ["transformers.js, 1 thread", tjs(1)],
      ] as [string, RunnerSpec][]) runners.push([name, await RunnerProcess.start(spec)]);
      for (const [, runner] of runners) for (let w = 0; w < t.warmRuns; w++) await runner.run();
      const results: Record<string, Measure[]> = Object.fromEntries(runners.map(([name]) => [name, []]));
      // Interleaved, so a slow moment of the machine falls on every runner alike, each first in turn.
      for (let r = 0; r < RUNS; r++) for (const [name, runner] of rotated(runners, r)) results[name]!.push(await runner.run());
      for (const [, runner] of runners) await runner.close();
      // The peer at its better setting: Sluice runs small models on one thread by default.
      const tj = Math.max(median(results["transformers.js"]!.map((m) => m.tokPerS)), median(results["transformers.js, 1 thread"]!.map((m) => m.tokPerS)));
      for (const [name, ms] of Object.entries(results)) {
        const tps = median(ms.map((m) => m.tokPerS));
        rows.push([t.label, name, tps.toFixed(1), median(ms.map((m) => m.ttftMs)).toFixed(1), `${(tps / tj).toFixed(2)}×`]);
      }
      const floor: WeightFloor = await weightFloor(modelFileBytes(join(ROOT, t.dirs.standard, "onnx", "model.onnx")));
      const raw = rawReadMs(floor.weightBytes);
      const best = Math.max(...Object.entries(results).filter(([n]) => n.startsWith("sluice")).map(([, ms]) => median(ms.map((m) => m.tokPerS))));
      const needs = 1000 / (2 * tj);
      floorRows.push([
        t.label,
        (floor.weightBytes / 1e6).toFixed(1),
        raw.ms === null ? raw.reason : `${raw.ms.toFixed(3)} (${(floor.weightBytes / raw.ms / 1e6).toFixed(1)} GB/s)`,
        `${floor.ms.toFixed(3)} (${(floor.bytesPerSecond / 1e9).toFixed(1)} GB/s)`,
        (1000 / tj).toFixed(3),
        (1000 / best).toFixed(3),
        needs.toFixed(3),
        raw.ms !== null && needs < raw.ms ? "no: below the raw read" : needs < floor.ms ? "no: below ONNX Runtime's pass" : "not excluded by bandwidth",
      ]);
    }
  } finally {
    await server.stop();
  }
  const header = ["model", "runner", "decode tok/s (median)", "TTFT ms (median)", "vs the faster transformers.js"];
  const speed = table(header, rows);
  const floors = table(
    ["model", "weights MB", "reading the weights' bytes, ms (all cores)", "ONNX Runtime's pass over the weights, ms", "transformers.js ms/token", "Sluice ms/token (best)", "2× transformers.js needs ms/token", "possible?"],
    floorRows,
  );
  console.log(floors);
  const engineWork = engineWorkText(await overheadAt151k());
  console.log(speed);
  writeSection(
    "Decode (bench/decode.ts)",
    `${new Date().toISOString().slice(0, 10)} on ${machine()}.\n\n` +
      `Single stream, greedy, ${TOKENS} generated tokens, ${RUNS} timed runs each (interleaved, each runner first in turn) after untimed warm-up runs of every runner (250 for stories260K: JavaScriptCore keeps compiling the engine's code into its optimizing tiers for some 30,000 tokens, which its compiler threads' CPU time shows, and Bun's and transformers.js's speed settles with it; 2 for the ~50M model), medians. Sluice runs in its own process and is measured through its HTTP API with the ` +
      `openai client (streaming), each run from a new account (the same prompt from one account would be drafted from its own earlier answer); transformers.js ${"4.3.1"} runs in-process (generate(), a model loaded per run) on the same standard-variant directory and the same prompt ids, with ONNX Runtime's default threads and with one thread; "vs transformers.js" compares with the faster of the two. ` +
      `Sluice chooses its threads itself (one for a model under 16 MiB of weights, as stories260K). ` +
      `Decode tok/s counts from the first to the last token; TTFT includes prompt processing. ` +
      `"sluice engine in-process" drives the model worker's own code (scheduler, KV cache, sampler, detokeniser) in a process, as transformers.js runs, without the HTTP thread and the client. ` +
      `Every runner (the openai client, the in-process engine, each transformers.js setting) runs in a process of its own, which does nothing else (bench/runner-process.ts).\n\n${speed}\n\n` +
      `The memory floor: a decode step reads every weight once, so no engine on this machine steps faster than the machine reads that many bytes ` +
      `(bench/read-bandwidth.c: every core XORs its share of a buffer as large as the weights, best of 15 passes; built with the machine's C compiler), ` +
      `and ONNX Runtime's own kernels need at least the time of one pass over them (bench/weight-floor.ts: one row times a matrix as large as the model's weights, the faster of default threads and one thread, median of 15). ` +
      `A model whose step is near this floor is bound by memory bandwidth, and 2× the peer is out of reach without changing the weights (quantising them) or the work (speculative decoding):\n\n${floors}\n\n` +
      `${engineWork}\n`,
  );
}

if (values["engine-only"]) await engineOnly();
else await main();
