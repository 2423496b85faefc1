// GroupQueryAttention on the CPU concatenates the past and the new keys and values into a present
// buffer at every run: a copy of the whole cache that the engine does not need, since it keeps
// the cache itself (see step-kv-outputs.ts). This rewrite replaces each GroupQueryAttention node
// by the same attention computed in two parts, over the cache buffer as it is and over the run's
// new positions, so nothing is concatenated:
//
//   scores = [ q·past_kᵀ + past mask | q·new_kᵀ + causal mask ] · scale
//   out    = softmax(scores)[:, :cap] · past_v + softmax(scores)[:, cap:] · new_v
//
// The past mask hides the buffer's positions at or beyond each row's past length (read from
// seqlens_k, as GroupQueryAttention does). Rotary embeddings use the node's own cos/sin caches at
// the same positions. The new keys and values (rotated) become the graph's packed step output
// (see step-kv-outputs.ts), which the engine writes into its buffers. Grouped heads are matched
// without copying the cache: the query is viewed as [batch, kv_heads, group * tokens, head]
// against [batch, kv_heads, cap, head].
//
// Only configurations whose semantics this reproduces exactly are rewritten (separate or packed
// q/k/v, float32, one cache shape for all layers, rotary caches held as initializers, no sliding
// window, softcap, smooth softmax or extra inputs); any other graph is left to addStepKvOutputs.
// Packed q/k/v (one input holding all three, as onnxruntime-genai's builder makes for
// GroupQueryAttention on the CPU) is split into its parts first.
import type { onnx } from "onnx-proto";
import { onnx as proto } from "onnx-proto";
import { blockValueInputs, CANONICAL_BLOCK, canonicalAttentionNodes, canonicalSharedNodes, canonicalTiles } from "./canonical-attention.ts";
import { FLOAT, floatConstant, INT64, inputInfo, int64Constant, node, numberAttr, positionNodes } from "./graph-edit.ts";
import { packStepOutputs, type StepKvOutputs } from "./step-kv-outputs.ts";
import { type AttentionLayer } from "./attention-weights.ts";
import { foldQueryScale } from "./query-scale.ts";
import { unpadHeads } from "./unpad-heads.ts";

const MS = "com.microsoft";
/** Masked scores: far below any real score, finite so a fully masked part never makes NaN. */
const MASK_MIN = -1e9;

interface Layer extends AttentionLayer {
  /** The node's softmax scale, as it reads it (its default is of the head size as exported). */
  scale: number;
}

/** Dims of a constant the graph holds as an initializer; null for anything computed. */
function initializerDims(graph: onnx.IGraphProto, name: string): number[] | null {
  const t = graph.initializer?.find((i) => i.name === name);
  return t ? (t.dims ?? []).map(Number) : null;
}

/**
 * The nodes that only rename a present into a graph output (older exports name the outputs
 * through Identity); null when a present feeds anything else, which the rewrite could not keep.
 */
function presentRenames(graph: onnx.IGraphProto, nodes: onnx.INodeProto[]): onnx.INodeProto[] | null {
  const presents = new Set(nodes.flatMap((n) => [n.output?.[1], n.output?.[2]]));
  const outputs = new Set((graph.output ?? []).map((o) => o.name));
  const renames: onnx.INodeProto[] = [];
  for (const n of graph.node ?? []) {
    if (!(n.input ?? []).some((x) => presents.has(x))) continue;
    if (n.opType !== "Identity" || !outputs.has(n.output?.[0])) return null;
    renames.push(n);
  }
  return renames;
}

const FLOAT16 = proto.TensorProto.DataType.FLOAT16;

/**
 * The GroupQueryAttention nodes if every one can be rewritten, else null. `half`: float16 caches
 * too (the canonical attention computes in float32 whatever the cache holds).
 */
