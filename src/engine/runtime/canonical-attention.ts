// Attention whose result for a query does not depend on how the positions around it were batched:
// the attention split-attention.ts builds with `invariant`, for `serve --batch-invariant`.
//
// The split attention computes softmax(scores)·V in two parts, over the cache buffer and over the
// run's new positions, with ONNX Runtime's Softmax and MatMul. Its result for position p then
// depends on more than positions 0..p: on which of them sit in the buffer and which are new in
// the same run (a decode step has p alone new, a verification run or a prompt chunk several), on
// the buffer's capacity (where the new keys land in the softmax's vector lanes), and on the
// matrix product's own choices (MLAS takes another kernel for a product of one row with alpha 1,
// and cuts the reduced axis in blocks whose size depends on how many columns each thread got).
// docs/BENCHMARKS.md, "Batch invariance", has the measurements.
//
// Here every query p computes the same operations on the same operands whatever the run:
//
//   s_j  = (q·k_j) · scale                    one dot product per key, alpha != 1 (never the
//                                             one-row kernel), the same for buffer and new keys
//   m    = max_j s_j                          exact in any order
//   e_j  = exp(s_j - m)                       element-wise (MLAS's exp: the same at any offset)
//   A    = Σ_{j<p} e_j v_j,  Z = Σ_{j<p} e_j   in blocks of 16 absolute positions: each block one
//                                             product of 16 terms (alpha 0.5: one K block, no
//                                             one-row kernel), blocks summed in order by CumSum
//   out  = (2A + e_p v_p) / (Z + e_p)          the query's own key last, element-wise
//
// Masked positions contribute exact zeros (e = exp(-1e9 - m) = 0 and 0·v = 0 for finite v), which
// change no partial sum, so a buffer of any capacity (a multiple of 16) gives the same bits. In a
// run of several tokens, the earlier new positions are moved to their absolute places (one-hot
// products, exact: one non-zero term each) in a copy of the value buffer: only such runs copy it.
import type { onnx } from "onnx-proto";
import { FLOAT, floatConstant, int64Constant, node } from "./graph-edit.ts";

/** Positions per block of the value products; every capacity the engine gives is a multiple of it. */
export const CANONICAL_BLOCK = 16;

export interface CanonicalShared {
  /** [b, 1, 1, cap]: 0 where a buffer position is in the row's past, else -1e9. */
  pastBias: string;
  /** General graph only, names of the run-wide tensors below (see canonicalSharedNodes). */
  general: boolean;
}

/**
 * The run-wide nodes the general graph's layers share: the one-hot placement of the new tokens
 * in the buffer ([b, 1, t, cap] and its transpose), which buffer positions hold the past
 * ([b, 1, cap, 1]), and the masks among the new tokens ([t, t]: the query's own key, the earlier
 * ones). `p` is split-attention's prefix, whose positions, offsets, cap range and past length it reads.
 */
export function canonicalSharedNodes(p: string, oneToken: boolean): onnx.INodeProto[] {
  const shared: onnx.INodeProto[] = [floatConstant(`${p}_c_two`, 2)];
  if (oneToken) return shared;
  return [
    ...shared,
    int64Constant(`${p}_c_row4`, [1, 1, 1, -1], [4]),
    int64Constant(`${p}_c_pos4`, [0, 1, -1, 1], [4]),
    int64Constant(`${p}_c_col2`, [-1, 1], [2]),
    node("Reshape", [`${p}_cap_range`, `${p}_c_row4`], [`${p}_c_cap_row`]),
    node("Reshape", [`${p}_positions`, `${p}_c_pos4`], [`${p}_c_pos_col`]),
    node("Equal", [`${p}_c_cap_row`, `${p}_c_pos_col`], [`${p}_c_sel_b`]),
    node("Cast", [`${p}_c_sel_b`], [`${p}_c_sel`], { to: FLOAT }),
    node("Transpose", [`${p}_c_sel`], [`${p}_c_sel_t`], { perm: [0, 1, 3, 2] }),
    node("Reshape", [`${p}_cap_range`, `${p}_c_col2`], [`${p}_c_cap_col`]),
    node("Less", [`${p}_c_cap_col`, `${p}_past_len`], [`${p}_c_past_rows`]),
    node("Equal", [`${p}_offsets_col`, `${p}_offsets`], [`${p}_c_diag_b`]),
    node("Cast", [`${p}_c_diag_b`], [`${p}_c_diag`], { to: FLOAT }),
    node("Less", [`${p}_offsets`, `${p}_offsets_col`], [`${p}_c_before_b`]),
    node("Cast", [`${p}_c_before_b`], [`${p}_c_before`], { to: FLOAT }),
  ];
}

