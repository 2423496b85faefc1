// One decode step of stories260K on ONNX Runtime alone, as the server loads it (the load-time graph
// rewrites, the threads it chooses): by batch rows and by KV pool capacity, for 120 cached
// positions. What batching can gain on a model this small, and what a pool larger than its rows
// need costs. Writes `## Model step` of docs/BENCHMARKS.md.  Run: bun bench/step.ts
import { existsSync } from "node:fs";
import { join } from "node:path";
import type * as ort from "onnxruntime-node";
import { DecoderSession } from "../src/engine/runtime/decoder.ts";
import { floatTensor } from "../src/engine/runtime/tensors.ts";
import { importLlama2c } from "../src/modelkit/index.ts";
import { machine, median, table, writeSection } from "./report.ts";

const STORIES = join(import.meta.dir, "..", "..", "shared", "models", "stories260k");
const DIR = join(import.meta.dir, "..", ".cache", "bench-models", "stories260k-fused");
const POSITIONS = 120;
const RUNS = 300;

if (!existsSync(join(STORIES, "stories260K.bin"))) {
  console.warn(`stories260K absent at ${STORIES}: nothing to measure`);
  process.exit(0);
}
if (!existsSync(join(DIR, "sluice.json"))) {
  await importLlama2c(join(STORIES, "stories260K.bin"), join(STORIES, "tok512.bin"), { id: "bench/stories260k-fused", outDir: DIR, variant: "fused" });
}
const decoder = await DecoderSession.create(DIR, { providers: ["cpu"], threads: 0 });
const { spec, stepKv } = decoder;
if (!stepKv) throw new Error("expected the load-time rewrite to give step outputs");

async function stepUs(rows: number, capacity: number): Promise<number> {
  const width = POSITIONS + 1;
  const feeds = await decoder.feeds({
    batch: rows,
    width: 1,
    ids: Array.from({ length: rows }, (_, r) => 5 + r),
    mask: new Uint8Array(rows * width).fill(1),
    maskWidth: width,
    positions: new Array<number>(rows).fill(POSITIONS),
  });
  // Cached keys and values that are not zero: zero pages would all map to one physical page.
  const size = rows * spec.kvHeads * capacity * spec.headDim;
  spec.layers.forEach((l, i) => {
    for (const [name, seed] of [[l.pastKey, 2 * i], [l.pastValue, 2 * i + 1]] as const) {
      const data = Float32Array.from({ length: size }, (_, j) => (((j + seed) * 2654435761) % 1000) / 5000 - 0.1);
      feeds[name] = floatTensor("float32", data, [rows, spec.kvHeads, capacity, spec.headDim]);
    }
  });
  const fetches = [spec.logits, stepKv!.output];
  const run = () => decoder.run(feeds as Record<string, ort.Tensor>, fetches, 1);
  for (let i = 0; i < 50; i++) await run();
  const times: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    const t = performance.now();
    await run();
    times.push((performance.now() - t) * 1000);
  }
  return median(times);
}

const rows: (string | number)[][] = [];
const one = await stepUs(1, 128);
for (const [batch, capacity] of [[1, 128], [1, 256], [16, 128], [16, 160], [16, 192], [16, 256]] as const) {
  const us = batch === 1 && capacity === 128 ? one : await stepUs(batch, capacity);
  rows.push([batch, capacity, us.toFixed(0), (us / batch).toFixed(0), `${(us / one).toFixed(2)}×`]);
  console.log(rows.at(-1)!.join("\t"));
}
await decoder.release();

const text = table(["batch rows", "pool capacity", "µs per step (median)", "µs per row", "vs one row at 128"], rows);
console.log(text);
writeSection(
  "Model step",
  `Written by \`bun bench/step.ts\` on ${new Date().toISOString().slice(0, 10)}. Machine: ${machine()}. ` +
    `stories260K (fused export) as the server loads it (attention split around the cache, the one-token graph of decode steps, logits of the last position, one packed step output, ` +
    `one intra-op thread), ONNX Runtime alone: one decode step over ${POSITIONS} cached positions, median of ${RUNS} runs after 50 untimed. ` +
    "Attention reads the pool's whole capacity, masked past each row's length.\n\n" +
    text,
);
