// One decode step of stories260K on ONNX Runtime alone, as the server loads it (the load-time graph
// rewrites, the threads it chooses): by batch rows and by KV pool capacity, for 120 cached
// positions. What batching can gain on a model this small, and what a pool larger than its rows
// need costs. Writes `## Model step` of docs/BENCHMARKS.md.  Run: bun bench/step.ts
import type * as ort from "onnxruntime-node";
import { NodeDecoder } from "../src/engine/runtime/node-decoder.ts";
import { machine, median, table, writeSection } from "./report.ts";
import { decodeFeeds, storiesFused } from "./stories.ts";

const POSITIONS = 120;
const RUNS = 300;

const DIR = await storiesFused();
if (!DIR) process.exit(0);
const decoder = await NodeDecoder.create(DIR, { providers: ["cpu"], threads: 0 });
const { spec, stepKv } = decoder;
if (!stepKv) throw new Error("expected the load-time rewrite to give step outputs");

async function stepUs(rows: number, capacity: number): Promise<number> {
  const feeds = await decodeFeeds(decoder, rows, capacity, POSITIONS);
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
let sixteen = 0;
for (const [batch, capacity] of [[1, 128], [1, 256], [16, 128], [16, 160], [16, 192], [16, 256]] as const) {
  const us = batch === 1 && capacity === 128 ? one : await stepUs(batch, capacity);
  if (batch === 16 && capacity === 128) sixteen = us;
  rows.push([batch, capacity, us.toFixed(0), (us / batch).toFixed(0), `${(us / one).toFixed(2)}×`]);
  console.log(rows.at(-1)!.join("\t"));
}
await decoder.release();

const text = table(["batch rows", "pool capacity", "µs per step (median)", "µs per row", "vs one row at 128"], rows);
// What batching alone can give: 16 rows' tokens per step time against one row's, with nothing
// around ONNX Runtime's run. A server's ratio exceeds it only by as much as a lone stream's other
// per-token costs (HTTP, the worker's own code) exceed a 16-row step's share of them.
const gain = `16 rows at capacity 128 make ${((16 * one) / sixteen).toFixed(2)}× the tokens per second of one row at 128, ONNX Runtime alone.`;
console.log(text);
console.log(gain);
writeSection(
  "Model step",
  `Written by \`bun bench/step.ts\` on ${new Date().toISOString().slice(0, 10)}. Machine: ${machine()}. ` +
    `stories260K (fused export) as the server loads it (attention split around the cache, its heads of 8 without the padding to 16 the export has for GroupQueryAttention, the softmax scale in the query weights, the one-token graph of decode steps, logits of the last position, one packed step output, ` +
    `one intra-op thread), ONNX Runtime alone: one decode step over ${POSITIONS} cached positions, median of ${RUNS} runs after 50 untimed. ` +
    "Attention reads the pool's whole capacity, masked past each row's length.\n\n" +
    text +
    `\n\n- ${gain}`,
);
