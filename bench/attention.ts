// Attention over the KV cache in a batched decode step of stories260K, on ONNX Runtime alone: the
// largest part of a 16-row step, and the part that grows with the rows. Two comparisons, each
// run side by side (alternating, same process):
//
// 1. The whole decode step: the export's own GroupQueryAttention with the past and present in one
//    shared buffer (as onnxruntime-genai runs it) against the graph the engine loads, whose
//    attention is split around the cache (src/engine/runtime/split-attention.ts).
// 2. The attention over the cache alone, five layers of stories260K's shapes (4 KV heads of 2
//    query heads; heads of 16 as the fused export pads them, and of 8 unpadded), written in each
//    way ONNX Runtime's operators allow. Every form ends up as one small matrix product (or a
//    broadcast) per row and KV head; which one costs least is what this measures.
//
// Writes `## Attention (bench/attention.ts)` of docs/BENCHMARKS.md.  Run: bun bench/attention.ts
import { readFileSync } from "node:fs";
import { join } from "node:path";
import * as ort from "onnxruntime-node";
import { onnx } from "onnx-proto";
import { NodeDecoder } from "../src/engine/runtime/node-decoder.ts";
import { locateModelFiles } from "../src/engine/runtime/decoder-spec.ts";
import { trimLogitsToLastPosition } from "../src/engine/runtime/last-logits.ts";
import { GraphBuilder, MS_DOMAIN, serializeModel } from "../src/modelkit/onnx/builder.ts";
import { keepOrtTelemetryOff } from "../src/engine/runtime/ort-telemetry.ts";
import { machine, median, table, writeSection } from "./report.ts";
import { decodeFeeds, filler, storiesFused } from "./stories.ts";

// As `sluice serve` runs: ONNX Runtime without its telemetry (src/engine/runtime/ort-telemetry.ts).
keepOrtTelemetryOff();
const POSITIONS = 120;
const RUNS = 300;
const WARM = 50;
const BLOCK = 20;
const single = { executionProviders: ["cpu"], graphOptimizationLevel: "all", intraOpNumThreads: 1, interOpNumThreads: 1 } as const;

/**
 * Median µs per run of each runner. They take turns in blocks, so drift on the host hits all
 * alike; within a block a runner's data stays in the caches, as a server's does between steps,
 * and the first run of each block (after another runner's) is not timed.
 */
async function sideBySide(runners: (() => Promise<unknown>)[]): Promise<number[]> {
  for (let i = 0; i < WARM; i++) for (const r of runners) await r();
  const times = runners.map(() => [] as number[]);
  for (let block = 0; block < RUNS / BLOCK; block++) {
    for (let k = 0; k < runners.length; k++) {
      await runners[k]!();
      for (let i = 0; i < BLOCK; i++) {
        const t = performance.now();
        await runners[k]!();
        times[k]!.push((performance.now() - t) * 1000);
      }
    }
  }
  return times.map(median);
}

const DIR = await storiesFused();
if (!DIR) process.exit(0);

// 1. The whole step.
const decoder = await NodeDecoder.create(DIR, { providers: ["cpu"], threads: 0 });
const { spec, stepKv } = decoder;
if (!stepKv) throw new Error("expected the load-time rewrite to give step outputs");
const files = locateModelFiles(DIR);
const exported = onnx.ModelProto.decode(readFileSync(files.onnxPath));
trimLogitsToLastPosition(exported, spec.logits);
const gqa = await ort.InferenceSession.create(onnx.ModelProto.encode(exported).finish(), single);

const stepRows: (string | number)[][] = [];
for (const [rows, capacity] of [[1, 128], [16, 128], [16, 256]] as const) {
  const split = await decodeFeeds(decoder, rows, capacity, POSITIONS);
  const shared = await decodeFeeds(decoder, rows, capacity, POSITIONS);
  // The shared buffer: each present is fetched into its past's own tensor.
  const presents: Record<string, ort.Tensor | null> = { [spec.logits]: null };
  spec.layers.forEach((l, i) => {
    presents[`present.${i}.key`] = shared[l.pastKey]!;
    presents[`present.${i}.value`] = shared[l.pastValue]!;
  });
  const [g, s] = await sideBySide([() => gqa.run(shared, presents), () => decoder.run(split, [spec.logits, stepKv.output], 1)]);
  stepRows.push([rows, capacity, g!.toFixed(0), s!.toFixed(0), `${(g! / s!).toFixed(2)}×`]);
  console.log(stepRows.at(-1)!.join("\t"));
}
await gqa.release();
await decoder.release();

