// Hugging Face checkpoint imports and 4-bit weights, side by side in one run:
//   1. the ~50M synthetic model written as an HF checkpoint (bf16 safetensors, 2 shards) and
//      imported with `sluice models import hf` in fp32 and q4: wall time and peak RSS of the
//      import process (it streams: about a layer in memory, the embedding a block of rows at a time);
//   2. single-stream decode through HTTP (the openai client, streaming) of the q4 import against
//      its fp32 import, and transformers.js loading the same q4 directory with dtype "q4";
//   3. the resident memory of each served model (server RSS minus a server with no model) and
//      the bytes of its ONNX files;
//   4. stories260K (as an HF checkpoint): teacher-forced top-1 agreement of q4 with fp32 over
//      llama2.c's reference story (reported only: 260K parameters are too few for 4 bits);
//   5. where a q4 token's time goes: one decode step of each graph alone, the q4 graph's
//      MatMulNBits nodes alone and everything else alone (bench/step-parts.ts), the graphs' ratio
//      against the served one above.
//
//   bun bench/hf-import.ts [--tokens 128] [--runs 15] [--quick]
import { existsSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { loadavg } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import * as ort from "onnxruntime-node";
import { renderChatPrompt } from "../src/engine/text/chat-template.ts";
import { TextTokenizer } from "../src/engine/text/tokenizer.ts";
import { modelFileBytes } from "../src/engine/runtime/decoder.ts";
import { buildSyntheticModel, importHfCheckpoint, type ImportedHfModel, writeHfCheckpoint } from "../src/modelkit/index.ts";
import { readHfModelConfig } from "../src/modelkit/hf/config.ts";
import { randomWeights } from "../src/modelkit/llama/random.ts";
import { keepOrtTelemetryOff } from "../src/engine/runtime/ort-telemetry.ts";
import { writeStoriesHfCheckpoint } from "../test/modelkit/hf-fixtures.ts";
import { greedy } from "../test/modelkit/greedy.ts";
import type { Measure } from "./in-process-engine.ts";
import { machine, median, rotated, table, writeSection } from "./report.ts";
import { weightFloor } from "./weight-floor.ts";
import { stepParts } from "./step-parts.ts";
import { RunnerProcess, type RunnerSpec } from "./runner-process.ts";
import { startServerProcess, type ServerProcess } from "./server-process.ts";

// As `sluice serve` runs: ONNX Runtime without its telemetry (src/engine/runtime/ort-telemetry.ts).
keepOrtTelemetryOff();
const { values } = parseArgs({
  options: {
    tokens: { type: "string", default: "128" },
    runs: { type: "string", default: "15" },
    quick: { type: "boolean" },
  },
});
const TOKENS = Number(values.tokens);
const RUNS = values.quick ? 2 : Number(values.runs);
const REPO = resolve(import.meta.dir, "..");
const ROOT = join(REPO, ".cache", "bench-hf");
const STORIES = resolve(REPO, "../shared/models/stories260k");
const PROMPT = "The quick brown fox jumps over the lazy dog";
const TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"];

/** The ~50M synthetic model as an HF checkpoint (cached: random weights from a fixed seed). */
async function checkpoint50m(): Promise<string> {
  const hf = join(ROOT, "bench-50m-hf");
  if (existsSync(join(hf, "config.json"))) return hf;
  // The synthetic directory gives the tokenizer and the architecture; its weights are the seed's.
  const synthetic = join(ROOT, "bench-50m-synthetic");
  const info = await buildSyntheticModel(synthetic, { preset: "bench-50m", variant: "fused", id: "bench/bench-50m" });
  writeHfCheckpoint(hf, { config: info.config, weights: randomWeights(info.config, 1), dtype: "BF16", shards: 2, copyFrom: { dir: info.dir, files: TOKENIZER_FILES } });
  rmSync(synthetic, { recursive: true, force: true });
  return hf;
}

interface ImportRun {
  seconds: number;
  peakRssMb: number;
}

/**
 * `sluice models import hf` as an operator runs it, in a process of its own
 * (bench/hf-import-child.ts), which reports its own peak RSS.
 */
async function cliImport(src: string, out: string, id: string, dtype: string): Promise<ImportRun> {
  rmSync(out, { recursive: true, force: true });
  const t0 = performance.now();
  const p = Bun.spawn([process.execPath, join(import.meta.dir, "hf-import-child.ts"), "models", "import", "hf", src, "--id", id, "--out", out, "--dtype", dtype], {
    cwd: REPO,
    stdout: "pipe",
    stderr: "pipe",
  });
  const [stdout, stderr] = [await new Response(p.stdout).text(), await new Response(p.stderr).text()];
  if ((await p.exited) !== 0) throw new Error(`import failed: ${stderr}`);
  const report = JSON.parse(stdout.trim().split("\n").at(-1)!) as { maxRssKiB: number };
  return { seconds: (performance.now() - t0) / 1000, peakRssMb: report.maxRssKiB / 1024 };
}

/** A process's resident set (VmRSS), MiB. */
function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) / 1024 : NaN;
}

