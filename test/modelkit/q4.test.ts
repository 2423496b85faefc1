// 4-bit block quantisation in MatMulNBits' layout: the bytes the contrib-op spec defines, the
// error bound of the rounding, and ONNX Runtime's own MatMulNBits computing x · dequantise(W).

import { describe, expect, test } from "bun:test";
import * as ort from "onnxruntime-node";
import { GraphBuilder, MS_DOMAIN, serializeModel } from "../../src/modelkit/onnx/builder.ts";
import { floatTensor, tensor } from "../../src/modelkit/onnx/tensor.ts";
import { Prng } from "../../src/modelkit/prng.ts";
import { dequantizeQ4, quantizeQ4, quantizeQ4Rows } from "../../src/modelkit/quant/q4.ts";

describe("q4 quantisation", () => {
  test("one column of 40 values: codes, nibble order, scale, zero point and padding as the spec lays them out", () => {
    // W [40, 1]: values 0..39 minus 10, so min -10, max 29: scale 39/15, zero point round(10/2.6) = 4.
    const k = 40;
    const w = Float32Array.from({ length: k }, (_, i) => i - 10);
    const q = quantizeQ4(w, k, 1);
    expect(q.blocks).toBe(2);
    expect(q.data.length).toBe(2 * 16);
    const scale0 = Math.fround(Math.fround(21 - -10) / 15); // block 0 holds -10..21
    expect(q.scales[0]).toBeCloseTo(scale0, 6);
    // Block 1 holds 22..29 (8 values) and zeros after: its range is [0, 29].
    expect(q.scales[1]).toBeCloseTo(29 / 15, 6);
    const zp0 = Math.round(10 / scale0);
    expect(q.zeroPoints.length).toBe(1);
    expect(q.zeroPoints[0]! & 15).toBe(zp0);
    expect(q.zeroPoints[0]! >> 4).toBe(0);
    // Byte 0 holds k = 0 (low nibble) and k = 1 (high nibble).
    const code = (v: number, s: number, z: number) => Math.min(15, Math.max(0, Math.round(v / s + z)));
    expect(q.data[0]! & 15).toBe(code(-10, scale0, zp0));
    expect(q.data[0]! >> 4).toBe(code(-9, scale0, zp0));
    // The padded tail of block 1 (k >= 40) holds the zero point's code (0 here).
    expect(q.data[16 + 4]).toBe(0);
  });

  test("every value within half a step of its block's scale; rows and column layouts agree", () => {
    const rng = new Prng(3);
    for (const [k, n] of [[64, 5], [72, 3], [33, 4], [7, 2]] as const) {
      const w = rng.uniformArray(k * n, 1);
      const q = quantizeQ4(w, k, n);
      const back = dequantizeQ4(q);
      for (let r = 0; r < k; r++) {
        for (let c = 0; c < n; c++) {
          const s = q.scales[c * q.blocks + Math.floor(r / 32)]!;
          expect(Math.abs(back[r * n + c]! - w[r * n + c]!)).toBeLessThanOrEqual(s / 2 + 1e-6);
        }
      }
      // The same vectors given as rows ([n, k]) quantise to the same bytes.
      const rows = new Float32Array(n * k);
      for (let r = 0; r < k; r++) for (let c = 0; c < n; c++) rows[c * k + r] = w[r * n + c]!;
      const q2 = quantizeQ4Rows(rows, n, k);
      expect(q2.data).toEqual(q.data);
      expect(q2.scales).toEqual(q.scales);
      expect(q2.zeroPoints).toEqual(q.zeroPoints);
    }
  });

  test("ONNX Runtime's MatMulNBits equals x times the dequantised weights, K a multiple of the block or not", async () => {
    const rng = new Prng(11);
    for (const [k, n, level] of [[64, 24, 1], [72, 10, 1], [48, 16, 0], [72, 10, 4]] as const) {
      const w = rng.uniformArray(k * n, 1);
      const q = quantizeQ4(w, k, n);
      const g = new GraphBuilder("nbits");
      const x = g.input("x", "float32", [3, k]);
      const b = g.initializer("B", tensor("uint8", [n, q.blocks, 16], q.data));
      const s = g.initializer("scales", floatTensor("float32", [n * q.blocks], q.scales));
      const z = g.initializer("zp", tensor("uint8", [q.zeroPoints.length], q.zeroPoints));
      g.output("y", "float32", [3, n], g.op("MatMulNBits", [x, b, s, z], { K: k, N: n, bits: 4, block_size: 32, ...(level ? { accuracy_level: level } : {}) }, MS_DOMAIN));
      const session = await ort.InferenceSession.create(serializeModel(g, { opsets: [{ domain: "", version: 17 }, { domain: MS_DOMAIN, version: 1 }] }).model);
      const xs = rng.uniformArray(3 * k, 1);
      const y = (await session.run({ x: new ort.Tensor("float32", xs, [3, k]) })).y!.data as Float32Array;
      const dq = dequantizeQ4(q);
      let worst = 0;
      let scale = 0;
      for (let r = 0; r < 3; r++) {
        for (let c = 0; c < n; c++) {
          let ref = 0;
          for (let i = 0; i < k; i++) ref += xs[r * k + i]! * dq[i * n + c]!;
          worst = Math.max(worst, Math.abs(ref - y[r * n + c]!));
          scale = Math.max(scale, Math.abs(ref));
        }
      }
      // accuracy_level 4 multiplies int8-quantised activations: about 1% of the output's scale.
      expect(worst / scale).toBeLessThan(level === 4 ? 0.02 : 1e-5);
      await session.release();
    }
  });
});
