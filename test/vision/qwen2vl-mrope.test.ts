// The multimodal rotary decoder: with the same position on all three rows it is the ordinary
// decoder; each frequency section follows its own position row (temporal, height, width).
import { describe, expect, test } from "bun:test";
import * as ort from "onnxruntime-node";
import type { LlamaConfig } from "../../src/modelkit/llama/config.ts";
import { buildDecoderModel } from "../../src/modelkit/llama/graph.ts";
import { randomWeights } from "../../src/modelkit/llama/random.ts";

const C: LlamaConfig = {
  modelType: "llama",
  hiddenSize: 32,
  intermediateSize: 64,
  numLayers: 2,
  numHeads: 2,
  numKvHeads: 1,
  headDim: 16,
  vocabSize: 60,
  maxPositionEmbeddings: 128,
  rmsNormEps: 1e-6,
  ropeTheta: 10000,
  tieWordEmbeddings: true,
  qkNorm: false,
  bosTokenId: 0,
  eosTokenId: 1,
};
const W = randomWeights(C, 5);
const IDS = [3, 17, 42, 8, 29, 11];

async function session(section?: [number, number, number]): Promise<ort.InferenceSession> {
  return ort.InferenceSession.create(buildDecoderModel(C, W, { variant: "standard", dtype: "float32", mropeSection: section }).model);
}

/** Logits of IDS at the given positions ([n] or [3, n] row-major). */
async function logits(s: ort.InferenceSession, positions: number[]): Promise<Float32Array> {
  const n = IDS.length;
  const feeds: Record<string, ort.Tensor> = {
    input_ids: new ort.Tensor("int64", BigInt64Array.from(IDS.map(BigInt)), [1, n]),
    attention_mask: new ort.Tensor("int64", new BigInt64Array(n).fill(1n), [1, n]),
    position_ids: new ort.Tensor("int64", BigInt64Array.from(positions.map(BigInt)), positions.length === n ? [1, n] : [3, 1, n]),
  };
  for (let i = 0; i < C.numLayers; i++) {
    for (const k of ["key", "value"]) feeds[`past_key_values.${i}.${k}`] = new ort.Tensor("float32", new Float32Array(0), [1, C.numKvHeads, 0, C.headDim]);
  }
  return (await s.run(feeds)).logits!.data as Float32Array;
}

const maxDiff = (a: Float32Array, b: Float32Array) => a.reduce((m, v, i) => Math.max(m, Math.abs(v - b[i]!)), 0);

describe("multimodal rotary decoder", () => {
  const plain = [0, 1, 2, 3, 4, 5];
  const other = [0, 3, 1, 7, 2, 9];

  test("takes position_ids [3, batch, seq] and equals the 1-D decoder when the rows agree", async () => {
    const m = await session([2, 3, 3]);
    expect(m.inputMetadata.find((x) => x.name === "position_ids")).toMatchObject({ shape: [3, "batch_size", "sequence_length"] });
    const ref = await logits(await session(), plain);
    expect(maxDiff(await logits(m, [...plain, ...plain, ...plain]), ref)).toBeLessThan(1e-4);
  });

  test("each section follows its own row", async () => {
    const ref = await logits(await session(), plain);
    const cases: [[number, number, number], number][] = [
      [[8, 0, 0], 0],
      [[0, 8, 0], 1],
      [[0, 0, 8], 2],
    ];
    for (const [section, row] of cases) {
      const m = await session(section);
      const rows = [other, other, other];
      rows[row] = plain;
      // Only `row` is read: the other rows' positions change nothing.
      expect(maxDiff(await logits(m, rows.flat()), ref)).toBeLessThan(1e-4);
    }
    // A mixed split reads every row: moving the width row alone changes the logits.
    const mixed = await session([2, 3, 3]);
    expect(maxDiff(await logits(mixed, [...plain, ...plain, ...other]), ref)).toBeGreaterThan(1e-3);
  });

  test("sections must cover head_dim / 2, and the fused variant refuses mrope", () => {
    expect(() => buildDecoderModel(C, W, { variant: "standard", dtype: "float32", mropeSection: [2, 3, 2] })).toThrow(/sum to head_dim/);
    expect(() => buildDecoderModel(C, W, { variant: "fused", dtype: "float32", mropeSection: [2, 3, 3] })).toThrow(/standard variant/);
  });
});