// 2. Attention over the cache alone: q [rows, kv, group, head] against keys and values
// [rows, kv, capacity, head], for each layer; the output [rows, kv, group, head].
const KV = spec.kvHeads;
const GROUP = 2;
const LAYERS = spec.layers.length;
const ROWS = 16;
const CAPACITY = 128;
const SCALE = { float: 1 / Math.sqrt(8) };
type Form = (g: GraphBuilder, q: string, k: string, v: string, head: number) => string;

const forms: [string, Form][] = [
  [
    "the engine's: q·Kᵀ (FusedMatMul), softmax, p·V",
    (g, q, k, v) => g.op("MatMul", [g.op("Softmax", [g.op("FusedMatMul", [q, k], { transB: 1, alpha: SCALE }, MS_DOMAIN)], { axis: -1 }), v]),
  ],
  [
    "one query head per product (M = 1, broadcast over the group)",
    (g, q, k, v) => {
      const s = g.op("FusedMatMul", [g.op("Unsqueeze", [q, g.i64([3])]), g.op("Unsqueeze", [k, g.i64([2])])], { transB: 1, alpha: SCALE }, MS_DOMAIN);
      const p = g.op("Softmax", [s], { axis: -1 });
      return g.op("Squeeze", [g.op("MatMul", [p, g.op("Unsqueeze", [v, g.i64([2])])]), g.i64([3])]);
    },
  ],
  [
    "keys on the left: K·qᵀ, softmax over the cache axis, Vᵀ·p",
    (g, q, k, v) => {
      const s = g.op("FusedMatMul", [k, q], { transB: 1, alpha: SCALE }, MS_DOMAIN);
      const o = g.op("FusedMatMul", [v, g.op("Softmax", [s], { axis: 2 })], { transA: 1 }, MS_DOMAIN);
      return g.op("Transpose", [o], { perm: [0, 1, 3, 2] });
    },
  ],
  [
    "Einsum",
    (g, q, k, v) => {
      const s = g.op("Mul", [g.op("Einsum", [q, k], { equation: "bhgd,bhcd->bhgc" }), g.f32(SCALE.float)]);
      return g.op("Einsum", [g.op("Softmax", [s], { axis: -1 }), v], { equation: "bhgc,bhcd->bhgd" });
    },
  ],
  [
    "element-wise: Mul and ReduceSum",
    (g, q, k, v) => {
      const products = g.op("Mul", [g.op("Unsqueeze", [q, g.i64([3])]), g.op("Unsqueeze", [k, g.i64([2])])]);
      const s = g.op("Mul", [g.op("ReduceSum", [products, g.i64([-1])], { keepdims: 0 }), g.f32(SCALE.float)]);
      const weighted = g.op("Mul", [g.op("Unsqueeze", [g.op("Softmax", [s], { axis: -1 }), g.i64([4])]), g.op("Unsqueeze", [v, g.i64([2])])]);
      return g.op("ReduceSum", [weighted, g.i64([3])], { keepdims: 0 });
    },
  ],
  [
    "one product per row over all its KV heads, the other heads' blocks masked",
    (g, q, k, v, head) => {
      const bias = new Float32Array(KV * GROUP * KV * CAPACITY);
      for (let r = 0; r < KV * GROUP; r++) for (let j = 0; j < KV * CAPACITY; j++) bias[r * KV * CAPACITY + j] = Math.floor(j / CAPACITY) === Math.floor(r / GROUP) ? 0 : -1e9;
      const s = g.op("FusedMatMul", [g.op("Reshape", [q, g.i64([0, KV * GROUP, head])]), g.op("Reshape", [k, g.i64([0, KV * CAPACITY, head])])], { transB: 1, alpha: SCALE }, MS_DOMAIN);
      const p = g.op("Softmax", [g.op("Add", [s, g.constant({ dtype: "float32", dims: [KV * GROUP, KV * CAPACITY], data: bias }, "blocks")])], { axis: -1 });
      return g.op("Reshape", [g.op("MatMul", [p, g.op("Reshape", [v, g.i64([0, KV * CAPACITY, head])])]), g.i64([0, KV, GROUP, head])]);
    },
  ],
];

