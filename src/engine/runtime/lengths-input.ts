// GroupQueryAttention graphs take an attention mask [batch, total length] only to reduce it to two
// numbers: each row's seqlens_k (its count of ones, minus one) and the total sequence length (the
// mask's width), as onnxruntime-genai's builder and the model kit export them. The mask grows with
// the context, and where the cache stays on a device it would be the one input whose bytes do:
// a 4k-token row is 32 KB of int64 to move for 4 bytes of information. This rewrite makes the two
// numbers graph inputs of their own (int32, as GroupQueryAttention takes them), and drops the mask
// when nothing else reads it. The results are the same: the same values reach the same nodes.
import type { onnx } from "onnx-proto";

/** [batch] int32: each row's attended positions minus one (GroupQueryAttention's seqlens_k). */
export const SEQLENS_INPUT = "sluice_seqlens_k";
/** int32 scalar: the total sequence length (the mask's width). */
export const TOTAL_LENGTH_INPUT = "sluice_total_sequence_length";

const INT32 = 6;

/**
 * Feeds every GroupQueryAttention node's seqlens_k and total_sequence_length from the two inputs,
 * removes what only computed them, and the mask input `mask` if it is then unread. False (nothing
 * changed) when the graph has no such nodes or they do not share one pair of tensors.
 */
export function takeLengthsAsInputs(model: onnx.IModelProto, mask: string): boolean {
  const graph = model.graph;
  const attention = graph?.node?.filter((n) => n.opType === "GroupQueryAttention") ?? [];
  if (!graph || attention.length === 0) return false;
  const seqlens = attention[0]!.input?.[5];
  const total = attention[0]!.input?.[6];
  if (!seqlens || !total || attention.some((n) => n.input?.[5] !== seqlens || n.input?.[6] !== total)) return false;
  for (const n of graph.node!) {
    const inputs = n.input ?? [];
    for (let i = 0; i < inputs.length; i++) {
      if (inputs[i] === seqlens) inputs[i] = SEQLENS_INPUT;
      else if (inputs[i] === total) inputs[i] = TOTAL_LENGTH_INPUT;
    }
  }
  for (const o of graph.output ?? []) if (o.name === seqlens || o.name === total) return false;
  graph.input = [
    ...(graph.input ?? []),
    { name: SEQLENS_INPUT, type: { tensorType: { elemType: INT32, shape: { dim: [{ dimParam: "batch_size" }] } } } },
    { name: TOTAL_LENGTH_INPUT, type: { tensorType: { elemType: INT32, shape: { dim: [] } } } },
  ];
  removeDeadNodes(graph);
  const read = readNames(graph.node!, new Set<string>());
  if (!read.has(mask) && !(graph.output ?? []).some((o) => o.name === mask)) graph.input = graph.input.filter((i) => i.name !== mask);
  return true;
}

/** Names the nodes read, those of subgraphs (If, Loop, Scan bodies reading outer names) included. */
function readNames(nodes: onnx.INodeProto[], into: Set<string>): Set<string> {
  for (const n of nodes) {
    for (const x of n.input ?? []) into.add(x);
    for (const a of n.attribute ?? []) for (const g of [a.g, ...(a.graphs ?? [])]) if (g?.node) readNames(g.node, into);
  }
  return into;
}

/** Removes nodes none of whose outputs is read by another node or is a graph output, until none is left. */
function removeDeadNodes(graph: onnx.IGraphProto): void {
  const outputs = new Set((graph.output ?? []).map((o) => o.name));
  for (;;) {
    const read = readNames(graph.node ?? [], new Set<string>());
    const live = (graph.node ?? []).filter((n) => (n.output ?? []).some((o) => o && (read.has(o) || outputs.has(o))));
    if (live.length === graph.node!.length) break;
    graph.node = live;
  }
  // Constants only the removed nodes read (ONNX Runtime warns about each one left).
  const read = readNames(graph.node ?? [], new Set<string>());
  graph.initializer = (graph.initializer ?? []).filter((t) => read.has(t.name ?? "") || outputs.has(t.name ?? ""));
}
