// The Llama-family decoder as an ONNX graph, in two variants from the same weights.
//
// I/O is the Hugging Face / transformers.js decoder contract:
//   input_ids, attention_mask, position_ids (int64), past_key_values.{i}.key|value
//   -> logits, present.{i}.key|value (KV cache [batch, kv_heads, seq, head_dim]).

import { type Dim, type ExternalDataFile, ExternalDataPlan, GraphBuilder, MS_DOMAIN, type OpsetImport, type SerializedModel, serializeModel } from "../onnx/builder.ts";
import { checkHalfRange, float32ToHalf } from "../onnx/dtype.ts";
import { floatTensor, tensor } from "../onnx/tensor.ts";
import { dequantizeQ4, Q4_BLOCK, type Q4Matrix, q4Blocks, quantizeQ4, quantizeQ4Rows, selectQ4Columns } from "../quant/q4.ts";
import { type GraphVariant, type LlamaConfig, type WeightDType, validateConfig } from "./config.ts";
import {
  type LlamaLayerWeights,
  type LlamaMatrixKey,
  type LlamaWeightSource,
  type LlamaWeights,
  checkEmbed,
  checkFinalNorm,
  checkLayer,
  checkLmHead,
  checkWeights,
  inMemorySource,
  inverseFrequencies,
  rotaryCaches,
} from "./weights.ts";

export interface DecoderGraphOptions {
  variant: GraphVariant;
  dtype: WeightDType;
  /** Rows of the fused variant's cos/sin caches (the longest sequence it can rotate). */
  rotaryCacheLength?: number;
  /** Initializers at least this large go to `externalDataFile` when it is given. */
  externalDataFile?: string;
  externalMinBytes?: number;
  /**
   * Take `inputs_embeds` [batch, seq, hidden] instead of `input_ids` (the decoder of a split
   * vision-language export; the token embedding is then a separate graph).
   */
  inputsEmbeds?: boolean;
  /**
   * Qwen2-VL's multimodal rotary embedding: position_ids become [3, batch, seq] (temporal,
   * height, width) and the rotary frequencies are split into these three sections (summing to
   * head_dim / 2), each rotated by its own position row. Standard variant only.
   */
  mropeSection?: [number, number, number];
  /**
   * Fused variant only: one MatMul for q, k and v, as onnxruntime-genai's builder makes CPU
   * models. Its output feeds GroupQueryAttention as the query with key and value unset; with
   * per-head q/k norms (which need q and k apart) it is split into the three first.
   */
  packedQkv?: boolean;
  /**
   * Fused variant only: one MatMul for the MLP's gate and up projections, split in two. A decode
   * step of a model past a few MB reads its weights once whatever their grouping, but each
   * product is an operator call (a thread-pool dispatch for MatMulNBits): one fewer per layer.
   */
  packedMlp?: boolean;
  /**
   * Fused variant only: every projection (the output head too) as ONNX Runtime's MatMulNBits
   * with 4-bit weights in blocks of 32 (see quant/q4.ts), and the token embedding as
   * GatherBlockQuantized of the same kind (sharing the head's bytes when tied). Activations stay
   * `dtype`, as do the scales.
   */
  q4?: {
    /**
     * MatMulNBits' accuracy_level: the precision its CPU kernel computes in. 4 quantises each
     * activation block to int8 and multiplies in integers (onnxruntime-genai's CPU default, the
     * fastest); 1 dequantises to float32 (0 leaves the attribute out: the same as 1 on the CPU).
     */
    accuracyLevel: number;
  };
  /**
   * Writes large initializers to this file while the graph is built, so the weights are never
   * all in memory (use with a LlamaWeightSource); the caller closes it.
   */
  externalData?: ExternalDataFile;
}

export const OPSET_ONNX = 17;
export const OPSET_MS = 1;

/** Masked attention scores get this bias: finite, so a fully padded query row stays NaN-free. */
const MASK_MIN = -1e9;

const B: Dim = "batch_size";
const S: Dim = "sequence_length";
const P: Dim = "past_sequence_length";
const T: Dim = "total_sequence_length";

export function pastKeyName(i: number, kind: "key" | "value"): string {
  return `past_key_values.${i}.${kind}`;
}
export function presentName(i: number, kind: "key" | "value"): string {
  return `present.${i}.${kind}`;
}

interface Ctx {
  g: GraphBuilder;
  c: LlamaConfig;
  dt: WeightDType;
  /** ONNX TensorProto type code of the activations, for Cast. */
  dtCode: number;
  inputsEmbeds: boolean;
  mropeSection: [number, number, number] | null;
  q4: { accuracyLevel: number } | null;
}

/** A float initializer in the activations' type; float16 refuses values it would make infinite. */
function weight(ctx: Ctx, name: string, dims: number[], values: Float32Array): string {
  if (ctx.dt === "float16") checkHalfRange(name, values);
  return ctx.g.initializer(name, floatTensor(ctx.dt, dims, values));
}

/** A projection [rows = in, cols = out]: float, or already in MatMulNBits' blocks (LlamaLayerWeights.q4). */
type Matrix = Float32Array | Q4Matrix;

/** A layer's projection: its 4-bit blocks where it has them and the graph writes 4-bit weights, else the float weight. */
function layerMatrix(ctx: Ctx, l: LlamaLayerWeights, key: LlamaMatrixKey): Matrix {
  return (ctx.q4 && l.q4?.[key]) || l[key];
}

