// GroupQueryAttention's CPU kernel wants a head size that is a multiple of 16, so the model kit
// pads smaller heads with dimensions whose key and value weights are zero (modelkit/llama/graph.ts,
// gqaHeadDim): stories260K's heads of 8 become 16. Once split-attention.ts has replaced the
// GroupQueryAttention nodes nothing needs that size, yet every query, key and value projection, the
// attention products, the cache and its copies still carry the zero half: a sixth of stories260K's
// weights, half its cache. This rewrite, run by splitAttention before it builds the attention,
// drops the head dimensions whose key and value weights are zero in every head of every layer:
//
//   - a key dimension of zero weight adds nothing to q·k whatever q holds there, and a value
//     dimension of zero weight adds nothing to the output, so the query's and the output
//     projection's matching columns and rows go too;
//   - rotary embeddings turn dimension i with i + dim/2 (the halves form): a pair goes only as a
//     whole, and the cos/sin caches keep the columns of the pairs that stay;
//   - the cache inputs take the new size, which the engine reads from the graph.
//
// Only what it can check is rewritten: float projections held inline as MatMul initializers (with
// or without a bias Add, separate or packed q/k/v), each used once, an output projection of the
// same kind, whole-head rotary or none. Anything else (4-bit weights, external data, q/k norms
// between the projection and the attention) keeps its padded heads.
import type { onnx } from "onnx-proto";
import { attentionProjections, floats, GraphIndex, type AttentionLayer, type Matrix, type Projection } from "./attention-weights.ts";

/** Whether columns [from + h * dim + j] (h < heads) are zero in every row of the projection. */
function zeroColumn(p: Projection, from: number, heads: number, dim: number, j: number): boolean {
  const { data, rows, cols } = p.weight;
  for (let h = 0; h < heads; h++) {
    const c = from + h * dim + j;
    if (p.bias && p.bias.data[c] !== 0) return false;
    for (let r = 0; r < rows; r++) if (data[r * cols + c] !== 0) return false;
  }
  return true;
}

/** Keeps, of each of `heads` groups of `dim` columns from `from`, the columns `kept`. */
function keepColumns(data: Float32Array, rows: number, cols: number, parts: { from: number; heads: number }[], dim: number, kept: number[]): { data: Float32Array; cols: number } {
  const picks: number[] = [];
  let at = 0;
  for (const part of parts) {
    for (let c = at; c < part.from; c++) picks.push(c);
    for (let h = 0; h < part.heads; h++) for (const j of kept) picks.push(part.from + h * dim + j);
    at = part.from + part.heads * dim;
  }
  for (let c = at; c < cols; c++) picks.push(c);
  const out = new Float32Array(rows * picks.length);
  for (let r = 0; r < rows; r++) for (let i = 0; i < picks.length; i++) out[r * picks.length + i] = data[r * cols + picks[i]!]!;
  return { data: out, cols: picks.length };
}

/**
 * Drops the head dimensions the layers' key and value weights leave at zero (see above); the new
 * head size, or null when there is none to drop or the graph is not one this can check.
 */
export function unpadHeads(graph: onnx.IGraphProto, layers: AttentionLayer[]): number | null {
  const dim = layers[0]!.dim;
  const rotary = layers[0]!.rotaryDim;
  if (layers.some((l) => l.dim !== dim || l.rotaryDim !== rotary) || (rotary !== 0 && rotary !== dim) || dim % 2 !== 0) return null;
  const index = new GraphIndex(graph);
  const found = attentionProjections(index, layers);
  if (!found || found.some((f) => !f.output)) return null;
  // A dimension goes when its key and value columns are zero in every head of every layer; with
  // rotary embeddings, with the other of its pair.
  const zero = (j: number) => found.every((f) => zeroColumn(f.k.p, f.k.from, f.layer.kvHeads, dim, j) && zeroColumn(f.v.p, f.v.from, f.layer.kvHeads, dim, j));
  const half = dim / 2;
  const kept: number[] = [];
  if (rotary) {
    const low = Array.from({ length: half }, (_, j) => j).filter((j) => !(zero(j) && zero(j + half)));
    kept.push(...low, ...low.map((j) => j + half));
  } else for (let j = 0; j < dim; j++) if (!zero(j)) kept.push(j);
  if (kept.length === dim || kept.length === 0) return null;
  const d = kept.length;
  // What changes size must have no reader but the attention nodes: the cache inputs, and the
  // rotary caches [positions, dim / 2] (shared by layers). Checked before anything changes.
  const readers = (name: string) => layers.reduce((n, l) => n + l.node.input!.filter((x) => x === name).length, 0);
  const only = (name: string) => index.uses.get(name) === readers(name);
  if (!layers.every((l) => only(l.node.input![3]!) && only(l.node.input![4]!))) return null;
  const caches = new Map<string, Matrix>();
  if (rotary) {
    for (const name of new Set(layers.flatMap((l) => [l.node.input![7]!, l.node.input![8]!]))) {
      const m = only(name) ? floats(index.initializers.get(name), 2) : null;
      if (!m || m.cols !== half) return null;
      caches.set(name, m);
    }
  }

  for (const f of found) {
    const { heads, kvHeads } = f.layer;
    const parts = f.layer.packed
      ? [{ from: 0, heads }, { from: heads * dim, heads: kvHeads }, { from: (heads + kvHeads) * dim, heads: kvHeads }]
      : [{ from: 0, heads }];
    const projections = f.layer.packed ? [{ p: f.q, parts }] : [{ p: f.q, parts }, { p: f.k.p, parts: [{ from: 0, heads: kvHeads }] }, { p: f.v.p, parts: [{ from: 0, heads: kvHeads }] }];
    for (const { p, parts: ps } of projections) {
      const w = keepColumns(p.weight.data, p.weight.rows, p.weight.cols, ps, dim, kept);
      p.weight.replace(w.data, p.weight.rows, w.cols);
      if (p.bias) {
        const b = keepColumns(p.bias.data, 1, p.bias.cols, ps, dim, kept);
        p.bias.replace(b.data, 1, b.cols);
      }
    }
    // The output projection's rows [heads * dim, out]: the same selection on its rows.
    const o = f.output!;
    const rows = new Float32Array(heads * d * o.cols);
    for (let h = 0; h < heads; h++) {
      kept.forEach((j, i) => rows.set(o.data.subarray((h * dim + j) * o.cols, (h * dim + j + 1) * o.cols), (h * d + i) * o.cols));
    }
    o.replace(rows, heads * d, o.cols);
  }
  // The rotary caches: the columns of the pairs kept.
  const low = kept.slice(0, d / 2);
  for (const m of caches.values()) m.replace(keepColumns(m.data, m.rows, m.cols, [{ from: 0, heads: 1 }], half, low).data, m.rows, d / 2);
  // The cache inputs [batch, kv_heads, positions, dim].
  for (const l of layers) {
    for (const name of [l.node.input![3], l.node.input![4]]) {
      const shape = graph.input?.find((i) => i.name === name)?.type?.tensorType?.shape?.dim;
      if (shape?.[3]) shape[3] = { dimValue: d };
    }
  }
  return d;
}
