// onnxruntime-node copies every fetched output into a new JavaScript buffer after each run, also
// a pre-allocated one. For a GroupQueryAttention graph whose present outputs share the past
// buffer, that copy is the whole cache of the batch at every step: the per-token cost grows with
// the context although ONNX Runtime itself wrote only the new positions.
//
// So such a decoder is loaded with extra outputs that hold only the positions a run adds, and
// the presents are not fetched. The cache stays in the engine's own buffers, fed as the past
// (which the binding wraps without a copy); the engine writes the new positions into it. Where
// the attention can be rewritten (split-attention.ts) no present is built at all; otherwise
// (this module) the new positions are gathered from each present at seqlens_k, and ONNX Runtime
// still concatenates past and new into its own arena, per row over the row's real length.
import type { onnx } from "onnx-proto";
import { inputInfo, int64Constant, node, positionNodes, tensorOutput } from "./graph-edit.ts";

export interface StepOutputNames {
  key: string;
  value: string;
}

export interface StepKvOutputs {
  /** How the new positions are obtained: attention split around the cache, or gathered from the presents. */
  kind: "split" | "gather";
  /** By past key input name: the outputs [batch, kv_heads, new tokens, head_dim] of that layer. */
  outputs: Map<string, StepOutputNames>;
}

/**
 * Adds the step outputs to a GroupQueryAttention decoder, one pair per GroupQueryAttention node,
 * keyed by the node's past key input. Returns null when the graph has none (the standard
 * contract, where the present is a fresh concatenation anyway) or when a node's cache shape is
 * not fixed in the graph's inputs.
 */
export function addStepKvOutputs(model: onnx.IModelProto): StepKvOutputs | null {
  const graph = model.graph;
  const attention = graph?.node?.filter((n) => n.opType === "GroupQueryAttention") ?? [];
  if (!graph || attention.length === 0) return null;
  const first = attention[0]!;
  const query = first.input?.[0];
  const seqlensK = first.input?.[5];
  if (!query || !seqlensK) return null;

  const p = "sluice_step";
  const nodes: onnx.INodeProto[] = [
    ...positionNodes(p, seqlensK, query),
    int64Constant(`${p}_to4d`, [0, 1, -1, 1], [4]),
    node("Reshape", [`${p}_positions`, `${p}_to4d`], [`${p}_positions4`]),
  ];
  const outputs = new Map<string, StepOutputNames>();
  const outputInfos: onnx.IValueInfoProto[] = [];
  const indexByShape = new Map<string, string>();
  for (const [i, n] of attention.entries()) {
    const [pastKey, pastValue] = [n.input?.[3], n.input?.[4]];
    const [presentKey, presentValue] = [n.output?.[1], n.output?.[2]];
    if (!pastKey || !pastValue || !presentKey || !presentValue || n.input?.[5] !== seqlensK) return null;
    const info = inputInfo(graph, pastKey);
    const [, heads, , dim] = info?.dims ?? [];
    if (!info || !heads || !dim) return null;
    const shapeKey = `${heads}x${dim}`;
    let index = indexByShape.get(shapeKey);
    if (!index) {
      index = `${p}_index_${shapeKey}`;
      nodes.push(int64Constant(`${p}_expand_${shapeKey}`, [1, heads, 1, dim], [4]));
      nodes.push(node("Expand", [`${p}_positions4`, `${p}_expand_${shapeKey}`], [index]));
      indexByShape.set(shapeKey, index);
    }
    const names = { key: `${p}.${i}.key`, value: `${p}.${i}.value` };
    for (const [from, to] of [[presentKey, names.key], [presentValue, names.value]] as const) {
      nodes.push(node("GatherElements", [from, index], [to], { axis: 2 }));
      outputInfos.push(tensorOutput(to, info.elemType, ["batch_size", heads, "sequence_length", dim]));
    }
    outputs.set(pastKey, names);
  }
  graph.node!.push(...nodes);
  graph.output = [...(graph.output ?? []), ...outputInfos];
  return { kind: "gather", outputs };
}
