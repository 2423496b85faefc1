// The least time one decode step of a model can take on this machine when every weight must be
// read once per token: ONNX Runtime multiplying one row by a matrix as large as the model's weights
// (the cheapest way to stream those bytes through its kernels). A decoder whose step takes close
// to this is bound by memory bandwidth, whichever engine drives it.
import { join } from "node:path";
import * as ort from "onnxruntime-node";
import { modelFileBytes } from "../src/engine/runtime/decoder.ts";
import { GraphBuilder, serializeModel } from "../src/modelkit/index.ts";
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

if (import.meta.main) {
  const dir = process.argv[2];
  if (!dir) throw new Error("usage: bun bench/weight-floor.ts <model dir>");
  const f = await weightFloor(modelFileBytes(join(dir, "onnx", "model.onnx")));
  console.log(`${(f.weightBytes / 1e6).toFixed(1)} MB of weights: ${f.ms.toFixed(2)} ms per pass (${(f.bytesPerSecond / 1e9).toFixed(1)} GB/s)`);
}