function asQ4(w: Matrix, rows: number, cols: number): Q4Matrix {
  return w instanceof Float32Array ? quantizeQ4(w, rows, cols) : w;
}

function asFloat(w: Matrix): Float32Array {
  return w instanceof Float32Array ? w : dequantizeQ4(w);
}

function matmul(ctx: Ctx, x: string, name: string, w: Matrix, rows: number, cols: number): string {
  if (ctx.q4) return matmulNBits(ctx, x, name, asQ4(w, rows, cols));
  return ctx.g.op("MatMul", [x, weight(ctx, name, [rows, cols], asFloat(w))]);
}

/** What MatMulNBits' attributes need of a quantised weight. */
type Q4Shape = Pick<Q4Matrix, "k" | "n" | "blocks">;
/** A quantised weight's initializers. */
interface Q4Names {
  data: string;
  scales: string;
  zeroPoints: string;
}

/** The initializers of a quantised weight, named as ONNX Runtime's quantiser names them. */
function q4Initializers(ctx: Ctx, name: string, q: Q4Matrix): Q4Names {
  const { g } = ctx;
  return {
    data: g.initializer(`${name}_Q4`, tensor("uint8", [q.n, q.blocks, Q4_BLOCK / 2], q.data)),
    scales: weight(ctx, `${name}_scales`, [q.n * q.blocks], q.scales),
    zeroPoints: g.initializer(`${name}_zero_points`, tensor("uint8", [q.zeroPoints.length], q.zeroPoints)),
  };
}

function nbits(ctx: Ctx, x: string, q: Q4Shape, init: Q4Names): string {
  const level = ctx.q4?.accuracyLevel ?? 0;
  const attrs = { K: q.k, N: q.n, bits: 4, block_size: Q4_BLOCK, ...(level ? { accuracy_level: level } : {}) };
  return ctx.g.op("MatMulNBits", [x, init.data, init.scales, init.zeroPoints], attrs, MS_DOMAIN);
}

function matmulNBits(ctx: Ctx, x: string, name: string, q: Q4Matrix): string {
  const y = nbits(ctx, x, q, q4Initializers(ctx, name, q));
  if (!q.offsets) return y;
  // Blocks of q * scale + min (GGUF's Q4_1, Q4_K): MatMulNBits takes the q * scale part, and the
  // mins add sum_b (sum of x over block b) * min[b, n], a product 32 times smaller. ONNX Runtime
  // also takes float zero points, but its CPU kernel then dequantises the whole matrix on every
  // call (measured: 47x slower on a 2048 x 2048 product).
  const { g } = ctx;
  const offsets = new Float32Array(q.blocks * q.n);
  for (let c = 0; c < q.n; c++) for (let b = 0; b < q.blocks; b++) offsets[b * q.n + c] = q.offsets[c * q.blocks + b]!;
  const sums = g.op("ReduceSum", [g.op("Reshape", [x, g.i64([0, 0, q.blocks, Q4_BLOCK])]), g.i64([-1])], { keepdims: 0 });
  return g.op("Add", [y, g.op("MatMul", [sums, weight(ctx, `${name}_block_offsets`, [q.blocks, q.n], offsets)])]);
}

function addBias(ctx: Ctx, y: string, name: string, b: Float32Array | undefined): string {
  return b ? ctx.g.op("Add", [y, weight(ctx, name, [b.length], b)]) : y;
}

function castTo(ctx: Ctx, x: string, code: number): string {
  return ctx.g.op("Cast", [x], { to: code });
}

/** RMSNorm from primitive ops, computed in float32 as transformers does for half models. */
function rmsNormStandard(ctx: Ctx, x: string, w: string): string {
  const { g } = ctx;
  const xf = ctx.dt === "float16" ? castTo(ctx, x, 1) : x;
  const ms = g.op("ReduceMean", [g.op("Mul", [xf, xf])], { axes: [-1], keepdims: 1 });
  const inv = g.op("Reciprocal", [g.op("Sqrt", [g.op("Add", [ms, g.f32(ctx.c.rmsNormEps)])])]);
  let y = g.op("Mul", [xf, inv]);
  if (ctx.dt === "float16") y = castTo(ctx, y, ctx.dtCode);
  return g.op("Mul", [y, w]);
}

function swiglu(ctx: Ctx, x: string, l: LlamaLayerWeights, i: number, packed = false): string {
  const { g, c } = ctx;
  const I = c.intermediateSize;
  let gate: string;
  let up: string;
  if (packed) {
    const both = matmul(ctx, x, `model.layers.${i}.mlp.gate_up_proj.weight`, concatColumns(c.hiddenSize, [layerMatrix(ctx, l, "gate"), layerMatrix(ctx, l, "up")]), c.hiddenSize, 2 * I);
    [gate, up] = g.node("Split", [both, g.i64([I, I])], 2, { axis: -1 }) as [string, string];
  } else {
    gate = matmul(ctx, x, `model.layers.${i}.mlp.gate_proj.weight`, layerMatrix(ctx, l, "gate"), c.hiddenSize, I);
    up = matmul(ctx, x, `model.layers.${i}.mlp.up_proj.weight`, layerMatrix(ctx, l, "up"), c.hiddenSize, I);
  }
  const act = g.op("Mul", [gate, g.op("Sigmoid", [gate])]);
  return matmul(ctx, g.op("Mul", [act, up]), `model.layers.${i}.mlp.down_proj.weight`, layerMatrix(ctx, l, "down"), c.intermediateSize, c.hiddenSize);
}

