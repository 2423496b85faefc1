// onnxruntime-node copies every fetched output into a new JavaScript buffer after each run, also
// a pre-allocated one. For a GroupQueryAttention graph whose present outputs share the past
// buffer, that copy is the whole cache of the batch at every step: the per-token cost grows with
// the context although ONNX Runtime itself wrote only the new positions.
//
// So the decoder is loaded with extra outputs that hold only the positions a run adds (gathered
// from each present at seqlens_k), and the presents are not fetched. The cache stays in the
// engine's own buffers, fed as the past (which the binding wraps without a copy); the engine
// writes the new positions into it. ONNX Runtime then concatenates past and new into its own
// arena, per row over the row's real length only, which costs far less than the binding's copy
// of the whole buffer into fresh memory.
//
// The extra nodes are appended as a second GraphProto under ModelProto.graph: protobuf merges
// repeated occurrences of an embedded message (its repeated fields are concatenated), so the
// original bytes, weights included, are passed through untouched.
import { onnx } from "onnx-proto";
import { inputInfo, int64Constant, node, positionNodes, tensorOutput } from "./graph-edit.ts";

export interface StepOutputNames {
  key: string;
  value: string;
}

export interface StepKvGraph {
  /** How the new positions are obtained: attention split around the cache, or gathered from the presents. */
  kind: "split" | "gather";
  /** The model with the extra outputs. */
  bytes: Uint8Array;
  /** By past key input name: the outputs [batch, kv_heads, new tokens, head_dim] of that layer. */
  outputs: Map<string, StepOutputNames>;
}

const GRAPH_FIELD = 7;

function varint(n: number): number[] {
  const out: number[] = [];
  while (n > 0x7f) {
    out.push((n & 0x7f) | 0x80);
    n = Math.floor(n / 128);
  }
  out.push(n);
  return out;
}

/**
 * Adds the step outputs to a GroupQueryAttention decoder, one pair per GroupQueryAttention node,
 * keyed by the node's past key input. Returns null when the graph has none (the standard
 * contract, where the present is a fresh concatenation anyway) or when a node's cache shape is
 * not fixed in the graph's inputs.
 */
export function addStepKvOutputs(model: Uint8Array, decoded: onnx.ModelProto = onnx.ModelProto.decode(model)): StepKvGraph | null {
  const graph = decoded.graph;
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
  const extra = onnx.GraphProto.encode({ node: nodes, output: outputInfos }).finish();
  const header = [(GRAPH_FIELD << 3) | 2, ...varint(extra.length)];
  const bytes = new Uint8Array(model.length + header.length + extra.length);
  bytes.set(model, 0);
  bytes.set(header, model.length);
  bytes.set(extra, model.length + header.length);
  return { kind: "gather", bytes, outputs };
}