export interface CanonicalLayer {
  /** Node name prefix of the layer. */
  l: string;
  /** split-attention's prefix (the shared nodes). */
  p: string;
  /** float32 [b, kv, group * t, d]: query m = g * t + i is query head g of new token i. */
  q: string;
  /** float32 [b, kv, t, d]: the run's new keys (rotated) and values. */
  key: string;
  value: string;
  /** float32 [b, kv, cap, d]: the cache buffer. */
  pastKey: string;
  pastValue: string;
  group: number;
  dim: number;
  scale: number;
  oneToken: boolean;
  /** The general graph's causal bias [group * t, t] (0 or -1e9) for this group size. */
  newBias: string;
  /** Tiles [group * t, t] of the masks of canonicalSharedNodes, for this group size. */
  tiles: { diag: string; before: string } | null;
  /** float32 [b, kv, group * t, d]: the attention's output. */
  out: string;
}

/** The masks among a general run's new tokens, tiled for `group` query heads per key head. */
export function canonicalTiles(p: string, group: number): { nodes: onnx.INodeProto[]; diag: string; before: string } {
  const reps = `${p}_c_reps_g${group}`;
  const diag = `${p}_c_diag_g${group}`;
  const before = `${p}_c_before_g${group}`;
  return {
    nodes: [int64Constant(reps, [group, 1], [2]), node("Tile", [`${p}_c_diag`, reps], [diag]), node("Tile", [`${p}_c_before`, reps], [before])],
    diag,
    before,
  };
}

