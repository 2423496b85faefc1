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
//   A    = Σ_{j<p} e_j v_j,  Z = Σ_{j<p} e_j   in blocks of 64 absolute positions: each block one
//                                             product of 64 terms (one K block of MLAS whatever
//                                             its threads; never the one-row kernel), the blocks
//                                             summed in order by CumSum
//   out  = (2A + e_p v_p) / (Z + e_p)          the query's own key last, element-wise
//
// Masked positions contribute exact zeros (e = exp(-1e9 - m) = 0 and 0·v = 0 for finite v), which
// change no partial sum, so a buffer of any capacity (a multiple of 64) gives the same bits. In a
// run of several tokens the blocks holding its new positions (the tail) are gathered from the
// buffer and the new values put in their absolute places (one-hot products, exact: one non-zero
// term each); the blocks before them are the buffer's as they are, summed first, then the tail's.
// The value buffer is declared in blocks (blockValueInputs), so nothing copies it whole.
import type { onnx } from "onnx-proto";
import { FLOAT, floatConstant, int64Constant, node } from "./graph-edit.ts";

/** Positions per block of the value products; every capacity the engine gives is a multiple of it. */
export const CANONICAL_BLOCK = 64;

export interface CanonicalShared {
  /** [b, 1, 1, cap]: 0 where a buffer position is in the row's past, else -1e9. */
  pastBias: string;
  /** General graph only, names of the run-wide tensors below (see canonicalSharedNodes). */
  general: boolean;
}

/**
 * The run-wide nodes the layers share. A general run (t new tokens per row, the row's past ending
 * at `first`) also gets: the one-hot placement of its new tokens in the buffer ([b, 1, t, cap]);
 * the masks among them ([t, t]: the query's own key, the earlier ones); and the blocks that hold
 * them, its "tail": blocks first / BLOCK to (first + t - 1) / BLOCK, Wb = (t + 2 BLOCK - 2) / BLOCK
 * of them (the last may lie past the buffer: masked), their positions, which of them the buffer
 * holds, and the one-hot placement of the new tokens among them. Every block before the tail holds
 * past positions only (the "pure" blocks). `p` is split-attention's prefix, whose positions,
 * offsets, cap, cap range, past length and token count it reads.
 */
