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
//
// All layers' new positions leave the graph as one output: the binding makes a JavaScript tensor
// and a copy for each fetched output, which for a small model cost more than the Concat that
// packs them (stories260K: about a tenth of its step for its 10 outputs).
import type { onnx } from "onnx-proto";
import { inputInfo, int64Constant, node, positionNodes, tensorOutput } from "./graph-edit.ts";

/** Blocks of the packed step output holding one layer's new keys and values. */
export interface StepBlocks {
  key: number;
  value: number;
}

export interface StepKvOutputs {
  /** How the new positions are obtained: attention split around the cache, or gathered from the presents. */
  kind: "split" | "gather";
  /**
   * The graph output [2 * layers * batch, kv_heads, new tokens, head_dim]: the new keys (or
   * values) of one layer are block b, rows [b * batch, (b + 1) * batch).
   */
  packed: string;
  /** By past key input name: where that layer's new keys and values are in `packed`. */
  blocks: Map<string, StepBlocks>;
  /** Set when the rewrite dropped zero-padded head dimensions (see unpad-heads.ts). */
  headDims?: { exported: number; used: number };
  /**
   * Set when the value inputs are declared in blocks of this many positions, [batch, kv_heads,
   * capacity / block, block, head_dim] (the canonical attention's, see canonical-attention.ts):
   * the same memory as the cache buffer, fed with these dims.
   */
  valueBlock?: number;
}

export const PACKED_STEP_OUTPUT = "sluice_step_kv";

/**
 * Packs per-layer step tensors [batch, heads, new tokens, dim] (all of one type and shape) into
 * the one graph output, in the order given: its description, and the node and output to add.
 */
export function packStepOutputs(
  kind: StepKvOutputs["kind"],
  layers: { pastKey: string; key: string; value: string }[],
  elemType: number,
  heads: number,
  dim: number,
): { step: StepKvOutputs; node: onnx.INodeProto; output: onnx.IValueInfoProto } {
  const blocks = new Map<string, StepBlocks>();
  layers.forEach((l, i) => blocks.set(l.pastKey, { key: 2 * i, value: 2 * i + 1 }));
  return {
    step: { kind, packed: PACKED_STEP_OUTPUT, blocks },
    node: node("Concat", layers.flatMap((l) => [l.key, l.value]), [PACKED_STEP_OUTPUT], { axis: 0 }),
    output: tensorOutput(PACKED_STEP_OUTPUT, elemType, ["sluice_step_rows", heads, "sequence_length", dim]),
  };
}

/**
 * Adds the packed step output to a GroupQueryAttention decoder, a pair of blocks per
 * GroupQueryAttention node, keyed by the node's past key input. Returns null when the graph has
 * none (the standard contract, where the present is a fresh concatenation anyway) or when the
 * nodes' cache shapes are not fixed in the graph's inputs or differ between layers.
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
  const info = inputInfo(graph, first.input?.[3] ?? "");
  const [, heads, , dim] = info?.dims ?? [];
  if (!info || !heads || !dim) return null;
  nodes.push(int64Constant(`${p}_expand`, [1, heads, 1, dim], [4]), node("Expand", [`${p}_positions4`, `${p}_expand`], [`${p}_index`]));
  const layers: { pastKey: string; key: string; value: string }[] = [];
  for (const [i, n] of attention.entries()) {
    const [pastKey, pastValue] = [n.input?.[3], n.input?.[4]];
    const [presentKey, presentValue] = [n.output?.[1], n.output?.[2]];
    if (!pastKey || !pastValue || !presentKey || !presentValue || n.input?.[5] !== seqlensK) return null;
    const layer = inputInfo(graph, pastKey);
    if (layer?.elemType !== info.elemType || layer.dims[1] !== heads || layer.dims[3] !== dim) return null;
    const names = { pastKey, key: `${p}.${i}.key`, value: `${p}.${i}.value` };
    for (const [from, to] of [[presentKey, names.key], [presentValue, names.value]] as const) {
      nodes.push(node("GatherElements", [from, `${p}_index`], [to], { axis: 2 }));
    }
    layers.push(names);
  }
  const packed = packStepOutputs("gather", layers, info.elemType, heads, dim);
  graph.node!.push(...nodes, packed.node);
  graph.output = [...(graph.output ?? []), packed.output];
  return packed.step;
}