async function attentionSession(form: Form, head: number): Promise<{ run: () => Promise<unknown>; first: () => Promise<Float32Array> }> {
  const g = new GraphBuilder("attention");
  const feeds: Record<string, ort.Tensor> = {};
  for (let l = 0; l < LAYERS; l++) {
    const shapes = { q: [ROWS, KV, GROUP, head], k: [ROWS, KV, CAPACITY, head], v: [ROWS, KV, CAPACITY, head] };
    const names = Object.entries(shapes).map(([n, dims], i) => {
      feeds[`${n}${l}`] = new ort.Tensor("float32", filler(dims.reduce((a, b) => a * b), 3 * l + i), dims);
      return g.input(`${n}${l}`, "float32", dims);
    });
    g.output(`out${l}`, "float32", [ROWS, KV, GROUP, head], form(g, names[0]!, names[1]!, names[2]!, head));
  }
  const model = serializeModel(g, { opsets: [{ domain: "", version: 17 }, { domain: MS_DOMAIN, version: 1 }] });
  const session = await ort.InferenceSession.create(model.model, single);
  return { run: () => session.run(feeds), first: async () => (await session.run(feeds))["out0"]!.data as Float32Array };
}

const formRows: (string | number)[][] = [];
for (const head of [16, 8]) {
  const sessions = await Promise.all(forms.map(([, f]) => attentionSession(f, head)));
  // The forms must agree before their times mean anything.
  const reference = await sessions[0]!.first();
  for (const [i, s] of sessions.entries()) {
    const out = await s.first();
    const worst = out.reduce((m, x, j) => Math.max(m, Math.abs(x - reference[j]!)), 0);
    if (worst > 1e-5) throw new Error(`${forms[i]![0]} differs from the engine's form by ${worst}`);
  }
  const us = await sideBySide(sessions.map((s) => s.run));
  forms.forEach(([name], i) => {
    formRows.push([head, name, us[i]!.toFixed(0), `${(us[i]! / us[0]!).toFixed(2)}×`]);
    console.log(formRows.at(-1)!.join("\t"));
  });
}

const stepTable = table(["rows", "pool capacity", "GroupQueryAttention, shared buffer (µs)", "split attention (µs)", "GroupQueryAttention vs split"], stepRows);
const formTable = table(["head size", "attention over the cache", "µs per run (5 layers)", "vs the engine's"], formRows);
console.log(`${stepTable}\n\n${formTable}`);
writeSection(
  "Attention (bench/attention.ts)",
  `Written by \`bun bench/attention.ts\` on ${new Date().toISOString().slice(0, 10)}. Machine: ${machine()}. ` +
    `ONNX Runtime alone, one intra-op thread (as the server runs stories260K), medians of ${RUNS} runs after ${WARM} untimed, the compared sessions taking turns in blocks of ${BLOCK} runs (the first after a switch untimed).\n\n` +
    `A decode step of stories260K (fused export) over ${POSITIONS} cached positions: the export's own GroupQueryAttention with past and present in one buffer, ` +
    "against the graph the engine loads (attention split around the cache, one-token graph):\n\n" +
    stepTable +
    `\n\nAttention over the cache alone at ${ROWS} rows and capacity ${CAPACITY}: ${LAYERS} layers of stories260K's shapes (${KV} KV heads of ${GROUP} query heads), ` +
    "with the fused export's heads of 16 (padded) and with heads of 8. Every form computes the same output (checked); each is one graph of the five layers:\n\n" +
    formTable,
);