export function canonicalSharedNodes(p: string, oneToken: boolean, kvHeads: number): onnx.INodeProto[] {
  const B = CANONICAL_BLOCK;
  const shared: onnx.INodeProto[] = [
    floatConstant(`${p}_c_two`, 2),
    int64Constant(`${p}_c_axis_m1`, [-1], [1]),
    int64Constant(`${p}_c_block_axis`, [2], []),
    int64Constant(`${p}_c_last`, [-1], []),
    int64Constant(`${p}_c_e5`, [0, 0, 0, -1, B], [5]),
  ];
  if (oneToken) return shared;
  return [
    ...shared,
    int64Constant(`${p}_c_row4`, [1, 1, 1, -1], [4]),
    int64Constant(`${p}_c_pos4`, [0, 1, -1, 1], [4]),
    node("Reshape", [`${p}_cap_range`, `${p}_c_row4`], [`${p}_c_cap_row`]),
    node("Reshape", [`${p}_positions`, `${p}_c_pos4`], [`${p}_c_pos_col`]),
    node("Equal", [`${p}_c_cap_row`, `${p}_c_pos_col`], [`${p}_c_sel_b`]),
    node("Cast", [`${p}_c_sel_b`], [`${p}_c_sel`], { to: FLOAT }),
    node("Equal", [`${p}_offsets_col`, `${p}_offsets`], [`${p}_c_diag_b`]),
    node("Cast", [`${p}_c_diag_b`], [`${p}_c_diag`], { to: FLOAT }),
    node("Less", [`${p}_offsets`, `${p}_offsets_col`], [`${p}_c_before_b`]),
    node("Cast", [`${p}_c_before_b`], [`${p}_c_before`], { to: FLOAT }),
    // The tail's blocks: their indices [b, Wb], clamped into the buffer, and which are in it.
    int64Constant(`${p}_c_blk`, [B], []),
    int64Constant(`${p}_c_tail_pad`, [2 * B - 2], []),
    int64Constant(`${p}_c_zero`, [0], []),
    int64Constant(`${p}_c_one`, [1], []),
    node("Div", [`${p}_first`, `${p}_c_blk`], [`${p}_c_first_block`]),
    node("Div", [`${p}_cap_scalar`, `${p}_c_blk`], [`${p}_c_blocks`]),
    node("Sub", [`${p}_c_blocks`, `${p}_c_one`], [`${p}_c_last_block`]),
    node("Add", [`${p}_tokens`, `${p}_c_tail_pad`], [`${p}_c_tail_span`]),
    node("Div", [`${p}_c_tail_span`, `${p}_c_blk`], [`${p}_c_tail_blocks`]),
    node("Range", [`${p}_c_zero`, `${p}_c_tail_blocks`, `${p}_c_one`], [`${p}_c_tail_k`]),
    node("Add", [`${p}_c_first_block`, `${p}_c_tail_k`], [`${p}_c_tail_idx`]),
    node("Min", [`${p}_c_tail_idx`, `${p}_c_last_block`], [`${p}_c_tail_clamped`]),
    int64Constant(`${p}_c_idx4`, [0, 1, -1, 1], [4]),
    int64Constant(`${p}_c_kv_expand`, [1, kvHeads, 1, 1], [4]),
    node("Reshape", [`${p}_c_tail_clamped`, `${p}_c_idx4`], [`${p}_c_tail_idx4`]),
    node("Expand", [`${p}_c_tail_idx4`, `${p}_c_kv_expand`], [`${p}_c_tail_gather`]),
    node("Less", [`${p}_c_tail_idx`, `${p}_c_blocks`], [`${p}_c_tail_in_b`]),
    node("Cast", [`${p}_c_tail_in_b`], [`${p}_c_tail_in`], { to: FLOAT }),
    int64Constant(`${p}_c_valid5`, [0, 1, -1, 1, 1], [5]),
    node("Reshape", [`${p}_c_tail_in`, `${p}_c_valid5`], [`${p}_c_tail_valid`]),
    // The pure blocks' positions: [b, 1, blocks, 1, BLOCK], 1 before the tail, else 0.
    node("Mul", [`${p}_c_first_block`, `${p}_c_blk`], [`${p}_c_tail_start`]),
    int64Constant(`${p}_c_to4d`, [0, 1, 1, 1], [4]),
    node("Reshape", [`${p}_c_tail_start`, `${p}_c_to4d`], [`${p}_c_tail_start4`]),
    node("Less", [`${p}_cap_range`, `${p}_c_tail_start4`], [`${p}_c_pure_b`]),
    node("Cast", [`${p}_c_pure_b`], [`${p}_c_pure_4d`], { to: FLOAT }),
    int64Constant(`${p}_c_pure5`, [0, 1, -1, 1, B], [5]),
    node("Reshape", [`${p}_c_pure_4d`, `${p}_c_pure5`], [`${p}_c_pure`]),
    // The tail's positions [b, Wb * BLOCK]: which the buffer holds, and where the new tokens go.
    node("Mul", [`${p}_c_tail_blocks`, `${p}_c_blk`], [`${p}_c_tail_len`]),
    node("Range", [`${p}_c_zero`, `${p}_c_tail_len`, `${p}_c_one`], [`${p}_c_tail_offsets`]),
    node("Add", [`${p}_c_tail_start`, `${p}_c_tail_offsets`], [`${p}_c_tail_pos`]),
    node("Less", [`${p}_c_tail_pos`, `${p}_first`], [`${p}_c_tail_past_2d`]),
    int64Constant(`${p}_c_rows5`, [0, 1, -1, B, 1], [5]),
    node("Reshape", [`${p}_c_tail_past_2d`, `${p}_c_rows5`], [`${p}_c_tail_past`]),
    int64Constant(`${p}_c_tail_row4`, [0, 1, 1, -1], [4]),
    node("Reshape", [`${p}_c_tail_pos`, `${p}_c_tail_row4`], [`${p}_c_tail_row`]),
    node("Equal", [`${p}_c_tail_row`, `${p}_c_pos_col`], [`${p}_c_tail_sel_b`]),
    node("Cast", [`${p}_c_tail_sel_b`], [`${p}_c_tail_sel`], { to: FLOAT }),
    node("Transpose", [`${p}_c_tail_sel`], [`${p}_c_tail_sel_t`], { perm: [0, 1, 3, 2] }),
    int64Constant(`${p}_c_m1_1d`, [-1], [1]),
    int64Constant(`${p}_c_big_1d`, [2 ** 62], [1]),
    int64Constant(`${p}_c_axis2_1d`, [2], [1]),
  ];
}

/**
 * Declares the value inputs [batch, kv_heads, blocks, BLOCK, head_dim]: the same memory as the
 * cache buffer [batch, kv_heads, capacity, head_dim], fed so by the decoders (StepKvOutputs.valueBlock).
 * Reshaping a graph input costs ONNX Runtime a copy of it, here of the whole value cache per layer.
 */