/** Rows of a streamed table read, converted and written at a time (see LlamaWeightSource.embedRows). */
const STREAM_ROWS = 2048;

type ReadRows = (start: number, count: number) => Float32Array;

/** Reads `total` rows with `read`, STREAM_ROWS at a time, and hands each block to `each`. */
function forEachBlock(total: number, read: ReadRows, each: (start: number, count: number, values: Float32Array) => void): void {
  for (let start = 0; start < total; start += STREAM_ROWS) {
    const count = Math.min(STREAM_ROWS, total - start);
    each(start, count, read(start, count));
  }
}

/** A float tensor's part in the activations' type (float16 refusing values it would make infinite). */
function activationsPart(ctx: Ctx, name: string, values: Float32Array): Float32Array | Uint16Array {
  if (ctx.dt !== "float16") return values;
  checkHalfRange(name, values);
  return float32ToHalf(values);
}

/**
 * A [vocab, hidden] table (nn.Linear's layout of a head) written a block of rows at a time,
 * transposed to [hidden, vocab] when `transposed`; null when the source reads it only whole or
 * the graph keeps its weights in memory.
 */
function streamedTable(ctx: Ctx, name: string, read: ReadRows | undefined, transposed = false): string | null {
  const { c } = ctx;
  const [V, H] = [c.vocabSize, c.hiddenSize];
  const parts = read ? ctx.g.partInitializer(name, ctx.dt, transposed ? [H, V] : [V, H]) : null;
  if (!read || !parts) return null;
  const put = parts.put as (first: number, values: Float32Array | Uint16Array) => void;
  forEachBlock(V, read, (start, count, values) => {
    if (!transposed) return put(start * H, activationsPart(ctx, name, values));
    // Row h of [hidden, vocab] holds column h of these rows: `count` values at h * V + start.
    const t = new Float32Array(count * H);
    for (let r = 0; r < count; r++) for (let h = 0; h < H; h++) t[h * count + r] = values[r * H + h]!;
    const converted = activationsPart(ctx, name, t);
    for (let h = 0; h < H; h++) put(h * V + start, converted.subarray(h * count, (h + 1) * count));
  });
  parts.done();
  return name;
}

/** A [vocab, hidden] table quantised row by row (see quantizeQ4Rows) a block of rows at a time; null as streamedTable. */
function streamedQ4Rows(ctx: Ctx, name: string, read: ReadRows | undefined, direct?: (start: number, count: number) => Q4Matrix | null): { q: Q4Shape; init: Q4Names } | null {
  const { g, c } = ctx;
  const [V, H] = [c.vocabSize, c.hiddenSize];
  const blocks = q4Blocks(H);
  const zpRow = Math.ceil(blocks / 2);
  const data = read ? g.partInitializer(`${name}_Q4`, "uint8", [V, blocks, Q4_BLOCK / 2]) : null;
  if (!read || !data) return null;
  const scales = g.partInitializer(`${name}_scales`, ctx.dt, [V * blocks])!;
  const zeroPoints = g.partInitializer(`${name}_zero_points`, "uint8", [V * zpRow])!;
  const putScales = scales.put as (first: number, values: Float32Array | Uint16Array) => void;
  // Rows already in 4-bit blocks (a GGUF file's Q4_0 table) are written as they are.
  let given: Q4Matrix | null = null;
  const rows: ReadRows = (start, count) => {
    given = direct?.(start, count) ?? null;
    return given ? new Float32Array(0) : read(start, count);
  };
  forEachBlock(V, rows, (start, count, values) => {
    const q = given ?? quantizeQ4Rows(values, count, H);
    data.put(start * blocks * (Q4_BLOCK / 2), q.data);
    putScales(start * blocks, activationsPart(ctx, scales.name, q.scales));
    zeroPoints.put(start * zpRow, q.zeroPoints);
  });
  for (const p of [data, scales, zeroPoints]) p.done();
  return { q: { k: H, n: V, blocks }, init: { data: data.name, scales: scales.name, zeroPoints: zeroPoints.name } };
}

/**
 * The token embedding: `{ hidden }` the embedded ids, and `project` the output head applied to
 * the final hidden states. Quantised, the table is GatherBlockQuantized over 4-bit rows and the
 * head MatMulNBits; a tied pair shares one set of bytes. A source that reads rows (a checkpoint)
 * has its tables written a block of rows at a time: the largest tensors are never whole.
 */
