import { describe, expect, test } from "bun:test";
import * as ort from "onnxruntime-node";
import { onnx } from "onnx-proto";
import { GraphBuilder, serializeModel } from "../../src/modelkit/index.ts";
import { fromHalfBits, toHalfBits } from "../../src/modelkit/onnx/dtype.ts";
import { floatTensor, int32Tensor } from "../../src/modelkit/onnx/tensor.ts";

describe("ONNX graph builder", () => {
  test("builds a runnable graph with symbolic dims, typed attributes and deduplicated constants", async () => {
    const g = new GraphBuilder("t");
    const x = g.input("x", "float32", ["batch_size", 3]);
    const one = g.f32([1, 2, 3]);
    expect(g.f32([1, 2, 3])).toBe(one);
    const y = g.op("Add", [x, one]);
    const sm = g.op("Softmax", [y], { axis: -1 });
    const z = g.op("ReduceSum", [sm, g.i64([1])], { keepdims: 0 });
    const lrelu = g.op("LeakyRelu", [x], { alpha: { float: 0.5 } });
    g.output("z", "float32", ["batch_size"], z);
    g.output("lrelu", "float32", ["batch_size", 3], lrelu);
    const { model, externalData } = serializeModel(g, { opsets: [{ domain: "", version: 17 }] });
    expect(externalData).toBeNull();
    const decoded = onnx.ModelProto.decode(model);
    expect(decoded.graph?.input?.[0].type?.tensorType?.shape?.dim?.[0].dimParam).toBe("batch_size");
    const alpha = decoded.graph?.node?.find((n) => n.opType === "LeakyRelu")?.attribute?.[0];
    expect(alpha?.type).toBe(onnx.AttributeProto.AttributeType.FLOAT);
    const s = await ort.InferenceSession.create(model);
    const r = await s.run({ x: new ort.Tensor("float32", Float32Array.from([0, 0, 0, -2, 4, 1]), [2, 3]) });
    expect(Array.from(r.z.data as Float32Array).map((v) => Math.round(v * 1e5) / 1e5)).toEqual([1, 1]);
    expect(Array.from(r.lrelu.data as Float32Array)).toEqual([0, 0, 0, -1, 4, 1]);
  });

  test("rejects non-integer int attributes and duplicate names", () => {
    const g = new GraphBuilder("t");
    const x = g.input("x", "float32", [1]);
    expect(() => g.op("LeakyRelu", [x], { alpha: 0.5 })).toThrow(/not an integer/);
    expect(() => g.input("x", "float32", [1])).toThrow(/duplicate/);
  });

  test("tensors of every supported type, and float16 conversion", async () => {
    for (const v of [0, 1, -2.5, 65504, 1e-7, 6.1e-5, 3.14159]) {
      expect(Math.abs(fromHalfBits(toHalfBits(v)) - v)).toBeLessThanOrEqual(Math.abs(v) * 1e-3 + 6e-8);
    }
    expect(fromHalfBits(toHalfBits(1e6))).toBe(Infinity);
    const g = new GraphBuilder("types");
    const h = g.initializer("h", floatTensor("float16", [2], Float32Array.of(1.5, -2)));
    const i = g.initializer("i", int32Tensor([2], [3, 4]));
    g.output("hf", "float32", [2], g.op("Cast", [h], { to: 1 }));
    g.output("if", "float32", [2], g.op("Cast", [i], { to: 1 }));
    const s = await ort.InferenceSession.create(serializeModel(g, { opsets: [{ domain: "", version: 17 }] }).model);
    const r = await s.run({});
    expect(Array.from(r.hf.data as Float32Array)).toEqual([1.5, -2]);
    expect(Array.from(r.if.data as Float32Array)).toEqual([3, 4]);
  });
});
