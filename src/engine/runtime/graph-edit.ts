// Small helpers for editing a decoded ONNX model at load time (see step-kv-outputs.ts and
// split-attention.ts): constants, nodes, attributes and what the graph declares of an input.
import { onnx } from "onnx-proto";

export const INT64 = onnx.TensorProto.DataType.INT64;
export const FLOAT = onnx.TensorProto.DataType.FLOAT;
const A = onnx.AttributeProto.AttributeType;

export function int64Constant(name: string, values: number[], dims: number[]): onnx.INodeProto {
  const raw = new Uint8Array(values.length * 8);
  const view = new DataView(raw.buffer);
  values.forEach((v, i) => view.setBigInt64(i * 8, BigInt(v), true));
  return node("Constant", [], [name], { value: { name: `${name}_value`, dataType: INT64, dims, rawData: raw } });
}

export function floatConstant(name: string, value: number): onnx.INodeProto {
  const raw = new Uint8Array(4);
  new DataView(raw.buffer).setFloat32(0, value, true);
  return node("Constant", [], [name], { value: { name: `${name}_value`, dataType: FLOAT, dims: [], rawData: raw } });
}

type AttrValue = number | { float: number } | number[] | onnx.ITensorProto;

/** A node; plain numbers are INT attributes, `{ float }` FLOAT, arrays INTS, objects TENSOR. */
export function node(opType: string, input: string[], output: string[], attrs: Record<string, AttrValue> = {}, domain = ""): onnx.INodeProto {
  const attribute = Object.entries(attrs).map(([name, v]): onnx.IAttributeProto => {
    if (typeof v === "number") return { name, type: A.INT, i: v };
    if (Array.isArray(v)) return { name, type: A.INTS, ints: v };
    if ("float" in v && typeof v.float === "number") return { name, type: A.FLOAT, f: v.float };
    return { name, type: A.TENSOR, t: v as onnx.ITensorProto };
  });
  return { opType, input, output, attribute, ...(domain ? { domain } : {}) };
}

/** An attribute's value as a number (INT or FLOAT), or `fallback` when absent. */
export function numberAttr(n: onnx.INodeProto, name: string, fallback: number): number {
  const a = n.attribute?.find((x) => x.name === name);
  if (!a) return fallback;
  if (a.type === A.FLOAT) return a.f ?? fallback;
  return Number(a.i ?? fallback);
}

/** Element type and dims (null where symbolic) of a graph input. */
export function inputInfo(graph: onnx.IGraphProto, name: string): { elemType: number; dims: (number | null)[] } | null {
  const vi = graph.input?.find((i) => i.name === name);
  const t = vi?.type?.tensorType;
  if (!t?.elemType || !t.shape?.dim) return null;
  return { elemType: t.elemType, dims: t.shape.dim.map((d) => (d.dimValue != null && Number(d.dimValue) > 0 ? Number(d.dimValue) : null)) };
}

export function tensorOutput(name: string, elemType: number, dims: (number | string)[]): onnx.IValueInfoProto {
  return {
    name,
    type: { tensorType: { elemType, shape: { dim: dims.map((d) => (typeof d === "number" ? { dimValue: d } : { dimParam: d })) } } },
  };
}

/**
 * Nodes computing, from GroupQueryAttention's seqlens_k (the index of each row's last token) and
 * the query, the absolute positions [batch, tokens] of a run's tokens, named `${p}_positions`.
 */
export function positionNodes(p: string, seqlensK: string, query: string): onnx.INodeProto[] {
  return [
    int64Constant(`${p}_one_idx`, [1], []),
    int64Constant(`${p}_zero`, [0], []),
    int64Constant(`${p}_one`, [1], []),
    int64Constant(`${p}_col`, [-1, 1], [2]),
    node("Cast", [seqlensK], [`${p}_last`], { to: INT64 }),
    node("Reshape", [`${p}_last`, `${p}_col`], [`${p}_last_col`]),
    node("Shape", [query], [`${p}_qshape`]),
    node("Gather", [`${p}_qshape`, `${p}_one_idx`], [`${p}_tokens`], { axis: 0 }),
    node("Sub", [`${p}_last_col`, `${p}_tokens`], [`${p}_before`]),
    node("Add", [`${p}_before`, `${p}_one`], [`${p}_first`]),
    node("Range", [`${p}_zero`, `${p}_tokens`, `${p}_one`], [`${p}_offsets`]),
    node("Add", [`${p}_first`, `${p}_offsets`], [`${p}_positions`]),
  ];
}