function embedding(ctx: Ctx, ids: string, src: LlamaWeightSource): { hidden: string; project: (final: string) => string } {
  const { g, c } = ctx;
  // Read where it is used and not kept in a variable: the closures below share this scope, and
  // a checkpoint's table must not stay alive while the layers are built.
  const readEmbed = () => {
    const embed = src.embed();
    checkEmbed(c, embed);
    return embed;
  };
  const embedRows = src.embedRows?.bind(src);
  const headRows = src.lmHeadRows?.bind(src);
  if (!ctx.q4) {
    const table = streamedTable(ctx, "model.embed_tokens.weight", embedRows) ?? weight(ctx, "model.embed_tokens.weight", [c.vocabSize, c.hiddenSize], readEmbed());
    const hidden = ctx.inputsEmbeds ? ids : g.op("Gather", [table, ids], { axis: 0 });
    const project = (final: string) => {
      // Transposing the shared table in-graph keeps one copy on disk; ORT folds it at load time.
      const head = c.tieWordEmbeddings
        ? g.op("Transpose", [table], { perm: [1, 0] })
        : (streamedTable(ctx, "lm_head.weight", headRows, true) ?? weight(ctx, "lm_head.weight", [c.hiddenSize, c.vocabSize], checkLmHead(c, src.lmHead())));
      return g.op("MatMul", [final, head]);
    };
    return { hidden, project };
  }
  // The table's rows are the tied head's columns: one quantisation serves both.
  const tableName = c.tieWordEmbeddings ? "lm_head.weight" : "model.embed_tokens.weight";
  const streamed = streamedQ4Rows(ctx, tableName, embedRows, src.embedQ4Rows?.bind(src));
  let rows: Q4Shape;
  let init: Q4Names;
  if (streamed) ({ q: rows, init } = streamed);
  else {
    const whole = quantizeQ4Rows(readEmbed(), c.vocabSize, c.hiddenSize);
    [rows, init] = [whole, q4Initializers(ctx, tableName, whole)];
  }
  const V = c.vocabSize;
  const data = g.op("Reshape", [init.data, g.i64([V, rows.blocks * (Q4_BLOCK / 2)])]);
  const scales = g.op("Reshape", [init.scales, g.i64([V, rows.blocks])]);
  const zeroPoints = g.op("Reshape", [init.zeroPoints, g.i64([V, Math.ceil(rows.blocks / 2)])]);
  let hidden = g.op("GatherBlockQuantized", [data, ids, scales, zeroPoints], { bits: 4, block_size: Q4_BLOCK, gather_axis: 0, quantize_axis: 1 }, MS_DOMAIN);
  // Rows padded to whole blocks come back padded (with exact zeros): cut to the hidden size.
  if (rows.blocks * Q4_BLOCK !== c.hiddenSize) hidden = g.op("Slice", [hidden, g.i64([0]), g.i64([c.hiddenSize]), g.i64([-1])]);
  const project = (final: string) => {
    if (c.tieWordEmbeddings) return nbits(ctx, final, rows, init);
    // An untied head's nn.Linear rows are MatMulNBits' output columns: quantised the same way.
    const head = streamedQ4Rows(ctx, "lm_head.weight", headRows);
    if (head) return nbits(ctx, final, head.q, head.init);
    return matmul(ctx, final, "lm_head.weight", checkLmHead(c, src.lmHead()), c.hiddenSize, c.vocabSize);
  };
  return { hidden, project };
}

function declareIo(ctx: Ctx, kvHeadDim: number): { ids: string; mask: string; pos: string } {
  const { g, c, dt } = ctx;
  // With inputs_embeds, `ids` names the embeddings: only their shape [B, S, ...] is read from it.
  const ids = ctx.inputsEmbeds ? g.input("inputs_embeds", dt, [B, S, c.hiddenSize]) : g.input("input_ids", "int64", [B, S]);
  const mask = g.input("attention_mask", "int64", [B, T]);
  const pos = g.input("position_ids", "int64", ctx.mropeSection ? [3, B, S] : [B, S]);
  for (let i = 0; i < c.numLayers; i++) {
    for (const kind of ["key", "value"] as const) g.input(pastKeyName(i, kind), dt, [B, c.numKvHeads, P, kvHeadDim]);
  }
  return { ids, mask, pos };
}

function declareOutputs(ctx: Ctx, logits: string, presents: [string, string][], kvHeadDim: number): void {
  const { g, c, dt } = ctx;
  g.output("logits", dt, [B, S, c.vocabSize], logits);
  presents.forEach(([k, v], i) => {
    g.output(presentName(i, "key"), dt, [B, c.numKvHeads, T, kvHeadDim], k);
    g.output(presentName(i, "value"), dt, [B, c.numKvHeads, T, kvHeadDim], v);
  });
}

// ---------------------------------------------------------------- standard variant

/** Additive mask [batch, 1, 1, seq, total]: causal over buffer positions, and padding. */
function attentionBias(ctx: Ctx, ids: string, mask: string): string {
  const { g } = ctx;
  const seq = g.op("Gather", [g.op("Shape", [ids]), g.i64(1)], { axis: 0 });
  const total = g.op("Gather", [g.op("Shape", [mask]), g.i64(1)], { axis: 0 });
  const past = g.op("Sub", [total, seq]);
  const keyIdx = g.op("Range", [g.i64(0), total, g.i64(1)]); // [T]
  const qIdx = g.op("Add", [g.op("Range", [g.i64(0), seq, g.i64(1)]), past]); // [S], absolute
  const causal = g.op("LessOrEqual", [keyIdx, g.op("Unsqueeze", [qIdx, g.i64([1])])]); // [S, T]
  const notPad = g.op("Unsqueeze", [g.op("Cast", [mask], { to: 9 }), g.i64([1])]); // [B, 1, T]
  const allowed = g.op("And", [causal, notPad]); // [B, S, T]
  const bias = g.op("Where", [allowed, g.f32(0), g.f32(MASK_MIN)]);
  return g.op("Unsqueeze", [bias, g.i64([1, 2])]);
}

/**
 * Multimodal rotary angles [B, S, D/2] from position_ids [3, B, S]: frequency j takes the
 * position row of its section (transformers' apply_multimodal_rotary_pos_emb), picked with a
 * one-hot mask summed over the rows, which is exact.
 */
