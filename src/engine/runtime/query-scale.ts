// The attention's softmax scale (1/sqrt(head size)) multiplied into the query's projection at
// load, where split-attention.ts can do it exactly (attention-weights.ts): the scores then need
// no scaling of their own. Rotary embeddings are linear, so scaling q before them is scaling it
// after. For the one-token graph that is a Mul per layer less (the dot product with the new key is
// summed element-wise there, then scaled): about 2% of stories260K's decode step.
import type { onnx } from "onnx-proto";
import { attentionProjections, GraphIndex, type AttentionLayer } from "./attention-weights.ts";

/** Scales each layer's query columns (and bias) by its scale; false, and nothing changed, where one is not plain. */
export function foldQueryScale(graph: onnx.IGraphProto, layers: (AttentionLayer & { scale: number })[]): boolean {
  const found = attentionProjections(new GraphIndex(graph), layers);
  if (!found) return false;
  for (const [i, { layer, q }] of found.entries()) {
    const qDim = layer.heads * layer.dim;
    const scale = layers[i]!.scale;
    for (const m of [q.weight, q.bias]) {
      if (!m) continue;
      const data = m.data;
      for (let r = 0; r < m.rows; r++) for (let c = 0; c < qDim; c++) data[r * m.cols + c]! *= scale;
      m.replace(data, m.rows, m.cols);
    }
  }
  return true;
}
