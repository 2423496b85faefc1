// importGguf on files written as llama.cpp's converter lays them out (gguf-fixtures.ts): the
// imported graph computes what the same weights compute when the model kit builds them directly
// (llama's adjacent-pair q/k rows permuted back, qwen3's q/k norms and qwen2's biases found); a
// 4-bit import keeps Q4_0, Q4_1 and Q4_K blocks as they are and computes what the float import
// of the same file computes; `auto` keeps the file's precision class; and every malformed file is
// refused in words, leaving nothing behind.
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, readdirSync, readFileSync, truncateSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import * as ort from "onnxruntime-node";
import { onnx } from "onnx-proto";
import { importGguf } from "../../src/modelkit/gguf/import.ts";
import type { LlamaConfig } from "../../src/modelkit/llama/config.ts";
import { buildDecoderModel } from "../../src/modelkit/llama/graph.ts";
import { randomWeights } from "../../src/modelkit/llama/random.ts";
import { T } from "../helpers/gguf-writer.ts";
import { tempDir } from "../helpers/paths.ts";
import { greedy } from "./greedy.ts";
import { spmTokenizer, writeGgufModel } from "./gguf-fixtures.ts";

const dir = tempDir("gguf-import-");
afterAll(() => dir.remove());

function config(modelType: LlamaConfig["modelType"], over: Partial<LlamaConfig> = {}): LlamaConfig {
  return {
    modelType,
    hiddenSize: 256,
    intermediateSize: 512,
    numLayers: 2,
    numHeads: 8,
    numKvHeads: 4,
    headDim: 32,
    vocabSize: 320,
    maxPositionEmbeddings: 128,
    rmsNormEps: 1e-6,
    ropeTheta: 10000,
    tieWordEmbeddings: true,
    qkNorm: modelType === "qwen3",
    qkvBias: modelType === "qwen2",
    bosTokenId: 1,
    eosTokenId: 2,
    ...over,
  };
}

/** Logits of every position of `ids` from a fused decoder. */
async function logits(model: Uint8Array | string, c: LlamaConfig, ids: number[]): Promise<Float32Array> {
  const s = await ort.InferenceSession.create(model as string);
  const feeds: Record<string, ort.Tensor> = {
    input_ids: new ort.Tensor("int64", BigInt64Array.from(ids, BigInt), [1, ids.length]),
    attention_mask: new ort.Tensor("int64", new BigInt64Array(ids.length).fill(1n), [1, ids.length]),
    position_ids: new ort.Tensor("int64", BigInt64Array.from(ids.map((_, i) => BigInt(i))), [1, ids.length]),
  };
  for (let i = 0; i < c.numLayers; i++) {
    for (const kind of ["key", "value"]) feeds[`past_key_values.${i}.${kind}`] = new ort.Tensor("float32", new Float32Array(0), [1, c.numKvHeads, 0, c.headDim]);
  }
  const r = await s.run(feeds);
  const out = (r.logits!.data as Float32Array).slice();
  await s.release();
  return out;
}