function mropeFreqs(ctx: Ctx, pos: string, inv: string, section: [number, number, number]): string {
  const { g, c } = ctx;
  const half = c.headDim / 2;
  if (section[0] + section[1] + section[2] !== half) throw new Error(`mrope_section ${section.join("+")} must sum to head_dim / 2 = ${half}`);
  const pick = new Float32Array(3 * half);
  let j = 0;
  section.forEach((n, row) => {
    for (let k = 0; k < n; k++) pick[row * half + j++] = 1;
  });
  const rows = g.op("Mul", [g.op("Unsqueeze", [g.op("Cast", [pos], { to: 1 }), g.i64([-1])]), inv]); // [3,B,S,D/2]
  const mask = g.initializer("rotary_mrope_sections", floatTensor("float32", [3, 1, 1, half], pick));
  return g.op("ReduceSum", [g.op("Mul", [rows, mask]), g.i64([0])], { keepdims: 0 });
}

/** cos/sin [batch, 1, seq, head_dim] from position_ids, computed in float32. */
function rotaryTables(ctx: Ctx, pos: string): { cos: string; sin: string } {
  const { g, c } = ctx;
  const inv = g.initializer("rotary_inv_freq", floatTensor("float32", [c.headDim / 2], inverseFrequencies(c.headDim, c.ropeTheta, c.ropeScaling, c.ropeFreqFactors)));
  const freqs = ctx.mropeSection
    ? mropeFreqs(ctx, pos, inv, ctx.mropeSection)
    : g.op("Mul", [g.op("Unsqueeze", [g.op("Cast", [pos], { to: 1 }), g.i64([-1])]), inv]); // [B,S,D/2]
  const emb = g.op("Unsqueeze", [g.op("Concat", [freqs, freqs], { axis: -1 }), g.i64([1])]);
  let cos = g.op("Cos", [emb]);
  let sin = g.op("Sin", [emb]);
  if (ctx.dt === "float16") {
    cos = castTo(ctx, cos, ctx.dtCode);
    sin = castTo(ctx, sin, ctx.dtCode);
  }
  return { cos, sin };
}

/** Half-rotation RoPE (transformers' rotate_half) on x [B, heads, S, D]. */
function applyRotary(ctx: Ctx, x: string, cos: string, sin: string): string {
  const { g, c } = ctx;
  const half = c.headDim / 2;
  const [x1, x2] = g.node("Split", [x, g.i64([half, half])], 2, { axis: -1 });
  const rotated = g.op("Concat", [g.op("Neg", [x2]), x1], { axis: -1 });
  return g.op("Add", [g.op("Mul", [x, cos]), g.op("Mul", [rotated, sin])]);
}

/** [B, S, heads*D] -> [B, S, heads, D], optionally RMS-normalised per head. */
function splitHeads(ctx: Ctx, x: string, heads: number, norm?: string): string {
  const { g, c } = ctx;
  const r = g.op("Reshape", [x, g.i64([0, 0, heads, c.headDim])]);
  return norm ? rmsNormStandard(ctx, r, norm) : r;
}

function attentionStandard(
  ctx: Ctx,
  x: string,
  l: LlamaLayerWeights,
  i: number,
  bias: string,
  rope: { cos: string; sin: string },
): { out: string; presentK: string; presentV: string } {
  const { g, c } = ctx;
  const qDim = c.numHeads * c.headDim;
  const kvDim = c.numKvHeads * c.headDim;
  const groups = c.numHeads / c.numKvHeads;
  const pre = `model.layers.${i}.self_attn`;
  const qn = c.qkNorm ? weight(ctx, `${pre}.q_norm.weight`, [c.headDim], l.qNorm as Float32Array) : undefined;
  const kn = c.qkNorm ? weight(ctx, `${pre}.k_norm.weight`, [c.headDim], l.kNorm as Float32Array) : undefined;
  const proj = (p: "q" | "k" | "v", w: Float32Array, cols: number, b: Float32Array | undefined) =>
    addBias(ctx, matmul(ctx, x, `${pre}.${p}_proj.weight`, w, c.hiddenSize, cols), `${pre}.${p}_proj.bias`, b);
  const q = splitHeads(ctx, proj("q", l.q, qDim, l.qBias), c.numHeads, qn);
  const k = splitHeads(ctx, proj("k", l.k, kvDim, l.kBias), c.numKvHeads, kn);
  const v = g.op("Reshape", [proj("v", l.v, kvDim, l.vBias), g.i64([0, 0, c.numKvHeads, c.headDim])]);
  const toBhsd = (t: string) => g.op("Transpose", [t], { perm: [0, 2, 1, 3] });
  const qr = applyRotary(ctx, toBhsd(q), rope.cos, rope.sin);
  const kr = applyRotary(ctx, toBhsd(k), rope.cos, rope.sin);
  // Named as the graph outputs: an Identity to rename them would copy the whole cache every step.
  const [presentK] = g.node("Concat", [pastKeyName(i, "key"), kr], [presentName(i, "key")], { axis: 2 }) as [string];
  const [presentV] = g.node("Concat", [pastKeyName(i, "value"), toBhsd(v)], [presentName(i, "value")], { axis: 2 }) as [string];

  // Grouped heads without copying K/V: q as [B, KV, G, S, D] against k as [B, KV, 1, D, T].
  const scale = g.constant(floatTensor(ctx.dt, [], Float32Array.of(1 / Math.sqrt(c.headDim))), "scale");
  const qg = g.op("Reshape", [g.op("Mul", [qr, scale]), g.i64([0, c.numKvHeads, groups, -1, c.headDim])]);
  const kt = g.op("Unsqueeze", [g.op("Transpose", [presentK], { perm: [0, 1, 3, 2] }), g.i64([2])]);
  let scores = g.op("MatMul", [qg, kt]);
  if (ctx.dt === "float16") scores = castTo(ctx, scores, 1);
  let probs = g.op("Softmax", [g.op("Add", [scores, bias])], { axis: -1 });
  if (ctx.dt === "float16") probs = castTo(ctx, probs, ctx.dtCode);
  const ctxv = g.op("MatMul", [probs, g.op("Unsqueeze", [presentV, g.i64([2])])]); // [B,KV,G,S,D]
  const merged = g.op("Reshape", [g.op("Transpose", [g.op("Reshape", [ctxv, g.i64([0, c.numHeads, -1, c.headDim])])], { perm: [0, 2, 1, 3] }), g.i64([0, 0, qDim])]);
  const out = addBias(ctx, matmul(ctx, merged, `${pre}.o_proj.weight`, l.o, qDim, c.hiddenSize), `${pre}.o_proj.bias`, l.oBias);
  return { out, presentK, presentV };
}