/** One layer's canonical attention (see the header); its output is `c.out`. */
export function canonicalAttentionNodes(c: CanonicalLayer, opset: number): onnx.INodeProto[] {
  const { l, p, group, dim } = c;
  const out: onnx.INodeProto[] = [];
  const reduce = (op: "ReduceMax" | "ReduceSum", input: string, output: string, axis: number) => {
    // ReduceSum takes its axes as an input from opset 13, ReduceMax from 18.
    const asInput = op === "ReduceSum" ? opset >= 13 : opset >= 18;
    if (!asInput) return node(op, [input], [output], { axes: [axis], keepdims: 1 });
    return node(op, [input, `${l}_c_axis${axis < 0 ? "m" : ""}${Math.abs(axis)}`], [output], { keepdims: 1 });
  };
  out.push(int64Constant(`${l}_c_axism1`, [-1], [1]));
  // The scale as the products' alpha, so that no product runs MLAS's one-row kernel (taken only
  // for alpha 1); a scale of exactly 1 becomes a query halved and alpha 2, both exact.
  let q = c.q;
  let alpha = c.scale;
  if (alpha === 1) {
    out.push(floatConstant(`${l}_c_half`, 0.5), node("Mul", [c.q, `${l}_c_half`], [`${l}_c_q_half`]));
    q = `${l}_c_q_half`;
    alpha = 2;
  }
  const scores = (k: string, name: string) => node("FusedMatMul", [q, k], [name], { transB: 1, alpha: { float: alpha } }, "com.microsoft");
  out.push(
    scores(c.pastKey, `${l}_c_s_past_raw`),
    node("Add", [`${l}_c_s_past_raw`, `${p}_past_bias`], [`${l}_c_s_past`]),
    scores(c.key, `${l}_c_s_new_raw`),
  );
  const sNew = c.oneToken ? `${l}_c_s_new_raw` : `${l}_c_s_new`;
  if (!c.oneToken) out.push(node("Add", [`${l}_c_s_new_raw`, c.newBias], [sNew]));
  out.push(
    reduce("ReduceMax", `${l}_c_s_past`, `${l}_c_m_past`, -1),
    reduce("ReduceMax", sNew, `${l}_c_m_new`, -1),
    node("Max", [`${l}_c_m_past`, `${l}_c_m_new`], [`${l}_c_m`]),
    node("Sub", [`${l}_c_s_past`, `${l}_c_m`], [`${l}_c_d_past`]),
    node("Exp", [`${l}_c_d_past`], [`${l}_c_e_past`]),
    node("Sub", [sNew, `${l}_c_m`], [`${l}_c_d_new`]),
    node("Exp", [`${l}_c_d_new`], [`${l}_c_e_new`]),
  );
  // The query's own key and value, and the keys before it in absolute places.
  let eSelf = `${l}_c_e_new`;
  let eAbs = `${l}_c_e_past`;
  let vAbs = c.pastValue;
  let vSelf = c.value;
  if (!c.oneToken) {
    const tiles = c.tiles!;
    eSelf = `${l}_c_e_self`;
    eAbs = `${l}_c_e_abs`;
    vAbs = `${l}_c_v_abs`;
    out.push(
      node("Mul", [`${l}_c_e_new`, tiles.diag], [`${l}_c_e_diag`]),
      reduce("ReduceSum", `${l}_c_e_diag`, eSelf, -1),
      node("Mul", [`${l}_c_e_new`, tiles.before], [`${l}_c_e_before`]),
      node("MatMul", [`${l}_c_e_before`, `${p}_c_sel`], [`${l}_c_e_placed`]),
      node("Add", [`${l}_c_e_past`, `${l}_c_e_placed`], [eAbs]),
      node("MatMul", [`${p}_c_sel_t`, c.value], [`${l}_c_v_placed`]),
      node("Where", [`${p}_c_past_rows`, c.pastValue, `${l}_c_v_placed`], [vAbs]),
    );
  }
  if (group > 1) {
    out.push(int64Constant(`${l}_c_vreps`, [1, 1, group, 1], [4]), node("Tile", [c.value, `${l}_c_vreps`], [`${l}_c_v_self`]));
    vSelf = `${l}_c_v_self`;
  }
  out.push(
    // [b, kv, M, cap] -> [b, kv, blocks, M, 16]; [b, kv, cap, d] -> [b, kv, blocks, 16, d]
    int64Constant(`${l}_c_e5`, [0, 0, 0, -1, CANONICAL_BLOCK], [5]),
    int64Constant(`${l}_c_v5`, [0, 0, -1, CANONICAL_BLOCK, dim], [5]),
    node("Reshape", [eAbs, `${l}_c_e5`], [`${l}_c_e_blocks_t`]),
    node("Transpose", [`${l}_c_e_blocks_t`], [`${l}_c_e_blocks`], { perm: [0, 1, 3, 2, 4] }),
    node("Reshape", [vAbs, `${l}_c_v5`], [`${l}_c_v_blocks`]),
    node("FusedMatMul", [`${l}_c_e_blocks`, `${l}_c_v_blocks`], [`${l}_c_a_half`], { alpha: { float: 0.5 } }, "com.microsoft"),
    reduce("ReduceSum", `${l}_c_e_blocks`, `${l}_c_z_blocks`, -1),
    node("Concat", [`${l}_c_a_half`, `${l}_c_z_blocks`], [`${l}_c_az`], { axis: -1 }),
    int64Constant(`${l}_c_block_axis`, [2], []),
    node("CumSum", [`${l}_c_az`, `${l}_c_block_axis`], [`${l}_c_az_sum`]),
    int64Constant(`${l}_c_last`, [-1], []),
    node("Gather", [`${l}_c_az_sum`, `${l}_c_last`], [`${l}_c_az_all`], { axis: 2 }),
    // Split takes its sizes as an input from opset 13, as an attribute before.
    ...(opset >= 13
      ? [int64Constant(`${l}_c_az_parts`, [dim, 1], [2]), node("Split", [`${l}_c_az_all`, `${l}_c_az_parts`], [`${l}_c_a_h`, `${l}_c_z`], { axis: -1 })]
      : [node("Split", [`${l}_c_az_all`], [`${l}_c_a_h`, `${l}_c_z`], { axis: -1, split: [dim, 1] })]),
    node("Mul", [`${l}_c_a_h`, `${p}_c_two`], [`${l}_c_a`]),
    node("Mul", [eSelf, vSelf], [`${l}_c_a_self`]),
    node("Add", [`${l}_c_a`, `${l}_c_a_self`], [`${l}_c_num`]),
    node("Add", [`${l}_c_z`, eSelf], [`${l}_c_den`]),
    node("Div", [`${l}_c_num`, `${l}_c_den`], [c.out]),
  );
  return out;
}