/**
 * Teacher-forced top-1 agreement: both graphs read the same sequence in one pass, and the share of
 * positions whose most likely next token is the same.
 */
async function agreement(a: ImportedHfModel, b: ImportedHfModel, ids: number[]): Promise<{ same: number; positions: number }> {
  const argmaxes = async (m: ImportedHfModel) => {
    const session = await ort.InferenceSession.create(join(m.dir, m.onnxFile));
    const c = m.config;
    const feeds: Record<string, ort.Tensor> = {
      input_ids: new ort.Tensor("int64", BigInt64Array.from(ids, BigInt), [1, ids.length]),
      attention_mask: new ort.Tensor("int64", new BigInt64Array(ids.length).fill(1n), [1, ids.length]),
      position_ids: new ort.Tensor("int64", BigInt64Array.from(ids, (_, i) => BigInt(i)), [1, ids.length]),
    };
    for (let i = 0; i < c.numLayers; i++) {
      for (const kind of ["key", "value"]) feeds[`past_key_values.${i}.${kind}`] = new ort.Tensor("float32", new Float32Array(0), [1, c.numKvHeads, 0, m.sluice.graph!.kv_head_dim]);
    }
    const logits = (await session.run(feeds)).logits!.data as Float32Array;
    await session.release();
    return ids.map((_, p) => {
      let best = 0;
      for (let v = 1; v < c.vocabSize; v++) if (logits[p * c.vocabSize + v]! > logits[p * c.vocabSize + best]!) best = v;
      return best;
    });
  };
  const [x, y] = [await argmaxes(a), await argmaxes(b)];
  return { same: x.filter((t, i) => t === y[i]).length, positions: ids.length };
}

async function storiesAgreement(): Promise<(string | number)[][] | null> {
  if (!existsSync(join(STORIES, "stories260K.bin"))) {
    console.warn(`stories260K absent at ${STORIES}: its agreement row is skipped`);
    return null;
  }
  const dir = join(ROOT, "stories260k");
  rmSync(dir, { recursive: true, force: true });
  writeStoriesHfCheckpoint(STORIES, join(dir, "hf"));
  const fp32 = await importHfCheckpoint({ dir: join(dir, "hf"), out: join(dir, "fp32"), id: "bench/stories-fp32", dtype: "fp32" });
  // The reference story: fp32's greedy continuation of BOS (the test suite checks it is llama2.c's).
  const session = await ort.InferenceSession.create(join(fp32.dir, fp32.onnxFile));
  const [story] = await greedy(session, { ...fp32.config, headDim: fp32.sluice.graph!.kv_head_dim }, [[1]], { steps: 256, stopIds: [1] });
  await session.release();
  const ids = [1, ...story!.slice(0, -1)];
  const rows: (string | number)[][] = [];
  for (const level of [4, 1]) {
    const q4 = await importHfCheckpoint({ dir: join(dir, "hf"), out: join(dir, `q4-${level}`), id: "bench/stories-q4", dtype: "q4", accuracyLevel: level });
    const a = await agreement(fp32, q4, ids);
    rows.push([`stories260K q4, accuracy_level ${level}${level === 4 ? " (default)" : ""}`, `${a.same}/${a.positions}`, `${((100 * a.same) / a.positions).toFixed(1)}%`]);
  }
  return rows;
}