function buildStandard(ctx: Ctx, src: LlamaWeightSource): void {
  const { g, c } = ctx;
  const { ids, mask, pos } = declareIo(ctx, c.headDim);
  const emb = embedding(ctx, ids, src);
  let h = emb.hidden;
  const bias = attentionBias(ctx, ids, mask);
  const rope = rotaryTables(ctx, pos);
  const presents: [string, string][] = [];
  for (let i = 0; i < c.numLayers; i++) {
    const l = src.layer(i);
    if (!src.checked) checkLayer(c, l, i);
    const pre = `model.layers.${i}`;
    const n1 = rmsNormStandard(ctx, h, weight(ctx, `${pre}.input_layernorm.weight`, [c.hiddenSize], l.inputNorm));
    const att = attentionStandard(ctx, n1, l, i, bias, rope);
    presents.push([att.presentK, att.presentV]);
    h = g.op("Add", [h, att.out]);
    const n2 = rmsNormStandard(ctx, h, weight(ctx, `${pre}.post_attention_layernorm.weight`, [c.hiddenSize], l.postNorm));
    h = g.op("Add", [h, swiglu(ctx, n2, l, i)]);
  }
  const final = rmsNormStandard(ctx, h, weight(ctx, "model.norm.weight", [c.hiddenSize], finalNorm(ctx, src)));
  declareOutputs(ctx, emb.project(final), presents, c.headDim);
}

function finalNorm(ctx: Ctx, src: LlamaWeightSource): Float32Array {
  const w = src.finalNorm();
  checkFinalNorm(ctx.c, w);
  return w;
}

// ---------------------------------------------------------------- fused variant

function simplifiedNorm(ctx: Ctx, x: string, w: string): string {
  return ctx.g.op("SimplifiedLayerNormalization", [x, w], { axis: -1, epsilon: { float: ctx.c.rmsNormEps }, stash_type: 1 });
}

/** Returns [normed, residual sum] of (x + skip). */
function skipNorm(ctx: Ctx, x: string, skip: string, w: string): [string, string] {
  const { g } = ctx;
  const normed = g.fresh("skipnorm");
  const sum = g.fresh("residual");
  g.node("SkipSimplifiedLayerNormalization", [x, skip, w], [normed, "", "", sum], { epsilon: { float: ctx.c.rmsNormEps } }, MS_DOMAIN);
  return [normed, sum];
}

/**
 * GroupQueryAttention's CPU kernel wants head_size % 16 == 0. Smaller heads are zero-padded in
 * the projection weights so no runtime op is needed: real dims [0, d/2) and [d/2, d) go to
 * [0, d/2) and [dp/2, dp/2 + d/2), keeping each rotary pair (i, i + half) together, and zeros
 * change neither q.k nor the output. The fused graph's KV cache then has head size dp.
 */
export function gqaHeadDim(headDim: number): number {
  return Math.ceil(headDim / 16) * 16;
}

function padDimIndex(j: number, d: number, dp: number): number {
  return j < d / 2 ? j : dp / 2 + (j - d / 2);
}

/** [rows, heads*d] -> [rows, heads*dp] (column padding); 4-bit blocks get zero columns likewise. */
function padColumns<M extends Matrix>(w: M, rows: number, heads: number, d: number, dp: number): M;
function padColumns(w: Matrix, rows: number, heads: number, d: number, dp: number): Matrix {
  if (d === dp) return w;
  if (!(w instanceof Float32Array)) {
    const columns: ([number, number] | null)[] = new Array(heads * dp).fill(null);
    for (let h = 0; h < heads; h++) for (let j = 0; j < d; j++) columns[h * dp + padDimIndex(j, d, dp)] = [0, h * d + j];
    return selectQ4Columns([w], columns);
  }
  const out = new Float32Array(rows * heads * dp);
  for (let r = 0; r < rows; r++) {
    for (let h = 0; h < heads; h++) {
      for (let j = 0; j < d; j++) out[r * heads * dp + h * dp + padDimIndex(j, d, dp)] = w[r * heads * d + h * d + j];
    }
  }
  return out;
}

/**
 * [heads*d, cols] -> [heads*dp, cols] (row padding). Rows are what MatMulNBits' blocks run along,
 * so padded 4-bit weights go through float (only heads below 16 values are padded: test models).
 */