function supported(graph: onnx.IGraphProto, half: boolean): Layer[] | null {
  const nodes = graph.node?.filter((n) => n.opType === "GroupQueryAttention") ?? [];
  if (nodes.length === 0 || !presentRenames(graph, nodes)) return null;
  const seqlensK = nodes[0]!.input?.[5];
  const layers: Layer[] = [];
  for (const n of nodes) {
    const inputs = n.input ?? [];
    // q, k, v, past_key, past_value, seqlens_k, total_sequence_length, cos_cache, sin_cache; no
    // position_ids, attention_bias or head_sink.
    if (inputs.length > 9 && inputs.slice(9).some((x) => x !== "")) return null;
    const packed = !inputs[1] && !inputs[2];
    if (!packed && (!inputs[1] || !inputs[2])) return null;
    if (!inputs[3] || !inputs[4] || inputs[5] !== seqlensK) return null;
    const rotary = numberAttr(n, "do_rotary", 0) === 1;
    if (rotary && (!inputs[7] || !inputs[8])) return null;
    // The rotated width comes from the cos cache: unknown when it is computed, so left alone.
    const cosDims = rotary ? initializerDims(graph, inputs[7]!) : null;
    if (rotary && cosDims?.length !== 2) return null;
    if (numberAttr(n, "local_window_size", -1) !== -1 || numberAttr(n, "softcap", 0) !== 0 || numberAttr(n, "smooth_softmax", 0) !== 0) return null;
    if ((n.output?.length ?? 0) > 3 && n.output!.slice(3).some((x) => x !== "")) return null;
    const info = inputInfo(graph, inputs[3]);
    const [, kvHeads, , dim] = info?.dims ?? [];
    const heads = numberAttr(n, "num_heads", 0);
    const elemOk = info?.elemType === FLOAT || (half && info?.elemType === FLOAT16);
    if (!info || !elemOk || !kvHeads || !dim || numberAttr(n, "kv_num_heads", 0) !== kvHeads || heads % kvHeads !== 0) return null;
    // One packed step output: every layer's cache has the same shape.
    if (layers.length > 0 && (layers[0]!.kvHeads !== kvHeads || layers[0]!.dim !== dim)) return null;
    const rotaryDim = cosDims ? 2 * cosDims[1]! : 0;
    if (rotaryDim > dim) return null;
    layers.push({ node: n, heads, kvHeads, dim, packed, rotaryDim, scale: numberAttr(n, "scale", 0) || 1 / Math.sqrt(dim) });
  }
  return layers;
}

/**
 * Rewrites the decoder's GroupQueryAttention nodes; null when it has none or one is not supported.
 *
 * `oneToken`: the graph will only run one new token per row (decode steps), as a second session
 * beside the general one. The query, new keys and output then change layout by Reshape alone (a
 * transpose that moves an axis of size 1 moves no element), the new token sees itself with no
 * causal mask, and its own key and value enter by element-wise products instead of matrix
 * products of one column: about a fifth fewer nodes, which is most of a small model's step, and
 * no per-row, per-head calls for the new token, which are much of a batched step.
 *
 * `invariant`: the attention is canonical-attention.ts's instead (serve --batch-invariant), whose
 * result for a position is the same bits in a one-token graph, a wider run and any batch; float16
 * caches are taken too (it computes in float32), and the softmax scale stays its products' alpha.
 */