async function main(): Promise<void> {
  mkdirSync(ROOT, { recursive: true });
  const load = loadavg()[0]!;
  const hf = await checkpoint50m();
  // The same tokenizer under a 1-layer model (hidden 32: 4 MiB of weights): importing it shows the
  // process's own footprint, and serving it the server's, less the model.
  const small = join(ROOT, "bench-50m-hf-1layer");
  if (!existsSync(join(small, "config.json"))) {
    const c = { ...readHfModelConfig(JSON.parse(readFileSync(join(hf, "config.json"), "utf8"))).config, numLayers: 1, hiddenSize: 32, intermediateSize: 64, numHeads: 2, numKvHeads: 1, headDim: 16 };
    writeHfCheckpoint(small, { config: c, weights: randomWeights(c, 1), dtype: "BF16", copyFrom: { dir: hf, files: TOKENIZER_FILES } });
  }

  // 1. Imports.
  const dirs = { fp32: join(ROOT, "serve-fp32", "m"), q4: join(ROOT, "serve-q4", "m"), base: join(ROOT, "serve-base", "m") };
  const base = await cliImport(small, dirs.base, "bench/hf-1layer", "fp32");
  const imports = { fp32: await cliImport(hf, dirs.fp32, "bench/hf-50m-fp32", "fp32"), q4: await cliImport(hf, dirs.q4, "bench/hf-50m-q4", "q4") };
  const weightsMb = (modelFileBytes(join(dirs.fp32, "onnx", "model.onnx")) / 2 ** 20).toFixed(0);
  const importTable = table(
    ["import of the ~50M checkpoint (bf16, 2 shards)", "wall s", "peak RSS MiB", "peak RSS above the process's own"],
    [
      ["the process's own footprint (the 1-layer model, same tokenizer)", base.seconds.toFixed(2), base.peakRssMb.toFixed(0), "—"],
      ["fp32", imports.fp32.seconds.toFixed(2), imports.fp32.peakRssMb.toFixed(0), (imports.fp32.peakRssMb - base.peakRssMb).toFixed(0)],
      ["q4", imports.q4.seconds.toFixed(2), imports.q4.peakRssMb.toFixed(0), (imports.q4.peakRssMb - base.peakRssMb).toFixed(0)],
    ],
  );
  console.log(importTable);

  // 2 and 3. Each model in a server of its own, and the 1-layer model in one for the baseline.
  const servers: Record<"fp32" | "q4" | "q4twin" | "base", ServerProcess> = {
    base: await startServerProcess(join(ROOT, "serve-base")),
    fp32: await startServerProcess(join(ROOT, "serve-fp32")),
    q4: await startServerProcess(join(ROOT, "serve-q4")),
    // Set up as q4: how far two identical servers differ in the same run (an A/A twin), so that a
    // ratio near a target can be read against the machine's noise.
    q4twin: await startServerProcess(join(ROOT, "serve-q4")),
  };
  const speed: (string | number)[][] = [];
  // q4's speed over fp32's as served (step 2), through HTTP and in process, for step 5.
  const servedRatio = { http: Number.NaN, inProcess: Number.NaN };
  const memory: (string | number)[][] = [];
  try {
    const tok = TextTokenizer.load(dirs.q4);
    const eos = [...tok.eosTokenIds];
    const promptIds = await tok.encode(renderChatPrompt(tok, [{ role: "user", content: PROMPT }]));
    // Each run from a new account: the same prompt again would be drafted from its earlier answer
    // (see in-process-engine.ts); the in-process engine does the same by default.
    const http = async (which: "fp32" | "q4" | "q4twin" | "base"): Promise<RunnerSpec> => ({
      kind: "http",
      baseURL: `${servers[which].url}/v1`,
      key: servers[which].key,
      keys: await servers[which].newAccountKeys("run", 2 + RUNS),
      model: which === "base" ? "bench/hf-1layer" : which === "q4twin" ? "bench/hf-50m-q4" : `bench/hf-50m-${which}`,
      prompt: PROMPT,
      eos,
      tokens: TOKENS,
    });
    const tjs = (threads: number): RunnerSpec => ({ kind: "transformers", root: join(ROOT, "serve-q4"), dir: "m", promptIds, threads, tokens: TOKENS, dtype: "q4" });
    // The model worker's own code in a process of its own, as transformers.js runs: what the HTTP
    // thread and the client cost on this machine's cores.
    const engine = (which: "fp32" | "q4"): RunnerSpec => ({ kind: "engine", dir: dirs[which], id: `bench/hf-50m-${which}`, prompt: PROMPT, eos, tokens: TOKENS });
    const runners: [string, RunnerProcess][] = [];
    for (const [name, spec] of [
      ["sluice q4 (HTTP)", await http("q4")],
      ["sluice fp32 (HTTP)", await http("fp32")],
      ["sluice q4 (HTTP), its twin (A/A)", await http("q4twin")],
      ["sluice q4, engine in-process", engine("q4")],
      ["sluice fp32, engine in-process", engine("fp32")],
      ["transformers.js q4", tjs(0)],
      ["transformers.js q4, 1 thread", tjs(1)],
    ] as [string, RunnerSpec][]) runners.push([name, await RunnerProcess.start(spec)]);
    for (const [, r] of runners) for (let w = 0; w < 2; w++) await r.run();
    const results: Record<string, Measure[]> = Object.fromEntries(runners.map(([n]) => [n, []]));
    // Interleaved, so a slow moment of the machine falls on every runner alike, each first in turn.
    for (let i = 0; i < RUNS; i++) for (const [name, r] of rotated(runners, i)) results[name]!.push(await r.run());
    for (const [, r] of runners) await r.close();
    // The baseline server serves the same request once, so it holds a worker, tokenizer and cache too.
    const baseRunner = await RunnerProcess.start(await http("base"));
    await baseRunner.run();
    await baseRunner.close();
    const tps = (name: string) => median(results[name]!.map((m) => m.tokPerS));
    servedRatio.http = tps("sluice q4 (HTTP)") / tps("sluice fp32 (HTTP)");
    servedRatio.inProcess = tps("sluice q4, engine in-process") / tps("sluice fp32, engine in-process");
    const tj = Math.max(tps("transformers.js q4"), tps("transformers.js q4, 1 thread"));
    // Like for like: the in-process engine against its own fp32 run, the rest against fp32 through HTTP.
    const fp32 = (name: string) => tps(name.includes("in-process") ? "sluice fp32, engine in-process" : "sluice fp32 (HTTP)");
    for (const [name] of runners) {
      speed.push([name, tps(name).toFixed(1), median(results[name]!.map((m) => m.ttftMs)).toFixed(1), `${(tps(name) / fp32(name)).toFixed(2)}×`, `${(tps(name) / tj).toFixed(2)}×`]);
    }
    const baseline = rssMb(servers.base.pid);
    const resident = { fp32: rssMb(servers.fp32.pid) - baseline, q4: rssMb(servers.q4.pid) - baseline };
    const files = { fp32: modelFileBytes(join(dirs.fp32, "onnx", "model.onnx")), q4: modelFileBytes(join(dirs.q4, "onnx", "model_q4.onnx")) };
    for (const which of ["fp32", "q4"] as const) {
      memory.push([
        which,
        resident[which].toFixed(0),
        which === "q4" ? `${(resident.q4 / resident.fp32).toFixed(2)}×` : "1×",
        (files[which] / 2 ** 20).toFixed(1),
        which === "q4" ? `${(files.q4 / files.fp32).toFixed(2)}×` : "1×",
      ]);
    }
    memory.push(["(the server with the 1-layer model: subtracted)", baseline.toFixed(0), "", "", ""]);
  } finally {
    for (const s of Object.values(servers)) await s.stop();
  }
  const speedTable = table(["~50M model, single stream", "decode tok/s (median)", "TTFT ms (median)", "vs its fp32 import (target q4 ≥ 3×)", "vs the faster transformers.js q4 (target ≥ 1.3×)"], speed);
  const memoryTable = table(["~50M model served", "resident MiB (server RSS minus the 1-layer model's server)", "vs fp32 (target q4 ≤ 0.35×)", "ONNX files MiB", "vs fp32 (target q4 ≤ 0.35×)"], memory);
  console.log(speedTable);
  console.log(memoryTable);

  // 5. Where a q4 token's time goes: the graphs alone, against the served ratio (from 2).
  const parts = await stepParts(dirs.q4, dirs.fp32);
  const floor = await weightFloor(parts.matMulNBitsBytes);
  const { ms, quartiles } = parts;
  const row = (label: string, part: keyof typeof ms, ratio: boolean): string[] => [
    label,
    ms[part].toFixed(2),
    `${quartiles[part][0].toFixed(2)}–${quartiles[part][1].toFixed(2)}`,
    ratio ? `${(ms.fp32 / ms[part]).toFixed(2)}×` : "",
  ];
  const partsTable = table(
    [`one decode step of one row, the graph alone (${parts.positions} of ${parts.capacity} cached positions)`, "ms (median)", "middle half of the runs, ms", "fp32 step ÷ this"],
    [
      row("fp32: the step's graph, as the engine runs it", "fp32", true),
      row("q4: the step's graph, as the engine runs it", "q4", true),
      row(`q4: its ${parts.matMulNBitsNodes} MatMulNBits nodes alone (each fed one row)`, "matMulNBits", false),
      row("q4: everything else alone (each MatMulNBits node replaced by a row of zeros)", "rest", false),
      ["q4: the sum of those two (medians)", (ms.matMulNBits + ms.rest).toFixed(2), "", `${(ms.fp32 / (ms.matMulNBits + ms.rest)).toFixed(2)}×`],
      row("q4: the one-token graph (small models' second session)", "q4OneToken", true),
      row("q4: the one-token graph, everything else alone", "restOneToken", false),
    ],
  );
  const shareText =
    `Where a q4 token's time goes. Each graph alone runs one decode step of one row from the same feeds through ONNX Runtime's InferenceSession (default threads), ` +
    `${parts.rounds} rounds in an order that rotates, each making a session, running it ${parts.warmRuns} times untimed and ${parts.timedRuns} timed, and releasing it before the next: one session at a time, ` +
    `as each has its own thread pool whose thread spins after a run (with several alive, the fp32 step read twice its time). ` +
    `The MatMulNBits nodes alone read ${(parts.matMulNBitsBytes / 2 ** 20).toFixed(1)} MiB of 4-bit weights, scales and zero points at ` +
    `${(parts.matMulNBitsBytes / (ms.matMulNBits / 1000) / 1e9).toFixed(1)} GB/s, where ONNX Runtime's float32 product over as many bytes (bench/weight-floor.ts) ` +
    `takes ${floor.ms.toFixed(2)} ms (${(floor.bytesPerSecond / 1e9).toFixed(1)} GB/s): the kernel (int8 activations, accuracy_level 4) is bound by its arithmetic at one row. ` +
    `The q4 graph's step alone is ${(ms.fp32 / ms.q4).toFixed(2)}× as fast as the fp32 graph's; served, the speed table's ratio is ${servedRatio.http.toFixed(2)}× through HTTP and ` +
    `${servedRatio.inProcess.toFixed(2)}× in process (measured earlier in the run: compare ratios, not milliseconds). What a token costs outside its graph (the engine's work between runs, ` +
    `the sampler over the 32k logits, the HTTP thread and the client, on the two cores ONNX Runtime's two threads use) is about the same per token for both models, so it weighs three times as much on q4's step as on fp32's:\n\n${partsTable}`;
  console.log(shareText);

  // 4. stories260K.
  const agree = await storiesAgreement();
  const agreeTable = agree ? table(["teacher-forced over llama2.c's reference story (256 positions)", "same top-1 as fp32", "agreement"], agree) : null;
  if (agreeTable) console.log(agreeTable);

  writeSection(
    "HF import and 4-bit weights (bench/hf-import.ts)",
    `${new Date().toISOString().slice(0, 10)} on ${machine()}; 1-minute load average ${load.toFixed(1)} at the start, ${loadavg()[0]!.toFixed(1)} at the end.\n\n` +
      `The ~50M synthetic model (bench-50m: 9 layers, hidden 512, tied 32k vocabulary; random weights from a fixed seed) written as a Hugging Face checkpoint ` +
      `(bf16 safetensors in 2 shards) and imported with \`sluice models import hf\` in fp32 and q4 (MatMulNBits, 4 bits, blocks of 32, accuracy_level 4; ` +
      `GatherBlockQuantized embedding sharing the tied head's blocks). Each import runs as a process of its own; its peak RSS is the kernel's maxrss. ` +
      `The import streams: it reads each tensor when the graph takes it and writes each weight to the external data file as the graph is built, and the largest tensors ` +
      `(the embedding and an untied head) 2,048 rows at a time, so what it holds above the process's own footprint is bounded by a layer's matrices, not the model ` +
      `(the embedding alone is 16.4M of the 52M parameters, ${(32000 * 512 * 4) / 2 ** 20} MiB in float32), against ${weightsMb} MiB of float32 weights in all:\n\n${importTable}\n\n` +
      `Single stream, greedy, ${TOKENS} generated tokens (EOS banned), ${RUNS} timed runs each after 2 untimed ones, interleaved (each runner first in turn), medians. ` +
      `Each Sluice model is served by a server process of its own and measured through its HTTP API with the openai client (streaming), each run from a new account (the same prompt from one account would be drafted from its own earlier answer); ` +
      `transformers.js 4.3.1 loads the same q4 directory with \`dtype: "q4"\` (onnx/model_q4.onnx) and runs generate() on the same prompt ids, in a process of its own, ` +
      `with ONNX Runtime's default threads and with one thread; "vs transformers.js" compares with the faster of the two. ` +
      `A second q4 server set up alike (the A/A twin) shows how far two identical servers differ in the same run: a ratio within that of a target says nothing either way. ` +
      `The in-process rows drive the model worker's own code (scheduler, KV cache, sampler, detokeniser) in a process of its own, as transformers.js runs, ` +
      `without the HTTP thread and the client (compared with the in-process fp32 run): on two cores those share the cores with ONNX Runtime's two threads:\n\n${speedTable}\n\n` +
      `Resident memory: each server's RSS after its runs, minus that of a server started the same way with the 1-layer model of the same tokenizer after one such request ` +
      `(what is not the model: Bun, ONNX Runtime's libraries, the model worker, the tokenizer; the 1-layer model's own 4 MiB of weights are left in the baseline). ` +
      `ONNX files: the graph and its external data:\n\n${memoryTable}\n\n` +
      (agreeTable
        ? `stories260K written as an HF checkpoint and imported in fp32 and q4: both read llama2.c's reference story (fp32's greedy story from BOS) in one pass, ` +
          `and the table counts the positions where q4's most likely next token is fp32's. No target: a 260K-parameter model (hidden 64) is far too small for 4-bit ` +
          `weights, whose rounding error is a large share of each of its few weights; the numbers only show how far 4 bits move so small a model:\n\n${agreeTable}\n\n`
        : "") +
      `${shareText}\n`,
  );
}

await main();