function padRows(m: Matrix, cols: number, heads: number, d: number, dp: number): Matrix {
  if (d === dp) return m;
  const w = asFloat(m);
  const out = new Float32Array(heads * dp * cols);
  for (let h = 0; h < heads; h++) {
    for (let j = 0; j < d; j++) out.set(w.subarray((h * d + j) * cols, (h * d + j + 1) * cols), (h * dp + padDimIndex(j, d, dp)) * cols);
  }
  return out;
}

/** [rows, a] [rows, b] [rows, c] -> [rows, a + b + c]: the columns of each side by side. */
function concatColumns(rows: number, parts: Float32Array[]): Float32Array;
function concatColumns(rows: number, parts: Matrix[]): Matrix;
function concatColumns(rows: number, parts: Matrix[]): Matrix {
  if (parts.some((p) => !(p instanceof Float32Array))) {
    // Any part in 4-bit blocks: all of them in blocks (a float part is quantised), joined as they are.
    const q = parts.map((p) => asQ4(p, rows, p instanceof Float32Array ? p.length / rows : p.n));
    return selectQ4Columns(q, q.flatMap((p, i) => Array.from({ length: p.n }, (_, j): [number, number] => [i, j])));
  }
  const floats = parts as Float32Array[];
  const width = floats.reduce((n, p) => n + p.length / rows, 0);
  const out = new Float32Array(rows * width);
  for (let r = 0; r < rows; r++) {
    let at = r * width;
    for (const p of floats) {
      const cols = p.length / rows;
      out.set(p.subarray(r * cols, (r + 1) * cols), at);
      at += cols;
    }
  }
  return out;
}

function buildFused(ctx: Ctx, src: LlamaWeightSource, cacheLen: number, packing: { qkv: boolean; mlp: boolean }): void {
  const { g, c } = ctx;
  const D = c.headDim;
  const Dp = gqaHeadDim(D);
  const { ids, mask } = declareIo(ctx, Dp);
  const qDim = c.numHeads * Dp;
  const kvDim = c.numKvHeads * Dp;
  const emb = embedding(ctx, ids, src);
  const embedded = emb.hidden;

  // As onnxruntime-genai's builder does: seqlens_k = sum(mask) - 1, total = mask width.
  const seqlensK = g.op("Cast", [g.op("Sub", [g.op("ReduceSum", [mask, g.i64([1])], { keepdims: 0 }), g.i64(1)])], { to: 6 });
  const totalLen = g.op("Cast", [g.op("Gather", [g.op("Shape", [mask]), g.i64(1)], { axis: 0 })], { to: 6 });
  const tables = rotaryCaches(D, c.ropeTheta, cacheLen, c.ropeScaling, c.ropeFreqFactors);
  const cosP = new Float32Array(cacheLen * (Dp / 2)).fill(1);
  const sinP = new Float32Array(cacheLen * (Dp / 2));
  for (let p = 0; p < cacheLen; p++) {
    cosP.set(tables.cos.subarray(p * (D / 2), (p + 1) * (D / 2)), p * (Dp / 2));
    sinP.set(tables.sin.subarray(p * (D / 2), (p + 1) * (D / 2)), p * (Dp / 2));
  }
  const cosCache = weight(ctx, "cos_cache", [cacheLen, Dp / 2], cosP);
  const sinCache = weight(ctx, "sin_cache", [cacheLen, Dp / 2], sinP);

  // RMSNorm over a padded head: mean(x^2) shrinks by d/dp, so eps and the weights are rescaled
  // to give exactly the unpadded result.
  const qkNormWeight = (name: string, wn: Float32Array) => {
    const out = new Float32Array(Dp);
    const s = Math.sqrt(D / Dp);
    for (let j = 0; j < D; j++) out[padDimIndex(j, D, Dp)] = wn[j] * s;
    return weight(ctx, name, [Dp], out);
  };
  const perHeadNorm = (x: string, heads: number, wn: string) =>
    g.op("Reshape", [
      g.op("SimplifiedLayerNormalization", [g.op("Reshape", [x, g.i64([0, 0, heads, Dp])]), wn], { axis: -1, epsilon: { float: (c.rmsNormEps * D) / Dp }, stash_type: 1 }),
      g.i64([0, 0, heads * Dp]),
    ]);

  const presents: [string, string][] = [];
  let residual = embedded;
  let pending = ""; // the previous block's output, added to the residual by the next norm
  for (let i = 0; i < c.numLayers; i++) {
    const l = src.layer(i);
    if (!src.checked) checkLayer(c, l, i);
    const pre = `model.layers.${i}`;
    const w1 = weight(ctx, `${pre}.input_layernorm.weight`, [c.hiddenSize], l.inputNorm);
    let n1: string;
    if (pending === "") n1 = simplifiedNorm(ctx, residual, w1);
    else [n1, residual] = skipNorm(ctx, pending, residual, w1);

    const att = `${pre}.self_attn`;
    const qw = padColumns(layerMatrix(ctx, l, "q"), c.hiddenSize, c.numHeads, D, Dp);
    const kw = padColumns(layerMatrix(ctx, l, "k"), c.hiddenSize, c.numKvHeads, D, Dp);
    const vw = padColumns(layerMatrix(ctx, l, "v"), c.hiddenSize, c.numKvHeads, D, Dp);
    // Biases are padded as one row of the weights.
    const bias = (b: Float32Array | undefined, heads: number) => (b ? padColumns(b, 1, heads, D, Dp) : undefined);
    const [qb, kb, vb] = [bias(l.qBias, c.numHeads), bias(l.kBias, c.numKvHeads), bias(l.vBias, c.numKvHeads)];
    let q: string;
    let k = "";
    let v = "";
    if (packing.qkv) {
      const packed = matmul(ctx, n1, `${att}.qkv_proj.weight`, concatColumns(c.hiddenSize, [qw, kw, vw]), c.hiddenSize, qDim + 2 * kvDim);
      q = addBias(ctx, packed, `${att}.qkv_proj.bias`, qb && kb && vb ? concatColumns(1, [qb, kb, vb]) : undefined);
      if (c.qkNorm) [q, k, v] = g.node("Split", [q, g.i64([qDim, kvDim, kvDim])], 3, { axis: -1 }) as [string, string, string];
    } else {
      q = addBias(ctx, matmul(ctx, n1, `${att}.q_proj.weight`, qw, c.hiddenSize, qDim), `${att}.q_proj.bias`, qb);
      k = addBias(ctx, matmul(ctx, n1, `${att}.k_proj.weight`, kw, c.hiddenSize, kvDim), `${att}.k_proj.bias`, kb);
      v = addBias(ctx, matmul(ctx, n1, `${att}.v_proj.weight`, vw, c.hiddenSize, kvDim), `${att}.v_proj.bias`, vb);
    }
    if (c.qkNorm) {
      q = perHeadNorm(q, c.numHeads, qkNormWeight(`${att}.q_norm.weight`, l.qNorm as Float32Array));
      k = perHeadNorm(k, c.numKvHeads, qkNormWeight(`${att}.k_norm.weight`, l.kNorm as Float32Array));
    }
    const attnOut = g.fresh("gqa");
    // Named as the graph outputs: an Identity to rename them would copy the whole cache every step.
    const pk = presentName(i, "key");
    const pv = presentName(i, "value");
    g.node(
      "GroupQueryAttention",
      [q, k, v, pastKeyName(i, "key"), pastKeyName(i, "value"), seqlensK, totalLen, cosCache, sinCache],
      [attnOut, pk, pv],
      { num_heads: c.numHeads, kv_num_heads: c.numKvHeads, do_rotary: 1, rotary_interleaved: 0, scale: { float: 1 / Math.sqrt(D) } },
      MS_DOMAIN,
    );
    presents.push([pk, pv]);
    const o = addBias(ctx, matmul(ctx, attnOut, `${att}.o_proj.weight`, padRows(layerMatrix(ctx, l, "o"), c.hiddenSize, c.numHeads, D, Dp), qDim, c.hiddenSize), `${att}.o_proj.bias`, l.oBias);
    const w2 = weight(ctx, `${pre}.post_attention_layernorm.weight`, [c.hiddenSize], l.postNorm);
    const [n2, sum] = skipNorm(ctx, o, residual, w2);
    residual = sum;
    pending = swiglu(ctx, n2, l, i, packing.mlp);
  }
  const wf = weight(ctx, "model.norm.weight", [c.hiddenSize], finalNorm(ctx, src));
  const [final] = skipNorm(ctx, pending, residual, wf);
  declareOutputs(ctx, emb.project(final), presents, Dp);
}

