// The step outputs added to GroupQueryAttention graphs hold exactly the positions a run writes:
// a cache kept by copying them in gives the same logits and the same cache as ONNX Runtime
// writing the shared buffer in place, over a prefill and decode steps of right-padded rows of
// different lengths, in float32 and float16, with separate and packed q/k/v.
import { afterAll, describe, expect, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { onnx } from "onnx-proto";
import * as ort from "onnxruntime-node";
import { FusedKvBackend } from "../../../src/engine/batching/fused-kv.ts";
import { modelFileBytes } from "../../../src/engine/runtime/decoder.ts";
import { NodeDecoder } from "../../../src/engine/runtime/node-decoder.ts";
import type { Decoder } from "../../../src/engine/runtime/decoder.ts";
import { openDecoder } from "../../../src/engine/decoders.ts";
import { splitAttention } from "../../../src/engine/runtime/split-attention.ts";
import { LOGITS_START_INPUT, trimLogitsToLastPosition } from "../../../src/engine/runtime/last-logits.ts";
import { prepareDecoderGraph } from "../../../src/engine/runtime/load-graph.ts";
import { addStepKvOutputs } from "../../../src/engine/runtime/step-kv-outputs.ts";
import { floatTensor, halfBits, int64Tensor } from "../../../src/engine/runtime/tensors.ts";
import { buildSyntheticModel } from "../../../src/modelkit/index.ts";
import { tempDir } from "../../helpers/paths.ts";

const CAP = 32;
const root = tempDir("sluice-step-kv-");
afterAll(() => root.remove());
const ROWS = 3;

type Kv = Float32Array | Uint16Array;

const load = (path: string) => onnx.ModelProto.decode(readFileSync(path));

interface Variation {
  /** Packed q/k/v (onnxruntime-genai's CPU layout), which comes without per-head q/k norms. */
  packedQkv?: boolean;
  /** Rotate only this many leading dimensions of each head (the cos and sin caches narrowed). */
  partialRotary?: number;
  /** Heads this small, which the model kit pads to 16 and split attention takes back (unpad-heads.ts). */
  headDim?: number;
}

/** Keeps the first `width` columns of the cos and sin caches: partial rotary, as GroupQueryAttention reads it. */
function narrowRotary(model: onnx.IModelProto, width: number): void {
  for (const t of model.graph!.initializer!) {
    if (t.name !== "cos_cache" && t.name !== "sin_cache") continue;
    const [rows, cols] = t.dims!.map(Number) as [number, number];
    const src = new Float32Array(Uint8Array.from(t.rawData!).buffer);
    const out = new Float32Array(rows * width);
    for (let r = 0; r < rows; r++) out.set(src.subarray(r * cols, r * cols + width), r * width);
    t.dims = [rows, width];
    t.rawData = new Uint8Array(out.buffer);
  }
}

async function check(dtype: "float32" | "float16", rewrite: "gather" | "split" = "gather", v: Variation = {}) {
  const packing = v.packedQkv || v.headDim ? { packedQkv: v.packedQkv === true, qkNorm: false } : {};
  // GroupQueryAttention wants the rotated width a multiple of 16: heads of 32 to rotate 16.
  const shape = v.partialRotary ? { shape: { headDim: 32 } } : v.headDim ? { shape: { headDim: v.headDim } } : {};
  const info = await buildSyntheticModel(join(root.path, `${dtype}-${rewrite}-${JSON.stringify(v)}`), { preset: "tiny-qwen3", variant: "fused", dtype, seed: 3, ...packing, ...shape });
  if (v.packedQkv) expect(load(join(info.dir, "onnx", "model.onnx")).graph!.node!.find((n) => n.opType === "GroupQueryAttention")!.input!.slice(1, 3)).toEqual(["", ""]);
  let path = join(info.dir, "onnx", "model.onnx");
  if (v.partialRotary) {
    const narrowed = load(path);
    narrowRotary(narrowed, v.partialRotary / 2);
    path = join(info.dir, "onnx", "partial-rotary.onnx");
    writeFileSync(path, onnx.ModelProto.encode(narrowed).finish());
  }
  const plain = await ort.InferenceSession.create(path);
  const model = load(path);
  const step = rewrite === "split" ? splitAttention(model) : addStepKvOutputs(model);
  expect(step).not.toBeNull();
  expect(step!.kind).toBe(rewrite);
  const stepped = await ort.InferenceSession.create(onnx.ModelProto.encode(model).finish());
  const layers = plain.inputNames.filter((n) => n.startsWith("past_key_values.") && n.endsWith(".key"));
  expect(step!.blocks.size).toBe(layers.length);
  const meta = plain.inputMetadata.find((m) => m.name === layers[0]) as unknown as { shape: number[] };
  const [heads, dim] = [meta.shape[1]!, meta.shape[3]!];
  // The split graph's heads: the padding the model kit added for GroupQueryAttention taken back.
  const stepDim = v.headDim && rewrite === "split" ? v.headDim : dim;
  if (v.headDim) expect(dim).toBe(16);
  expect(step!.headDims).toEqual(stepDim === dim ? undefined : { exported: dim, used: stepDim });
  const alloc = (dim: number) => layers.flatMap(() => [0, 1].map((): Kv => (dtype === "float16" ? new Uint16Array(ROWS * heads * CAP * dim) : new Float32Array(ROWS * heads * CAP * dim))));
  const inPlace = alloc(dim);
  const copied = alloc(stepDim);

  const feeds = (ids: number[][], lens: number[], width: number, kv: Kv[], rows: number, dim: number) => {
    const t = ids[0]!.length;
    const mask = lens.flatMap((l) => Array.from({ length: width }, (_, j) => (j < l ? 1 : 0)));
    const f: Record<string, ort.Tensor> = {
      input_ids: int64Tensor(ids.flat(), [rows, t]),
      attention_mask: int64Tensor(mask, [rows, width]),
    };
    if (plain.inputNames.includes("position_ids")) f.position_ids = int64Tensor(lens.flatMap((l) => Array.from({ length: t }, (_, i) => l - t + i)), [rows, t]);
    layers.forEach((name, i) => {
      f[name] = floatTensor(dtype, kv[2 * i]!.subarray(0, rows * heads * CAP * dim), [rows, heads, CAP, dim]);
      f[name.replace(/key$/, "value")] = floatTensor(dtype, kv[2 * i + 1]!.subarray(0, rows * heads * CAP * dim), [rows, heads, CAP, dim]);
    });
    return f;
  };
  const logitsOf = (t: ort.Tensor) => Array.from(dtype === "float16" ? halfBits(t.data) : (t.data as Float32Array));

  async function both(ids: number[][], lens: number[], width: number) {
    const rows = ids.length;
    const a = feeds(ids, lens, width, inPlace, rows, dim);
    const fetches: Record<string, ort.Tensor | null> = { logits: null };
    layers.forEach((name, i) => {
      fetches[`present.${i}.key`] = a[name]!;
      fetches[`present.${i}.value`] = a[name.replace(/key$/, "value")]!;
    });
    const outA = await plain.run(a, fetches as ort.InferenceSession.FetchesType);
    const b = feeds(ids, lens, width, copied, rows, stepDim);
    const outB = await stepped.run(b, ["logits", step!.packed]);
    const t = ids[0]!.length;
    const out = outB[step!.packed]!;
    expect(out.dims).toEqual([2 * layers.length * rows, heads, t, stepDim]);
    const src = dtype === "float16" ? halfBits(out.data) : (out.data as Float32Array);
    layers.forEach((n, i) => {
      const blocks = step!.blocks.get(n)!;
      for (const [which, block] of [[0, blocks.key], [1, blocks.value]] as const) {
        const dst = copied[2 * i + which]!;
        for (let r = 0; r < rows; r++) {
          const from = (block * rows + r) * heads * t * stepDim;
          for (let h = 0; h < heads; h++) dst.set(src.subarray(from + h * t * stepDim, from + (h + 1) * t * stepDim), ((r * heads + h) * CAP + lens[r]! - t) * stepDim);
        }
      }
    });
    if (rewrite === "gather") expect(logitsOf(outB.logits!)).toEqual(logitsOf(outA.logits!));
    else expectClose(logitsOf(outB.logits!), logitsOf(outA.logits!), 1e-4);
  }

  // Row 0 prefills 6 tokens alone; then all three rows decode with different lengths.
  await both([[11, 12, 13, 14, 15, 16]], [6], 6);
  for (let s = 0; s < 4; s++) await both([[20 + s], [30 + s], [40 + s]], [7 + s, 1 + s, 1 + s], 7 + s);
  // Unpadded: the model kit put a head's halves at [0, d/2) and [16/2, 16/2 + d/2), zeros between.
  const padded = (cache: Kv) => {
    if (stepDim === dim) return Array.from(cache);
    const out = new Array<number>((cache.length / stepDim) * dim).fill(0);
    const half = stepDim / 2;
    for (let p = 0; p < cache.length / stepDim; p++) for (let j = 0; j < stepDim; j++) out[p * dim + (j < half ? j : dim / 2 + j - half)] = cache[p * stepDim + j]!;
    return out;
  };
  inPlace.forEach((a, i) => (rewrite === "gather" ? expect(Array.from(copied[i]!)).toEqual(Array.from(a)) : expectClose(padded(copied[i]!), Array.from(a), 1e-4)));
}

function expectClose(actual: number[], expected: number[], tolerance: number) {
  expect(actual.length).toBe(expected.length);
  let worst = 0;
  for (let i = 0; i < actual.length; i++) worst = Math.max(worst, Math.abs(actual[i]! - expected[i]!) / (1 + Math.abs(expected[i]!)));
  expect(worst).toBeLessThan(tolerance);
}

/**
 * One decode step of rows after `lens` cached positions (random past keys and values in pools of
 * CAP): the one-token graph's logits and new keys and values equal the general graph's. The
 * attention to the new token is summed element-wise there and by matrix products in the general
 * graph: the same values to float rounding.
 */
async function expectOneTokenAgrees(d: NodeDecoder, lens: number[]): Promise<void> {
  expect(d.oneTokenSession).not.toBeNull();
  const { kvHeads, headDim, layers } = d.spec;
  const rows = lens.length;
  const width = Math.max(...lens) + 1;
  const mask = new Uint8Array(rows * width);
  lens.forEach((l, r) => mask.fill(1, r * width, r * width + l + 1));
  const feeds = await d.feeds({ batch: rows, width: 1, ids: lens.map((_, r) => [7, 100, 41][r % 3]!), mask, maskWidth: width, lengths: lens.map((l) => l + 1), positions: lens });
  let seed = 1;
  const random = () => ((seed = (seed * 16807) % 2147483647) / 2147483647) * 2 - 1;
  for (const l of layers) {
    for (const name of [l.pastKey, l.pastValue]) {
      feeds[name] = floatTensor("float32", Float32Array.from({ length: rows * kvHeads * CAP * headDim }, random), [rows, kvHeads, CAP, headDim]);
    }
  }
  const fetches = [d.spec.logits, d.stepKv!.output];
  const [general, one] = [await d.run(feeds, fetches, 1, 1, true), await d.oneTokenSession!.run(feeds, fetches)];
  for (const name of fetches) {
    expect(one[name]!.dims).toEqual(general[name]!.dims);
    expectClose(Array.from(one[name]!.data as Float32Array), Array.from(general[name]!.data as Float32Array), 1e-5);
  }
}

describe("load-time decoder rewrites: step KV outputs, split attention, last-position logits", () => {
  test("split attention (no present): the logits and cache of GroupQueryAttention within float tolerance", () => check("float32", "split"));
  test("split attention over packed q/k/v: the logits and cache of GroupQueryAttention within float tolerance", () => check("float32", "split", { packedQkv: true }));
  test("packed q/k/v, gathered step outputs: same logits and cache as the in-place shared buffer", () => check("float32", "gather", { packedQkv: true }));
  test("split attention with partial rotary (a cos cache narrower than the head): the logits and cache of GroupQueryAttention", () => check("float32", "split", { partialRotary: 16 }));
  test("split attention drops the zero dimensions of heads padded from 8 to 16: the logits and cache of GroupQueryAttention at 16", () => check("float32", "split", { headDim: 8 }));
  test("the same over packed q/k/v", () => check("float32", "split", { headDim: 8, packedQkv: true }));
  test("the softmax scale goes into the query's weights where they are plain (no scaling of the scores), and stays a product elsewhere", async () => {
    const scaled = (dir: string) => {
      const graphs = prepareDecoderGraph(join(dir, "onnx", "model.onnx"), "logits", true, { oneToken: true });
      const nodes = onnx.ModelProto.decode(graphs.oneTokenBytes!).graph!.node!;
      return nodes.some((n) => n.output?.[0] === "sluice_split_0_scale");
    };
    const plainWeights = await buildSyntheticModel(join(root.path, "scale-folded"), { preset: "tiny-bytes", variant: "fused", seed: 4 });
    const external = await buildSyntheticModel(join(root.path, "scale-kept"), { preset: "tiny-bytes", variant: "fused", seed: 4, externalDataThreshold: 0 });
    expect(scaled(plainWeights.dir)).toBe(false);
    expect(scaled(external.dir)).toBe(true);
    // Same logits either way (the external-weights graph as the reference), on both graphs.
    const [a, b] = await Promise.all([plainWeights.dir, external.dir].map((dir) => NodeDecoder.create(dir, { providers: ["cpu"], threads: 1 })));
    const [la, lb] = [await a!.forward([1, 2, 3, 4], a!.emptyCache()), await b!.forward([1, 2, 3, 4], b!.emptyCache())];
    expectClose(Array.from(la), Array.from(lb), 1e-5);
    await expectOneTokenAgrees(a!, [1, 17, 30]);
    await Promise.all([a!.release(), b!.release()]);
  });
  test("heads padded to 16 keep their size where the padding is not checked: weights held outside the graph, q/k norms before the attention, a rotary cache or a projection read elsewhere", async () => {
    const unchecked = [
      { externalDataThreshold: 0, qkNorm: false },
      { qkNorm: true },
    ];
    for (const [i, spec] of unchecked.entries()) {
      const info = await buildSyntheticModel(join(root.path, `pad-kept-${i}`), { preset: "tiny-qwen3", variant: "fused", seed: 3, shape: { headDim: 8 }, ...spec });
      const d = await NodeDecoder.create(info.dir, { providers: ["cpu"], threads: 1 });
      expect(d.stepMode).toBe("split");
      expect(d.spec.headDim).toBe(16);
      expect(d.notes.join("\n")).not.toContain("padded");
      expect((await d.forward([1, 2, 3], d.emptyCache())).every(Number.isFinite)).toBe(true);
      await d.release();
    }
    // Nor where a rotary cache has another reader, which would see it narrowed.
    const shared = await buildSyntheticModel(join(root.path, "pad-shared-cos"), { preset: "tiny-bytes", variant: "fused", seed: 3, shape: { headDim: 8 } });
    const model = load(join(shared.dir, "onnx", "model.onnx"));
    const cos = model.graph!.node!.find((n) => n.opType === "GroupQueryAttention")!.input![7]!;
    model.graph!.node!.push({ opType: "Identity", input: [cos], output: ["cos_copy"] });
    model.graph!.output!.push({ name: "cos_copy", type: { tensorType: { elemType: 1 } } });
    expect(splitAttention(model)!.headDims).toBeUndefined();
    // Nor where a projection's output has another reader, which would see it narrowed (or scaled).
    const readQuery = load(join(shared.dir, "onnx", "model.onnx"));
    const q = readQuery.graph!.node!.find((n) => n.opType === "GroupQueryAttention")!.input![0]!;
    readQuery.graph!.node!.push({ opType: "Identity", input: [q], output: ["q_copy"] });
    readQuery.graph!.output!.push({ name: "q_copy", type: { tensorType: { elemType: 1 } } });
    expect(splitAttention(readQuery)!.headDims).toBeUndefined();
    expect(splitAttention(load(join(shared.dir, "onnx", "model.onnx")))!.headDims).toEqual({ exported: 16, used: 8 });
    // Where it is checked, the decoder reads the size from the graph and says so.
    const info = await buildSyntheticModel(join(root.path, "pad-dropped"), { preset: "tiny-bytes", variant: "fused", seed: 3, shape: { headDim: 8 } });
    const d = await NodeDecoder.create(info.dir, { providers: ["cpu"], threads: 1 });
    expect(d.spec.headDim).toBe(8);
    expect(d.notes).toContain("heads of 8 dimensions, not the 16 they were padded to for GroupQueryAttention's kernel (the padding's weights are zero)");
    await expectOneTokenAgrees(d, [1, 17, 30]);
    await d.release();
  });
  test("split attention leaves float16 graphs to the gathered outputs", async () => {
    const info = await buildSyntheticModel(join(root.path, "half-split"), { preset: "tiny-qwen3", variant: "fused", dtype: "float16", seed: 3 });
    expect(splitAttention(load(join(info.dir, "onnx", "model.onnx")))).toBeNull();
  });
  test("float32: same logits and cache as the in-place shared buffer", () => check("float32"));
  test("float16: same logits and cache as the in-place shared buffer", () => check("float16"));

  test("a decoder with external weights is loaded from memory with its weights found beside the file", async () => {
    const info = await buildSyntheticModel(join(root.path, "external"), { preset: "tiny-bytes", variant: "fused", seed: 5, externalDataThreshold: 0 });
    const d = await NodeDecoder.create(info.dir, { providers: ["cpu"], threads: 1 });
    expect(d.stepKv?.blocks).toHaveLength(d.spec.layers.length);
    const logits = await d.forward([1, 2, 3], d.emptyCache());
    expect(logits.length).toBe(d.spec.vocabSize);
    expect(logits.every(Number.isFinite)).toBe(true);
    await d.release();
  });

  test("the one-token graph of a small model gives the general graph's logits and new keys and values within float tolerance", async () => {
    const info = await buildSyntheticModel(join(root.path, "one-token"), { preset: "tiny-bytes", variant: "fused", seed: 9 });
    const d = await NodeDecoder.create(info.dir, { providers: ["cpu"], threads: 1 });
    expect(d.oneTokenSession).not.toBeNull();
    const oneToken = d.oneTokenSession!;
    // The general graph also takes where its logits start (verification reads several positions).
    expect(oneToken.inputNames).toEqual(d.session.inputNames.filter((n) => n !== LOGITS_START_INPUT));
    expect(oneToken.outputNames).toEqual(d.session.outputNames);
    await expectOneTokenAgrees(d, [1, 17, 30]);
    const { layers } = d.spec;
    await d.release();
    const graphs = prepareDecoderGraph(join(info.dir, "onnx", "model.onnx"), "logits", true, { oneToken: true });
    const nodes = (bytes: Uint8Array | null) => onnx.ModelProto.decode(bytes!).graph!.node!.length;
    expect(nodes(graphs.oneTokenBytes)).toBeLessThan(nodes(graphs.bytes) - 5 * layers.length);
    // A model of 16 MiB of weights or more gets no second session (nor a second copy of them).
    const large = await buildSyntheticModel(join(root.path, "one-token-large"), { preset: "tiny-qwen3", variant: "fused", seed: 9 });
    expect(modelFileBytes(join(large.dir, "onnx", "model.onnx"))).toBeGreaterThan(16 * 2 ** 20);
    const big = await NodeDecoder.create(large.dir, { providers: ["cpu"], threads: 1 });
    expect(big.stepMode).toBe("split");
    expect(big.oneTokenSession).toBeNull();
    await big.release();
  });

  test("a packed q/k/v export loads with split attention and a one-token graph that agrees with the general one", async () => {
    const info = await buildSyntheticModel(join(root.path, "packed-load"), { preset: "tiny-bytes", variant: "fused", packedQkv: true, seed: 4 });
    const d = await NodeDecoder.create(info.dir, { providers: ["cpu"], threads: 1 });
    expect(d.stepMode).toBe("split");
    expect(d.oneTokenSession).not.toBeNull();
    const prompt = await d.forward([5, 6, 7, 8], d.emptyCache());
    expect(prompt.every(Number.isFinite)).toBe(true);
    await expectOneTokenAgrees(d, [4, 11]);
    await d.release();
  });

  test("split attention also rewrites exports that rename the presents through Identity", async () => {
    const info = await buildSyntheticModel(join(root.path, "renamed"), { preset: "tiny-qwen3", variant: "fused", seed: 6 });
    const path = join(info.dir, "onnx", "model.onnx");
    const model = load(path);
    for (const n of model.graph!.node!.filter((x) => x.opType === "GroupQueryAttention")) {
      for (const i of [1, 2]) {
        const name = n.output![i]!;
        n.output![i] = `${name}_inner`;
        model.graph!.node!.push({ opType: "Identity", input: [`${name}_inner`], output: [name] });
      }
    }
    const renamed = onnx.ModelProto.encode(model).finish();
    const rewritten = onnx.ModelProto.decode(renamed);
    expect(splitAttention(rewritten)?.kind).toBe("split");
    const session = await ort.InferenceSession.create(onnx.ModelProto.encode(rewritten).finish());
    expect(session.outputNames.some((n) => n.startsWith("present."))).toBe(false);
    // A present that feeds real computation cannot be dropped: such a graph is left alone.
    const odd = onnx.ModelProto.decode(renamed);
    const gqa = odd.graph!.node!.find((x) => x.opType === "GroupQueryAttention")!;
    odd.graph!.node!.push({ opType: "Neg", input: [gqa.output![1]!], output: ["odd"] });
    expect(splitAttention(odd)).toBeNull();
  });

  test("a shared-buffer graph no rewrite fits runs in place and decodes as the rewritten one does, through either binding", async () => {
    const make = async (name: string) => (await buildSyntheticModel(join(root.path, name), { preset: "tiny-qwen3", variant: "fused", seed: 8 })).dir;
    const [plainDir, symbolicDir] = [await make("inplace-ref"), await make("inplace")];
    // Symbolic cache dims: neither rewrite can size its nodes, so the presents are fetched in place.
    const path = join(symbolicDir, "onnx", "model.onnx");
    const model = load(path);
    for (const input of model.graph!.input!.filter((i) => i.name!.startsWith("past_key_values."))) {
      const dims = input.type!.tensorType!.shape!.dim!;
      dims[1] = { dimParam: "kv_heads" };
      dims[3] = { dimParam: "head_size" };
    }
    writeFileSync(path, onnx.ModelProto.encode(model).finish());
    const decoders: Decoder[] = [];
    for (const binding of ["node", "capi"] as const) {
      for (const dir of [plainDir, symbolicDir]) decoders.push(await openDecoder(dir, { providers: ["cpu"], threads: 1, binding }));
    }
    expect(decoders.map((d) => d.stepMode)).toEqual(["split", "inplace", "split", "inplace"]);
    const tokens = await Promise.all(
      decoders.map(async (d) => {
        const kv = new FusedKvBackend(d, 1 << 26);
        const seqs = [kv.open(64), kv.open(64), kv.open(64)];
        let logits = await Promise.all(seqs.map((s, i) => kv.prefill(s, [10 + i, 20, 30 + 2 * i].slice(0, 1 + i))));
        const out: number[][] = [];
        for (let step = 0; step < 6; step++) {
          const next = logits.map((l) => l.indexOf(Math.max(...l)));
          out.push(next);
          logits = await kv.decode(seqs, next);
        }
        await d.release();
        return out;
      }),
    );
    for (const t of tokens.slice(1)) expect(t).toEqual(tokens[0]!);
  });

  test("a graph without GroupQueryAttention is left alone", async () => {
    const info = await buildSyntheticModel(join(root.path, "standard"), { preset: "tiny-qwen3", variant: "standard", seed: 3 });
    expect(addStepKvOutputs(load(join(info.dir, "onnx", "model.onnx")))).toBeNull();
  });

  test("logits trimmed to the last position equal the last position of the full logits", async () => {
    for (const variant of ["standard", "fused"] as const) {
      const info = await buildSyntheticModel(join(root.path, `trim-${variant}`), { preset: "tiny-qwen3", variant, seed: 4 });
      const path = join(info.dir, "onnx", "model.onnx");
      const model = load(path);
      expect(trimLogitsToLastPosition(model, "logits")).toBe(true);
      const full = await ort.InferenceSession.create(path);
      const trimmed = await ort.InferenceSession.create(onnx.ModelProto.encode(model).finish());
      const meta = full.inputMetadata.find((m) => m.name === "past_key_values.0.key") as unknown as { shape: number[] };
      const [heads, dim] = [meta.shape[1]!, meta.shape[3]!];
      const ids = [5, 9, 200, 31, 7];
      const feeds: Record<string, ort.Tensor> = {
        input_ids: int64Tensor(ids, [1, ids.length]),
        attention_mask: int64Tensor(ids.map(() => 1), [1, ids.length]),
      };
      if (full.inputNames.includes("position_ids")) feeds.position_ids = int64Tensor(ids.map((_, i) => i), [1, ids.length]);
      for (const name of full.inputNames.filter((n) => n.startsWith("past_key_values."))) {
        feeds[name] = floatTensor("float32", new Float32Array(heads * (variant === "fused" ? 8 : 0) * dim), [1, heads, variant === "fused" ? 8 : 0, dim]);
      }
      const a = (await full.run(feeds)).logits!;
      const b = (await trimmed.run(feeds)).logits!;
      expect(b.dims).toEqual([1, 1, a.dims[2]!]);
      const last = Array.from((a.data as Float32Array).subarray((ids.length - 1) * a.dims[2]!));
      expectClose(Array.from(b.data as Float32Array), last, 1e-6);
    }
  });

  test("logits from a block-quantised projection (MatMulNBits, as int4 exports have) are trimmed to the last position too", async () => {
    // hidden [1, T, 32] -> MatMulNBits (4 bits, blocks of 16) -> + bias -> logits [1, T, 8]
    const [K, N, BLOCK] = [32, 8, 16];
    const T = onnx.TensorProto.DataType;
    const bytes = (a: ArrayBufferView) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
    const weights = Uint8Array.from({ length: N * (K / BLOCK) * (BLOCK / 2) }, (_, i) => (i * 37 + 11) % 256);
    const scales = Float32Array.from({ length: N * (K / BLOCK) }, (_, i) => 0.01 + i / 1000);
    const bias = Float32Array.from({ length: N }, (_, i) => i / 10);
    const info = (name: string, dims: (number | string)[]): onnx.IValueInfoProto => ({
      name,
      type: { tensorType: { elemType: T.FLOAT, shape: { dim: dims.map((d) => (typeof d === "number" ? { dimValue: d } : { dimParam: d })) } } },
    });
    const build = () =>
      onnx.ModelProto.decode(
        onnx.ModelProto.encode({
          irVersion: 8,
          opsetImport: [{ domain: "", version: 17 }, { domain: "com.microsoft", version: 1 }],
          graph: {
            name: "nbits",
            input: [info("hidden", [1, "tokens", K])],
            output: [info("logits", [1, "tokens", N])],
            initializer: [
              { name: "w", dataType: T.UINT8, dims: [N, K / BLOCK, BLOCK / 2], rawData: weights },
              { name: "scales", dataType: T.FLOAT, dims: [N * (K / BLOCK)], rawData: bytes(scales) },
              { name: "bias", dataType: T.FLOAT, dims: [N], rawData: bytes(bias) },
            ],
            node: [
              {
                opType: "MatMulNBits",
                domain: "com.microsoft",
                input: ["hidden", "w", "scales"],
                output: ["projected"],
                attribute: [
                  { name: "K", type: onnx.AttributeProto.AttributeType.INT, i: K },
                  { name: "N", type: onnx.AttributeProto.AttributeType.INT, i: N },
                  { name: "bits", type: onnx.AttributeProto.AttributeType.INT, i: 4 },
                  { name: "block_size", type: onnx.AttributeProto.AttributeType.INT, i: BLOCK },
                ],
              },
              { opType: "Add", input: ["projected", "bias"], output: ["logits"] },
            ],
          },
        }).finish(),
      );
    const model = build();
    expect(trimLogitsToLastPosition(model, "logits")).toBe(true);
    const full = await ort.InferenceSession.create(onnx.ModelProto.encode(build()).finish());
    const trimmed = await ort.InferenceSession.create(onnx.ModelProto.encode(model).finish());
    const tokens = 5;
    const hidden = floatTensor("float32", Float32Array.from({ length: tokens * K }, (_, i) => Math.sin(i)), [1, tokens, K]);
    const a = (await full.run({ hidden })).logits!;
    const b = (await trimmed.run({ hidden })).logits!;
    expect(b.dims).toEqual([1, 1, N]);
    const last = Array.from((a.data as Float32Array).subarray((tokens - 1) * N));
    expect(last.some((x) => Math.abs(x) > 0.01)).toBe(true);
    expectClose(Array.from(b.data as Float32Array), last, 1e-5);
  });
});