function maxDiff(a: Float32Array, b: Float32Array): number {
  expect(a.length).toBe(b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}

const PROMPT = [1, 260, 300, 7, 99, 270, 3, 311];

describe("architectures: the file's tensors where the graph expects them", () => {
  for (const arch of ["llama", "qwen2", "qwen3"] as const) {
    test(`${arch}: an F32 file computes what its weights compute built directly`, async () => {
      const c = config(arch, arch === "llama" ? { tieWordEmbeddings: false } : {});
      const w = randomWeights(c, 11);
      if (c.qkvBias) {
        for (const l of w.layers) {
          l.qBias = Float32Array.from({ length: c.numHeads * c.headDim }, (_, i) => Math.sin(i) * 0.1);
          l.kBias = Float32Array.from({ length: c.numKvHeads * c.headDim }, (_, i) => Math.cos(i) * 0.1);
          l.vBias = Float32Array.from({ length: c.numKvHeads * c.headDim }, (_, i) => Math.sin(3 * i) * 0.1);
        }
      }
      const file = join(dir.path, `${arch}.gguf`);
      writeGgufModel(file, { arch, config: c, weights: w, tokenizer: spmTokenizer(c.vocabSize) });
      const m = await importGguf({ file, out: join(dir.path, `${arch}-fp32`), id: `test/${arch}`, dtype: "fp32" });
      expect(m.architecture).toBe(arch);
      expect(m.config).toMatchObject({ modelType: arch, hiddenSize: 256, numKvHeads: 4, qkNorm: arch === "qwen3", tieWordEmbeddings: arch !== "llama" });
      const direct = buildDecoderModel(c, w, { variant: "fused", dtype: "float32", rotaryCacheLength: 128 }).model;
      const want = await logits(direct, c, PROMPT);
      const got = await logits(join(m.dir, m.onnxFile), c, PROMPT);
      expect(maxDiff(got, want)).toBeLessThan(1e-4);
    });
  }
});

test("llama with rope_freqs.weight (Llama 3.1's scaling as llama.cpp stores it): the frequencies divided by its factors", async () => {
  const factors = Array.from({ length: 16 }, (_, i) => (i < 8 ? 1 : 1 + (i - 7) * 2));
  const c = config("llama", { ropeFreqFactors: factors });
  const w = randomWeights(c, 21);
  const file = join(dir.path, "rope-freqs.gguf");
  writeGgufModel(file, {
    arch: "llama",
    config: c,
    weights: w,
    tokenizer: spmTokenizer(c.vocabSize),
    extraTensors: [{ name: "rope_freqs.weight", dims: [16], type: T.F32, bytes: new Uint8Array(Float32Array.from(factors).buffer) }],
  });
  const m = await importGguf({ file, out: join(dir.path, "rope-freqs"), id: "test/rope-freqs", dtype: "fp32" });
  expect(m.config.ropeFreqFactors).toEqual(factors);
  expect(m.notes.some((n) => n.startsWith("rope_freqs.weight"))).toBe(true);
  // Long enough that the slow frequencies' rotation shows.
  const ids = Array.from({ length: 64 }, (_, i) => 3 + ((i * 37) % 300));
  const got = await logits(join(m.dir, m.onnxFile), c, ids);
  const want = await logits(buildDecoderModel(c, w, { variant: "fused", dtype: "float32", rotaryCacheLength: 128 }).model, c, ids);
  const plain = await logits(buildDecoderModel({ ...c, ropeFreqFactors: undefined }, w, { variant: "fused", dtype: "float32", rotaryCacheLength: 128 }).model, c, ids);
  expect(maxDiff(got, want)).toBeLessThan(1e-4);
  expect(maxDiff(got, plain)).toBeGreaterThan(1e-2);
});

describe("4-bit files", () => {
  const c = config("llama");
  const TYPES: Record<string, number> = { attn_q: T.Q4_K, attn_k: T.Q4_1, attn_v: T.Q4_0, attn_output: T.Q4_K, ffn_gate: T.Q4_0, ffn_up: T.Q4_1, ffn_down: T.Q4_K, token_embd: T.Q4_0 };
  const file = join(dir.path, "q4.gguf");
  writeGgufModel(file, { arch: "llama", config: c, weights: randomWeights(c, 5), tokenizer: spmTokenizer(c.vocabSize), typeOf: (n) => TYPES[n.replace(/^blk\.\d+\./, "").replace(/\.weight$/, "")]! });

  test("auto makes it q4; its blocks go to MatMulNBits as they are, with the mins as block offsets, and it computes what the float import computes", async () => {
    const q4 = await importGguf({ file, out: join(dir.path, "q4"), id: "test/q4", accuracyLevel: 1 });
    expect(q4.dtype).toBe("q4");
    expect(q4.notes).toContain("--dtype auto: q4 (the file's weights: Q4_K 42%, Q4_0 32%, Q4_1 26%)");
    const fp32 = await importGguf({ file, out: join(dir.path, "q4-as-fp32"), id: "test/q4-fp32", dtype: "fp32" });
    const graph = onnx.ModelProto.decode(readFileSync(join(q4.dir, q4.onnxFile))).graph!;
    const names = graph.initializer!.map((t) => t.name!);
    // q/k/v packed in one product, gate/up in another: each product with a Q4_1 or Q4_K part
    // brings its mins (qkv, o, gate_up, down: four a layer), and Q4_0 alone none.
    expect(names).toEqual(expect.arrayContaining(["model.layers.0.self_attn.qkv_proj.weight_block_offsets", "model.layers.1.mlp.down_proj.weight_block_offsets"]));
    expect(names.filter((n) => n.endsWith("_block_offsets"))).toHaveLength(8);
    expect(graph.node!.filter((n) => n.opType === "GatherBlockQuantized")).toHaveLength(1);
    const a = await logits(join(q4.dir, q4.onnxFile), c, PROMPT);
    const b = await logits(join(fp32.dir, fp32.onnxFile), c, PROMPT);
    // The same weights both ways: what is left is float rounding in a different order.
    expect(maxDiff(a, b)).toBeLessThan(2e-3);
    const shape = { numLayers: c.numLayers, numKvHeads: c.numKvHeads, headDim: c.headDim, vocabSize: c.vocabSize };
    const [ta] = await greedy(await ort.InferenceSession.create(join(q4.dir, q4.onnxFile)), shape, [PROMPT], { steps: 12 });
    const [tb] = await greedy(await ort.InferenceSession.create(join(fp32.dir, fp32.onnxFile)), shape, [PROMPT], { steps: 12 });
    expect(ta).toEqual(tb!);
  });

  test("auto: 6- and 8-bit files stay float (fp32 on the CPU, fp16 for CUDA)", async () => {
    const f = join(dir.path, "q8.gguf");
    writeGgufModel(f, { arch: "qwen3", config: config("qwen3"), weights: randomWeights(config("qwen3"), 2), tokenizer: spmTokenizer(320), typeOf: (n) => (n.includes("ffn") ? T.Q6_K : T.Q8_0) });
    expect((await importGguf({ file: f, out: join(dir.path, "q8"), id: "test/q8" })).dtype).toBe("fp32");
    expect((await importGguf({ file: f, out: join(dir.path, "q8-cuda"), id: "test/q8c", device: "cuda" })).dtype).toBe("fp16");
    expect((await importGguf({ file, out: join(dir.path, "q4-cuda"), id: "test/q4c", device: "cuda" })).dtype).toBe("q4f16");
  });
});

describe("refusals, in words, with nothing left behind", () => {
  const c = config("qwen3");
  const good = join(dir.path, "good.gguf");
  writeGgufModel(good, { arch: "qwen3", config: c, weights: randomWeights(c, 3), tokenizer: spmTokenizer(320) });

  async function refused(file: string, pattern: RegExp): Promise<void> {
    const out = join(dir.path, `refused-${Math.random().toString(36).slice(2)}`);
    await expect(importGguf({ file, out, id: "test/x", dtype: "fp32" })).rejects.toThrow(pattern);
    expect(existsSync(out)).toBe(false);
    expect(readdirSync(dir.path).filter((n) => n.includes(".importing-"))).toEqual([]);
  }

  test("a truncated file", async () => {
    const f = join(dir.path, "cut.gguf");
    writeFileSync(f, readFileSync(good));
    truncateSync(f, statSync(f).size - 1000);
    await refused(f, /cut\.gguf is truncated: tensor output_norm\.weight .* ends at byte \d+, but the file has \d+ bytes/);
  });

  test("not a GGUF file", async () => {
    const f = join(dir.path, "not.gguf");
    writeFileSync(f, "PK\u0003\u0004 this is a zip");
    await refused(f, /not a GGUF file/);
  });

  test("an unknown tensor type, architecture or tokenizer", async () => {
    const w = randomWeights(c, 3);
    const q2 = join(dir.path, "q2k.gguf");
    writeGgufModel(q2, { arch: "qwen3", config: c, weights: w, tokenizer: spmTokenizer(320) });
    // Q2_K's id (10) in place of F32's in the first tensor's info: its name is the first 2-D tensor.
    const bytes = readFileSync(q2);
    const at = bytes.indexOf(Buffer.from("token_embd.weight")) + "token_embd.weight".length + 4 + 16;
    bytes.writeUInt32LE(10, at);
    writeFileSync(q2, bytes);
    await refused(q2, /tensor token_embd\.weight is Q2_K, which this importer does not read \(supported: F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, BF16\)/);

    const gemma = join(dir.path, "gemma.gguf");
    writeGgufModel(gemma, { arch: "qwen3", config: c, weights: w, tokenizer: spmTokenizer(320), extra: { "general.architecture": "gemma3" } });
    await refused(gemma, /unsupported architecture gemma3 \(general\.architecture\); supported: llama .*qwen2 .*qwen3/);

    const bert = join(dir.path, "bert-tok.gguf");
    writeGgufModel(bert, { arch: "qwen3", config: c, weights: w, tokenizer: { ...spmTokenizer(320), "tokenizer.ggml.model": "bert" } });
    await refused(bert, /tokenizer\.ggml\.model "bert" is not supported/);

    const pre = join(dir.path, "pre.gguf");
    writeGgufModel(pre, { arch: "qwen3", config: c, weights: w, tokenizer: { ...spmTokenizer(320), "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.merges": ["a b"], "tokenizer.ggml.pre": "falcon" } });
    await refused(pre, /tokenizer\.ggml\.pre "falcon" is not supported/);
  });

  test("a tensor whose shape disagrees with the hyperparameters", async () => {
    const f = join(dir.path, "shape.gguf");
    writeGgufModel(f, { arch: "qwen3", config: c, weights: randomWeights(c, 3), tokenizer: spmTokenizer(320), extra: { "qwen3.feed_forward_length": 384 } });
    await refused(f, /tensor blk\.0\.ffn_gate\.weight has shape \[512, 256\] \(ggml \[256, 512\]\), but the file's hyperparameters imply \[384, 256\]/);
  });
});
