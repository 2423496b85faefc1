// The least time one decode step of a model can take on this machine when every weight must be
// read once per token: ONNX Runtime multiplying one row by a matrix as large as the model's weights
// (the cheapest way to stream those bytes through its kernels), and, below it, the machine reading
// that many bytes with nothing else to do (read-bandwidth.c on every core). A decoder whose step
// takes close to these is bound by memory bandwidth, whichever engine drives it.
import { mkdtempSync, rmSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import * as ort from "onnxruntime-node";
import { modelFileBytes } from "../src/engine/runtime/decoder.ts";
import { GraphBuilder, serializeModel } from "../src/modelkit/index.ts";
import { keepOrtTelemetryOff } from "../src/engine/runtime/ort-telemetry.ts";
import { median } from "./report.ts";

const ROWS_IN = 512;

export interface WeightFloor {
  weightBytes: number;
  /** Median ms of one pass over the weights, the faster of ONNX Runtime's default threads and one thread. */
  ms: number;
  /** Bytes per second that pass streams. */
  bytesPerSecond: number;
}

export async function weightFloor(weightBytes: number, runs = 15): Promise<WeightFloor> {
  const cols = Math.ceil(weightBytes / (ROWS_IN * 4));
  const g = new GraphBuilder("weight_floor");
  const x = g.input("x", "float32", [1, ROWS_IN]);
  const w = new Float32Array(ROWS_IN * cols);
  // Values that are not all zero (zero pages would all map to one physical page).
  for (let i = 0; i < w.length; i++) w[i] = ((i * 2654435761) % 1000) / 1e5;
  const wName = g.initializer("w", { dtype: "float32", dims: [ROWS_IN, cols], data: w });
  g.output("y", "float32", [1, cols], g.op("MatMul", [x, wName]));
  const { model } = serializeModel(g, { opsets: [{ domain: "", version: 17 }] });
  const feeds = { x: new ort.Tensor("float32", new Float32Array(ROWS_IN).fill(0.5), [1, ROWS_IN]) };
  let best = Infinity;
  for (const threads of [0, 1]) {
    const session = await ort.InferenceSession.create(model, { graphOptimizationLevel: "all", ...(threads ? { intraOpNumThreads: threads } : {}) });
    for (let i = 0; i < 3; i++) await session.run(feeds);
    const times: number[] = [];
    for (let i = 0; i < runs; i++) {
      const t = performance.now();
      await session.run(feeds);
      times.push(performance.now() - t);
    }
    best = Math.min(best, median(times));
    await session.release();
  }
  return { weightBytes: ROWS_IN * cols * 4, ms: best, bytesPerSecond: (ROWS_IN * cols * 4) / (best / 1000) };
}

/** bench/read-bandwidth.c built once per process (removed at exit), or why it could not be. */
let reader: { exe: string } | { reason: string } | null = null;

function buildReader(): { exe: string } | { reason: string } {
  const cc = Bun.which("cc") ?? Bun.which("gcc") ?? Bun.which("clang");
  if (!cc) return { reason: "no C compiler" };
  const dir = mkdtempSync(join(tmpdir(), "sluice-read-bandwidth-"));
  process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
  const exe = join(dir, "read-bandwidth");
  const built = Bun.spawnSync([cc, "-O3", "-march=native", "-pthread", join(import.meta.dir, "read-bandwidth.c"), "-o", exe]);
  if (built.exitCode !== 0) return { reason: `the C compiler failed: ${built.stderr.toString().split("\n")[0]}` };
  return { exe };
}

/**
 * Best ms of reading `bytes` from memory with every core (bench/read-bandwidth.c, built with the
 * machine's C compiler); null, with the reason, when there is no compiler.
 */
export function rawReadMs(bytes: number, runs = 15): { ms: number; threads: number } | { ms: null; reason: string } {
  reader ??= buildReader();
  if ("reason" in reader) return { ms: null, reason: reader.reason };
  const threads = cpus().length;
  const run = Bun.spawnSync([reader.exe, String(bytes), String(threads), String(runs)]);
  if (run.exitCode !== 0) return { ms: null, reason: `read-bandwidth exited with ${run.exitCode}` };
  return { ms: Number(run.stdout.toString().split(" ")[0]), threads };
}

if (import.meta.main) {
  keepOrtTelemetryOff();
  const dir = process.argv[2];
  if (!dir) throw new Error("usage: bun bench/weight-floor.ts <model dir>");
  const f = await weightFloor(modelFileBytes(join(dir, "onnx", "model.onnx")));
  console.log(`${(f.weightBytes / 1e6).toFixed(1)} MB of weights: ${f.ms.toFixed(2)} ms per pass (${(f.bytesPerSecond / 1e9).toFixed(1)} GB/s)`);
  const raw = rawReadMs(f.weightBytes);
  console.log(raw.ms === null ? `raw read: ${raw.reason}` : `raw read with ${raw.threads} threads: ${raw.ms.toFixed(2)} ms (${(f.weightBytes / raw.ms / 1e6).toFixed(1)} GB/s)`);
}