export function decoderOpsets(variant: GraphVariant): OpsetImport[] {
  const base: OpsetImport[] = [{ domain: "", version: OPSET_ONNX }];
  return variant === "fused" ? [...base, { domain: MS_DOMAIN, version: OPSET_MS }] : base;
}

/**
 * Builds and serialises the decoder, from weights in memory or from a source read a part at a
 * time (with `externalData`, nothing but the part being written is held).
 */
export function buildDecoderModel(c: LlamaConfig, w: LlamaWeights | LlamaWeightSource, opts: DecoderGraphOptions): SerializedModel {
  validateConfig(c);
  let src: LlamaWeightSource;
  if ("layers" in w) {
    checkWeights(c, w);
    src = inMemorySource(w);
  } else src = w;
  const g = new GraphBuilder(`${c.modelType}_decoder_${opts.variant}`, opts.externalData);
  const ctx: Ctx = {
    g,
    c,
    dt: opts.dtype,
    dtCode: opts.dtype === "float16" ? 10 : 1,
    inputsEmbeds: opts.inputsEmbeds === true,
    mropeSection: opts.mropeSection ?? null,
    q4: opts.q4 ?? null,
  };
  // GroupQueryAttention rotates by sequence offsets: it cannot take 3-D positions.
  if (ctx.mropeSection && opts.variant !== "standard") throw new Error("multimodal rotary (mrope) needs the standard variant");
  if ((opts.packedQkv || opts.packedMlp) && opts.variant !== "fused") throw new Error("packed projections need the fused variant");
  if (ctx.q4 && (opts.variant !== "fused" || ctx.inputsEmbeds)) throw new Error("4-bit weights need the fused variant and token ids as input");
  if (opts.variant === "standard") buildStandard(ctx, src);
  else buildFused(ctx, src, opts.rotaryCacheLength ?? c.maxPositionEmbeddings, { qkv: opts.packedQkv === true, mlp: opts.packedMlp === true });
  const plan = opts.externalDataFile ? new ExternalDataPlan(opts.externalDataFile, opts.externalMinBytes ?? 1024) : undefined;
  const metadata: Record<string, string> = { "sluice.variant": opts.variant, "sluice.dtype": opts.dtype };
  if (ctx.q4) metadata["sluice.weights"] = `q4 (MatMulNBits, block ${Q4_BLOCK}, accuracy_level ${ctx.q4.accuracyLevel})`;
  return serializeModel(g, { opsets: decoderOpsets(opts.variant), metadata }, plan);
}