export function splitAttention(model: onnx.IModelProto, oneToken = false, invariant = false): StepKvOutputs | null {
  const graph = model.graph;
  const layers = graph ? supported(graph, invariant) : null;
  if (!graph || !layers) return null;
  // The canonical attention's ops take their axes, sizes and batch dims as opset 13 has them.
  if (invariant && Number(model.opsetImport?.find((o) => !o.domain || o.domain === "ai.onnx")?.version ?? 0) < 13) return null;
  const half = inputInfo(graph, layers[0]!.node.input![3]!)?.elemType === FLOAT16;
  // Heads the model kit padded for GroupQueryAttention's kernel lose their padding here.
  const exported = layers[0]!.dim;
  const unpadded = unpadHeads(graph, layers);
  if (unpadded) for (const l of layers) [l.dim, l.rotaryDim] = [unpadded, l.rotaryDim ? unpadded : 0];
  // The canonical attention keeps the scale as its products' alpha (see canonical-attention.ts).
  const folded = !invariant && foldQueryScale(graph, layers);
  const first = layers[0]!.node.input!;
  const p = "sluice_split";
  // ReduceSum takes its axes as an input from opset 13, as an attribute before.
  const opset = Number(model.opsetImport?.find((o) => !o.domain || o.domain === "ai.onnx")?.version ?? 0);
  const reduceSumLast = (input: string, output: string) =>
    opset >= 13 ? node("ReduceSum", [input, `${p}_last_axis`], [output], { keepdims: 1 }) : node("ReduceSum", [input], [output], { axes: [-1], keepdims: 1 });
  const shared: onnx.INodeProto[] = [
    int64Constant(`${p}_i0`, [0], [1]),
    int64Constant(`${p}_i2`, [2], [1]),
    int64Constant(`${p}_last_axis`, [-1], [1]),
    int64Constant(`${p}_big`, [2 ** 62], [1]),
    int64Constant(`${p}_to4d`, [0, 1, 1, 1], [4]),
    int64Constant(`${p}_scalar`, [], [0]),
    floatConstant(`${p}_zero_f`, 0),
    floatConstant(`${p}_min_f`, MASK_MIN),
    ...(oneToken
      ? [
          // One token per row, at position seqlens_k, after as many cached positions.
          int64Constant(`${p}_zero`, [0], []),
          int64Constant(`${p}_one`, [1], []),
          int64Constant(`${p}_col`, [-1, 1], [2]),
          node("Cast", [first[5]!], [`${p}_first`], { to: INT64 }),
          node("Reshape", [`${p}_first`, `${p}_col`], [`${p}_positions`]),
        ]
      : positionNodes(p, first[5]!, first[0]!)),
    // Past mask [batch, 1, 1, cap]: buffer position j is attended when j < the row's past length.
    node("Shape", [first[3]!], [`${p}_past_shape`]),
    node("Gather", [`${p}_past_shape`, `${p}_i2`], [`${p}_cap`], { axis: 0 }),
    node("Reshape", [`${p}_cap`, `${p}_scalar`], [`${p}_cap_scalar`]),
    node("Range", [`${p}_zero`, `${p}_cap_scalar`, `${p}_one`], [`${p}_cap_range`]),
    node("Reshape", [`${p}_first`, `${p}_to4d`], [`${p}_past_len`]),
    node("Less", [`${p}_cap_range`, `${p}_past_len`], [`${p}_past_ok`]),
    node("Where", [`${p}_past_ok`, `${p}_zero_f`, `${p}_min_f`], [`${p}_past_bias`]),
  ];
  // The softmax's two parts, [cap, tokens], for one Split per layer where Split takes its sizes as
  // an input (two Slices are a call more per layer: about 1% of stories260K's step).
  const splitParts = opset >= 13;
  if (splitParts && oneToken) shared.push(int64Constant(`${p}_one_1d`, [1], [1]), node("Concat", [`${p}_cap`, `${p}_one_1d`], [`${p}_parts`], { axis: 0 }));
  if (splitParts && !oneToken) {
    shared.push(
      int64Constant(`${p}_minus_one`, [-1], [1]),
      node("Reshape", [`${p}_tokens`, `${p}_minus_one`], [`${p}_tokens_1d`]),
      node("Concat", [`${p}_cap`, `${p}_tokens_1d`], [`${p}_parts`], { axis: 0 }),
    );
  }
  if (!oneToken) {
    shared.push(
      // Causal mask among the new tokens [tokens, tokens]: token t sees new token j unless t < j.
      node("Reshape", [`${p}_offsets`, `${p}_col`], [`${p}_offsets_col`]),
      node("Less", [`${p}_offsets_col`, `${p}_offsets`], [`${p}_new_future`]),
      node("Where", [`${p}_new_future`, `${p}_min_f`, `${p}_zero_f`], [`${p}_new_bias`]),
    );
  }
  if (invariant) shared.push(...canonicalSharedNodes(p, oneToken, layers[0]!.kvHeads));
  const added: onnx.INodeProto[] = [];
  const steps: { pastKey: string; key: string; value: string }[] = [];
  const groupTiles = new Map<number, string>();
  const canonicalGroupTiles = new Map<number, { diag: string; before: string }>();

  layers.forEach(({ node: gqa, heads, kvHeads, dim, packed, rotaryDim, scale }, i) => {
    let [q, k, v] = gqa.input!;
    const [, , , pastK, pastV, , , cos, sin] = gqa.input!;
    const out = gqa.output![0]!;
    const l = `${p}_${i}`;
    if (packed) {
      // [b, t, (heads + 2 kv) * d] -> q [b, t, heads * d], k and v [b, t, kv * d]
      const parts = [heads * dim, kvHeads * dim, kvHeads * dim];
      const outputs = [`${l}_q_part`, `${l}_k_part`, `${l}_v_part`];
      // Split takes its sizes as an input from opset 13, as an attribute before.
      added.push(
        ...(opset >= 13
          ? [int64Constant(`${l}_parts`, parts, [3]), node("Split", [q!, `${l}_parts`], outputs, { axis: -1 })]
          : [node("Split", [q!], outputs, { axis: -1, split: parts })]),
      );
      [q, k, v] = outputs;
    }
    const group = heads / kvHeads;
    const names = { key: `${p}.${i}.key`, value: `${p}.${i}.value` };
    let qr = q!;
    let kr = k!;
    if (rotaryDim > 0) {
      // RotaryEmbedding rotates whole heads unless told the width; GroupQueryAttention reads it
      // from the cos cache.
      const attrs = { interleaved: numberAttr(gqa, "rotary_interleaved", 0), ...(rotaryDim < dim ? { rotary_embedding_dim: rotaryDim } : {}) };
      qr = `${l}_q_rot`;
      kr = `${l}_k_rot`;
      added.push(
        node("RotaryEmbedding", [q!, `${p}_positions`, cos!, sin!], [qr], { ...attrs, num_heads: heads }, MS),
        node("RotaryEmbedding", [k!, `${p}_positions`, cos!, sin!], [kr], { ...attrs, num_heads: kvHeads }, MS),
      );
    }
    let newScores = `${l}_s_new_raw`;
    if (oneToken) {
      added.push(
        // q [b, 1, heads*d] -> [b, kv, group, d]; new k, v [b, 1, kv*d] -> [b, kv, 1, d]
        int64Constant(`${l}_q4`, [0, kvHeads, group, dim], [4]),
        int64Constant(`${l}_kv4`, [0, kvHeads, 1, dim], [4]),
        node("Reshape", [qr, `${l}_q4`], [`${l}_q`]),
        node("Reshape", [kr, `${l}_kv4`], [names.key]),
        node("Reshape", [v!, `${l}_kv4`], [names.value]),
      );
    } else {
      let tile = groupTiles.get(group);
      if (!tile) {
        tile = `${p}_new_bias_g${group}`;
        added.push(int64Constant(`${tile}_reps`, [group, 1], [2]), node("Tile", [`${p}_new_bias`, `${tile}_reps`], [tile]));
        groupTiles.set(group, tile);
      }
      newScores = `${l}_s_new`;
      added.push(
        // q [b, t, heads*d] -> [b, kv, group*t, d]
        int64Constant(`${l}_q5`, [0, 0, kvHeads, group, dim], [5]),
        int64Constant(`${l}_q4`, [0, kvHeads, -1, dim], [4]),
        int64Constant(`${l}_kv4`, [0, 0, kvHeads, dim], [4]),
        node("Reshape", [qr, `${l}_q5`], [`${l}_q_5d`]),
        node("Transpose", [`${l}_q_5d`], [`${l}_q_t`], { perm: [0, 2, 3, 1, 4] }),
        node("Reshape", [`${l}_q_t`, `${l}_q4`], [`${l}_q`]),
        // new k, v [b, t, kv*d] -> [b, kv, t, d]: the step outputs
        node("Reshape", [kr, `${l}_kv4`], [`${l}_k_4d`]),
        node("Transpose", [`${l}_k_4d`], [names.key], { perm: [0, 2, 1, 3] }),
        node("Reshape", [v!, `${l}_kv4`], [`${l}_v_4d`]),
        node("Transpose", [`${l}_v_4d`], [names.value], { perm: [0, 2, 1, 3] }),
      );
      if (!invariant) added.push(node("Add", [`${l}_s_new_raw`, tile], [newScores]));
    }
    if (invariant) {
      // In float32 whatever the cache holds (GroupQueryAttention on the CPU does the same).
      const f32 = (name: string) => {
        if (!half) return name;
        added.push(node("Cast", [name], [`${name}_f32`], { to: FLOAT }));
        return `${name}_f32`;
      };
      let tiles = null;
      if (!oneToken) {
        tiles = canonicalGroupTiles.get(group) ?? null;
        if (!tiles) {
          const made = canonicalTiles(p, group);
          added.push(...made.nodes);
          tiles = { diag: made.diag, before: made.before };
          canonicalGroupTiles.set(group, tiles);
        }
      }
      const canonicalOut = half ? `${l}_o_f32` : `${l}_o`;
      added.push(
        ...canonicalAttentionNodes(
          {
            l,
            p,
            q: f32(`${l}_q`),
            key: f32(names.key),
            value: f32(names.value),
            pastKey: f32(pastK!),
            pastValue: f32(pastV!),
            group,
            dim,
            scale,
            oneToken,
            newBias: `${p}_new_bias_g${group}`,
            tiles,
            out: canonicalOut,
          },
          opset,
        ),
      );
      if (half) added.push(node("Cast", [canonicalOut], [`${l}_o`], { to: FLOAT16 }));
    } else {
      // Against the new keys: with one token, a dot product per head and an outer product per
      // head, element-wise (batched matrix products of a column cost ONNX Runtime a call per row
      // and head: at 16 rows, more than the rest of the attention to the new token).
      // The query comes scaled where the scale went into its weights (query-scale.ts).
      const alpha = folded ? 1 : scale;
      const byNewKeys = oneToken
        ? [
            node("Mul", [`${l}_q`, names.key], [`${l}_qk_new`]),
            ...(folded
              ? [reduceSumLast(`${l}_qk_new`, newScores)]
              : [floatConstant(`${l}_scale`, scale), reduceSumLast(`${l}_qk_new`, `${l}_s_new_sum`), node("Mul", [`${l}_s_new_sum`, `${l}_scale`], [newScores])]),
          ]
        : [node("FusedMatMul", [`${l}_q`, names.key], [`${l}_s_new_raw`], { transB: 1, alpha: { float: alpha } }, MS)];
      const withNewValues = oneToken
        ? node("Mul", [`${l}_p_new`, names.value], [`${l}_o_new`])
        : node("MatMul", [`${l}_p_new`, names.value], [`${l}_o_new`]);
      added.push(
        // scores against the buffer and against the new keys
        node("FusedMatMul", [`${l}_q`, pastK!], [`${l}_s_past_raw`], { transB: 1, alpha: { float: alpha } }, MS),
        node("Add", [`${l}_s_past_raw`, `${p}_past_bias`], [`${l}_s_past`]),
        ...byNewKeys,
        node("Concat", [`${l}_s_past`, newScores], [`${l}_s`], { axis: -1 }),
        node("Softmax", [`${l}_s`], [`${l}_p`], { axis: -1 }),
        ...(splitParts
          ? [node("Split", [`${l}_p`, `${p}_parts`], [`${l}_p_past`, `${l}_p_new`], { axis: -1 })]
          : [
              node("Slice", [`${l}_p`, `${p}_i0`, `${p}_cap`, `${p}_last_axis`], [`${l}_p_past`]),
              node("Slice", [`${l}_p`, `${p}_cap`, `${p}_big`, `${p}_last_axis`], [`${l}_p_new`]),
            ]),
        node("MatMul", [`${l}_p_past`, pastV!], [`${l}_o_past`]),
        withNewValues,
        node("Add", [`${l}_o_past`, `${l}_o_new`], [`${l}_o`]),
      );
    }
    if (oneToken) {
      // [b, kv, group, d] -> [b, 1, heads*d]
      added.push(int64Constant(`${l}_o3`, [0, 1, heads * dim], [3]), node("Reshape", [`${l}_o`, `${l}_o3`], [out]));
    } else {
      added.push(
        // [b, kv, group*t, d] -> [b, t, heads*d]
        int64Constant(`${l}_o5`, [0, kvHeads, group, -1, dim], [5]),
        int64Constant(`${l}_o3`, [0, 0, heads * dim], [3]),
        node("Reshape", [`${l}_o`, `${l}_o5`], [`${l}_o_5d`]),
        node("Transpose", [`${l}_o_5d`], [`${l}_o_t`], { perm: [0, 3, 1, 2, 4] }),
        node("Reshape", [`${l}_o_t`, `${l}_o3`], [out]),
      );
    }
    steps.push({ pastKey: pastK!, ...names });
  });
  const { kvHeads, dim } = layers[0]!;
  const packed = packStepOutputs("split", steps, half ? FLOAT16 : FLOAT, kvHeads, dim);
  if (unpadded) packed.step.headDims = { exported, used: unpadded };
  if (invariant) {
    blockValueInputs(graph, layers.map((l) => l.node.input![4]!));
    packed.step.valueBlock = CANONICAL_BLOCK;
  }

  // The presents are no longer produced: drop them from the outputs with their nodes.
  const renames = presentRenames(graph, layers.map((l) => l.node))!;
  const gone = new Set([...layers.map((l) => l.node), ...renames]);
  const dropped = new Set([...layers.flatMap((l) => [l.node.output![1], l.node.output![2]]), ...renames.map((n) => n.output![0])]);
  // The shared constants this variant of the rewrite does not read would each cost a warning from
  // ONNX Runtime at load.
  const made = [...shared, ...added, packed.node];
  const read = new Set(made.flatMap((n) => n.input ?? []));
  const kept = made.filter((n) => n.opType !== "Constant" || read.has(n.output![0]!));
  graph.node = topological([...graph.node!.filter((n) => !gone.has(n)), ...kept]);
  graph.output = [...(graph.output ?? []).filter((o) => !dropped.has(o.name ?? "")), packed.output];
  return packed.step;
}

/** The nodes in a topological order (ONNX requires it), the given order kept where it is free. */
function topological(nodes: onnx.INodeProto[]): onnx.INodeProto[] {
  const producer = new Map<string, number>();
  nodes.forEach((n, i) => n.output?.forEach((o) => o && producer.set(o, i)));
  const waiting = nodes.map(() => 0);
  const consumers: number[][] = nodes.map(() => []);
  nodes.forEach((n, i) => {
    for (const x of new Set(n.input ?? [])) {
      const from = x ? producer.get(x) : undefined;
      if (from === undefined) continue;
      waiting[i]!++;
      consumers[from]!.push(i);
    }
  });
  const ready = nodes.map((_, i) => i).filter((i) => waiting[i] === 0);
  const ordered: onnx.INodeProto[] = [];
  for (let r = 0; r < ready.length; r++) {
    const i = ready[r]!;
    ordered.push(nodes[i]!);
    for (const c of consumers[i]!) if (--waiting[c]! === 0) ready.push(c);
  }
  if (ordered.length !== nodes.length) throw new Error("split attention: the rewritten graph has a cycle");
  return ordered;
}