export function blockValueInputs(graph: onnx.IGraphProto, names: string[]): void {
  for (const input of graph.input ?? []) {
    if (!names.includes(input.name ?? "")) continue;
    const dims = input.type!.tensorType!.shape!.dim!;
    input.type!.tensorType!.shape!.dim = [dims[0]!, dims[1]!, { dimParam: "sluice_value_blocks" }, { dimValue: CANONICAL_BLOCK }, dims[3]!];
  }
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
  /** float32 [b, kv, cap, d]: the key buffer. */
  pastKey: string;
  /** float32 [b, kv, cap / BLOCK, BLOCK, d]: the value buffer (see blockValueInputs). */
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
  const reduceLast = (op: "ReduceMax" | "ReduceSum", input: string, output: string) =>
    // ReduceSum takes its axes as an input from opset 13, ReduceMax from 18.
    (op === "ReduceSum" ? opset >= 13 : opset >= 18)
      ? node(op, [input, `${p}_c_axis_m1`], [output], { keepdims: 1 })
      : node(op, [input], [output], { axes: [-1], keepdims: 1 });
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
  out.push(scores(c.pastKey, `${l}_c_s_past_raw`), node("Add", [`${l}_c_s_past_raw`, `${p}_past_bias`], [`${l}_c_s_past`]), scores(c.key, `${l}_c_s_new_raw`));
  out.push(reduceLast("ReduceMax", `${l}_c_s_past`, `${l}_c_m_past`));
  if (c.oneToken) {
    // One new key: its score is its own maximum.
    out.push(node("Max", [`${l}_c_m_past`, `${l}_c_s_new_raw`], [`${l}_c_m`]));
  } else {
    out.push(
      node("Add", [`${l}_c_s_new_raw`, c.newBias], [`${l}_c_s_new`]),
      reduceLast("ReduceMax", `${l}_c_s_new`, `${l}_c_m_new`),
      node("Max", [`${l}_c_m_past`, `${l}_c_m_new`], [`${l}_c_m`]),
    );
  }
  const sNew = c.oneToken ? `${l}_c_s_new_raw` : `${l}_c_s_new`;
  out.push(
    node("Sub", [`${l}_c_s_past`, `${l}_c_m`], [`${l}_c_d_past`]),
    node("Exp", [`${l}_c_d_past`], [`${l}_c_e_past`]),
    node("Sub", [sNew, `${l}_c_m`], [`${l}_c_d_new`]),
    node("Exp", [`${l}_c_d_new`], [`${l}_c_e_new`]),
  );
  // The query's own key and value, and the keys before it in absolute places.
  let eSelf = `${l}_c_e_new`;
  let eAbs = `${l}_c_e_past`;
  // One token: [b, kv, 1, d] broadcasts over the group's queries.
  let vSelf = c.value;
  if (!c.oneToken) {
    const tiles = c.tiles!;
    eSelf = `${l}_c_e_self`;
    eAbs = `${l}_c_e_abs`;
    out.push(
      node("Mul", [`${l}_c_e_new`, tiles.diag], [`${l}_c_e_diag`]),
      reduceLast("ReduceSum", `${l}_c_e_diag`, eSelf),
      node("Mul", [`${l}_c_e_new`, tiles.before], [`${l}_c_e_before`]),
      node("MatMul", [`${l}_c_e_before`, `${p}_c_sel`], [`${l}_c_e_placed`]),
      node("Add", [`${l}_c_e_past`, `${l}_c_e_placed`], [eAbs]),
    );
    if (group > 1) {
      // Query m = g * t + i takes new token i's value.
      out.push(int64Constant(`${l}_c_vreps`, [1, 1, group, 1], [4]), node("Tile", [c.value, `${l}_c_vreps`], [`${l}_c_v_self`]));
      vSelf = `${l}_c_v_self`;
    }
  }
  // With a group of query heads the value products have two rows or more; a lone row (one query
  // head per key head, one token) would take the one-row kernel at alpha 1: halved, then doubled.
  const halve = group === 1;
  const product = (e: string, v: string, name: string) => node("FusedMatMul", [e, v], [name], { alpha: { float: halve ? 0.5 : 1 } }, "com.microsoft");
  const sums = halve ? `${l}_c_a_half` : `${l}_c_a`;
  out.push(
    // [b, kv, M, cap] -> [b, kv, blocks, M, BLOCK], against the values' [b, kv, blocks, BLOCK, d]
    node("Reshape", [eAbs, `${p}_c_e5`], [`${l}_c_e_blocks_t`]),
    node("Transpose", [`${l}_c_e_blocks_t`], [`${l}_c_e_blocks`], { perm: [0, 1, 3, 2, 4] }),
  );
  if (c.oneToken) {
    // Every key before the query is in the buffer: its blocks' sums, in order.
    out.push(
      product(`${l}_c_e_blocks`, c.pastValue, `${l}_c_a_blocks`),
      node("CumSum", [`${l}_c_a_blocks`, `${p}_c_block_axis`], [`${l}_c_a_cum`]),
      node("Gather", [`${l}_c_a_cum`, `${p}_c_last`], [sums], { axis: 2 }),
      reduceLast("ReduceSum", `${l}_c_e_blocks`, `${l}_c_z_blocks`),
      node("CumSum", [`${l}_c_z_blocks`, `${p}_c_block_axis`], [`${l}_c_z_cum`]),
      node("Gather", [`${l}_c_z_cum`, `${p}_c_last`], [`${l}_c_z`], { axis: 2 }),
    );
  } else {
    // The pure blocks' sums in order, then the tail's blocks, whose values are the buffer's
    // before the run and the run's new tokens from there: gathered, not the whole buffer copied.
    const gather = (data: string, name: string) => node("GatherND", [data, `${p}_c_tail_gather`], [name], { batch_dims: 2 });
    const lastKept = (input: string, name: string) => node("Slice", [input, `${p}_c_m1_1d`, `${p}_c_big_1d`, `${p}_c_axis2_1d`], [name]);
    out.push(
      node("Mul", [`${l}_c_e_blocks`, `${p}_c_pure`], [`${l}_c_e_pure`]),
      product(`${l}_c_e_pure`, c.pastValue, `${l}_c_a_pure_blocks`),
      node("CumSum", [`${l}_c_a_pure_blocks`, `${p}_c_block_axis`], [`${l}_c_a_pure_cum`]),
      lastKept(`${l}_c_a_pure_cum`, `${l}_c_a_pure`),
      reduceLast("ReduceSum", `${l}_c_e_pure`, `${l}_c_z_pure_blocks`),
      node("CumSum", [`${l}_c_z_pure_blocks`, `${p}_c_block_axis`], [`${l}_c_z_pure_cum`]),
      lastKept(`${l}_c_z_pure_cum`, `${l}_c_z_pure`),
      gather(`${l}_c_e_blocks`, `${l}_c_e_tail_raw`),
      node("Mul", [`${l}_c_e_tail_raw`, `${p}_c_tail_valid`], [`${l}_c_e_tail`]),
      gather(c.pastValue, `${l}_c_v_tail_past`),
      node("MatMul", [`${p}_c_tail_sel_t`, c.value], [`${l}_c_v_tail_new_4d`]),
      int64Constant(`${l}_c_v5`, [0, 0, -1, CANONICAL_BLOCK, dim], [5]),
      node("Reshape", [`${l}_c_v_tail_new_4d`, `${l}_c_v5`], [`${l}_c_v_tail_new`]),
      node("Where", [`${p}_c_tail_past`, `${l}_c_v_tail_past`, `${l}_c_v_tail_new`], [`${l}_c_v_tail`]),
      product(`${l}_c_e_tail`, `${l}_c_v_tail`, `${l}_c_a_tail`),
      node("Concat", [`${l}_c_a_pure`, `${l}_c_a_tail`], [`${l}_c_a_seq`], { axis: 2 }),
      node("CumSum", [`${l}_c_a_seq`, `${p}_c_block_axis`], [`${l}_c_a_cum`]),
      node("Gather", [`${l}_c_a_cum`, `${p}_c_last`], [sums], { axis: 2 }),
      reduceLast("ReduceSum", `${l}_c_e_tail`, `${l}_c_z_tail`),
      node("Concat", [`${l}_c_z_pure`, `${l}_c_z_tail`], [`${l}_c_z_seq`], { axis: 2 }),
      node("CumSum", [`${l}_c_z_seq`, `${p}_c_block_axis`], [`${l}_c_z_cum`]),
      node("Gather", [`${l}_c_z_cum`, `${p}_c_last`], [`${l}_c_z`], { axis: 2 }),
    );
  }
  if (halve) out.push(node("Mul", [sums, `${p}_c_two`], [`${l}_c_a`]));
  out.push(
    node("Mul", [eSelf, vSelf], [`${l}_c_a_self`]),
    node("Add", [`${l}_c_a`, `${l}_c_a_self`], [`${l}_c_num`]),
    node("Add", [`${l}_c_z`, eSelf], [`${l}_c_den`]),
    node("Div", [`${l}_c_num`, `${l}_c_den`], [c.out]),
  );
  return out;
}
