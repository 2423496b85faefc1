// A decoder as the KV backends drive it, whichever way ONNX Runtime is called: through
// onnxruntime-node's JavaScript binding (node-decoder.ts: every tensor a run takes or returns is in
// host memory) or through its C API (capi/: the KV cache stays in the provider's memory, bound in
// place). The batching code (src/engine/batching) is written against this interface alone.
import { readdirSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import type { DecoderSpec } from "./decoder-spec.ts";
import { halfToFloat } from "./half.ts";
import type { HostDeviceTraffic, KvBuffer, KvMemory } from "./kv-memory.ts";
import { planPositions, type RopePlan } from "./mrope.ts";
import type { StepBlocks } from "./step-kv-outputs.ts";

import type { OrtBinding } from "../ort-binding.ts";

export type { OrtBinding };

export interface SessionOptions {
  providers: ("cuda" | "cpu")[];
  /** Intra-op threads; 0 chooses (see intraOpThreads). */
  threads: number;
  /**
   * A shared-buffer graph's attention as exported, writing each run's new positions into the
   * buffer bound as both past and present (StepMode "inplace"), instead of the CPU's rewrites with
   * step outputs. What the C API binding does on a GPU; on the CPU, for tests and benchmarks.
   */
  inPlace?: boolean;
  /**
   * Keep each request's output a function of the request alone (serve --batch-invariant): the
   * attention rewritten as canonical-attention.ts builds it, and the runs' rows as
   * BatchInvariance says. Shared-buffer graphs on the CPU only (see decoder-load.ts's note).
   */
  batchInvariant?: boolean;
}

/**
 * What a decoder loaded with `batchInvariant` needs of the runs the KV backends make, for a
 * position's logits and cache entries to be the same bits whatever run computes it (alone or in
 * a batch, a decode step, a verification run or a prompt chunk of any width).
 */
export interface BatchInvariance {
  /**
   * Every run must compute two rows or more of each product: the graph has 4-bit products
   * (MatMulNBits) whose kernel computes a lone row otherwise. A run of one token for one sequence
   * gets a second row riding along, and a prompt chunk the logits of its last two positions.
   */
  pairRows: boolean;
}

/**
 * How a shared-buffer (GroupQueryAttention) pool gets the positions a run adds: from the graph's
 * packed step output, which the engine writes into the pool ("split": attention rewritten around
 * the cache; "gather": taken from the presents), or written by GroupQueryAttention itself into the
 * buffer bound as both past and present ("inplace").
 */
export type StepMode = "split" | "gather" | "inplace";

/**
 * Below this much weight a decoder runs on one intra-op thread unless told otherwise: its
 * operators take microseconds, so a parallel section costs more than it saves, and the thread
 * pool's spinning takes the core the HTTP thread and the other models need.
 */
const SINGLE_THREAD_BELOW_BYTES = 16 * 2 ** 20;

/** The configured count, else 1 for small models and ONNX Runtime's default (0) otherwise. */
export function intraOpThreads(configured: number, small: boolean): number {
  if (configured > 0) return configured;
  return small ? 1 : 0;
}

/**
 * A model whose step is mostly ONNX Runtime's fixed cost per node rather than arithmetic: it
 * also gets a one-token graph for decode steps (a second session, so a second copy of weights
 * that are small).
 */
export function isSmallModel(onnxPath: string): boolean {
  return modelFileBytes(onnxPath) < SINGLE_THREAD_BELOW_BYTES;
}

/** Bytes of a graph file and its external data files (model.onnx_data, model.onnx.data, ...). */
export function modelFileBytes(onnxPath: string): number {
  const dir = dirname(onnxPath);
  const base = onnxPath.slice(dir.length + 1);
  return readdirSync(dir)
    .filter((f) => f.startsWith(base))
    .reduce((sum, f) => sum + statSync(join(dir, f)).size, 0);
}

/**
 * The inputs of one prompt chunk of a single sequence: `tokens` after `past` cached positions.
 * With a rope plan (a prompt with images, for a 3-D position graph) the positions are the plan's.
 */
export function chunkInputs(tokens: number[], past: number, embeds?: Float32Array, rope?: RopePlan): StepInputs {
  const total = past + tokens.length;
  return {
    batch: 1,
    width: tokens.length,
    ids: tokens,
    embeds,
    mask: new Uint8Array(total).fill(1),
    maskWidth: total,
    lengths: [total],
    positions: rope ? planPositions(rope, past, tokens.length) : tokens.map((_, i) => past + i),
  };
}

export interface StepInputs {
  batch: number;
  /** Tokens per row in this run. */
  width: number;
  ids: ArrayLike<number>;
  /**
   * [batch, maskWidth] of 0/1; an int64 one is fed as it is (no conversion). Absent where the
   * decoder takes `lengths` instead (see Decoder.takesMask).
   */
  mask?: Uint8Array | BigInt64Array;
  maskWidth: number;
  /** Per row, the positions it attends to (its past and its tokens): the mask's count of ones. */
  lengths: ArrayLike<number>;
  /**
   * [batch, width]; or [3, batch, width] (temporal, height, width rows) for a graph with 3-D
   * position_ids, which otherwise gets the same positions on all three rows (text tokens).
   */
  positions: ArrayLike<number>;
  /**
   * Row-major [batch, width, hidden] input embeddings to use instead of looking `ids` up (a
   * prompt chunk whose image tokens carry image features). Only for graphs with inputs_embeds.
   */
  embeds?: Float32Array;
}

/** Where a run's new positions are in the packed step output (see step-kv-outputs.ts). */
export interface StepKvLayout {
  /** Output name: [2 * layers * batch, kv_heads, new tokens, head_dim]. */
  output: string;
  /** Per layer, as spec.layers. */
  blocks: StepBlocks[];
  /** The value inputs take their buffer in blocks of this many positions (see StepKvOutputs.valueBlock); null: as it is. */
  valueBlock: number | null;
}

/**
 * The dims a pool buffer is fed with: [rows, kv_heads, capacity, head_dim], or for a value input
 * of a graph that takes values in blocks, [rows, kv_heads, capacity / block, block, head_dim].
 */
export function poolDims(spec: DecoderSpec, stepKv: StepKvLayout | null, rows: number, capacity: number, value: boolean): number[] {
  const block = value ? stepKv?.valueBlock : null;
  return block ? [rows, spec.kvHeads, capacity / block, block, spec.headDim] : [rows, spec.kvHeads, capacity, spec.headDim];
}

/** A run's logits [batch, kept positions, vocab]: float32, or float16 as its bits. */
export interface Logits {
  data: Float32Array | Uint16Array;
  half: boolean;
  dims: readonly number[];
  /**
   * The data lives in host memory the decoder reuses: it holds until the decoder's next run (the
   * runs' `read` callbacks take it before then), so what is read from it (lastLogits,
   * positionLogits) is copied out.
   */
  reused?: boolean;
}

/** One run over consecutive rows of a fused (shared-buffer) pool. */
export interface PoolRun {
  inputs: StepInputs;
  /** The pool's buffers [rows, kv_heads, capacity, head_dim], per layer's key and value (spec.layers order). */
  buffers: KvBuffer[];
  firstRow: number;
  rows: number;
  capacity: number;
  /** Tensors the decoder made over rows of these buffers, kept by the pool until they change (see dropViews). */
  views: Map<number, unknown>;
  /** Tokens per row. */
  width: number;
  /** The logits come for each row's last this many positions (at least). */
  logitPositions: number;
  /** Run the general session even for one token per row. */
  general: boolean;
  /**
   * Called with the run's packed step output (the "split" and "gather" modes) as soon as the run
   * is over, before any other run can start: the output may live in the decoder's scratch memory.
   */
  onStep?: (step: StepOutput) => void;
}

/** The packed step output of a run (see StepKvLayout), valid until the decoder's next run. */
export interface StepOutput {
  buffer: KvBuffer;
  /** New positions per row. */
  tokens: number;
}

export interface PaddedRun<T> {
  /** What `read` made of the run's logits. */
  read: T;
  /** Per layer's key and value: [batch, kv_heads, past + width, head_dim]. */
  presents: KvBuffer[];
  /** Frees the presents (the caller has copied what it keeps). */
  done(): void;
}

export interface Decoder {
  readonly binding: OrtBinding;
  readonly spec: DecoderSpec;
  /** The execution provider that runs it ("cpu", "cuda"). */
  readonly provider: string;
  /** What the operator should know about how the graph was loaded. */
  readonly notes: string[];
  /** How a shared-buffer pool gets each run's new positions; null for the standard contract. */
  readonly stepMode: StepMode | null;
  /** The packed step output's layout, for the "split" and "gather" modes. */
  readonly stepKv: StepKvLayout | null;
  /** Whether the fused runs need `mask` (else `lengths` is all it reads). */
  readonly takesMask: boolean;
  /** Where the KV buffers live. */
  readonly memory: KvMemory;
  /** Host memory handed to runs and taken from them, and copies between it and the provider's. */
  readonly traffic: HostDeviceTraffic;
  /** Bytes of one cached position of one layer's key (or value) for one sequence. */
  readonly positionBytes: number;
  /** Set when the graph was loaded batch-invariant (SessionOptions.batchInvariant); null otherwise. */
  readonly invariance: BatchInvariance | null;
  /** Token embeddings [ids.length, hidden] from the embed_tokens graph, as float32. */
  embed(ids: ArrayLike<number>): Promise<Float32Array>;
  /**
   * One run over pool rows; the new positions go to `onStep`, or are already in the pool
   * ("inplace"). `read` takes what it needs of the logits as soon as the run is over, before any
   * other run: they may be in memory the decoder reuses (Logits.reused).
   */
  runPool<T>(run: PoolRun, read: (logits: Logits) => T): Promise<T>;
  /** Releases what runPool kept in a pool's `views`, and clears it. */
  dropViews(views: Map<number, unknown>): void;
  /** One run of the standard contract: pasts [batch, kv_heads, pastLength, head_dim] (left padded). */
  runPadded<T>(inputs: StepInputs, pasts: KvBuffer[], pastLength: number, logitPositions: number, read: (logits: Logits) => T): Promise<PaddedRun<T>>;
  release(): Promise<void>;
}

/** Bytes of one cached position of one layer's key (or value). */
export function positionBytes(spec: DecoderSpec): number {
  return spec.kvHeads * spec.headDim * (spec.kvType === "float16" ? 2 : 4);
}

/**
 * The logits of column `column` of row `row` of a run `width` tokens wide, from its output (the
 * last dims[1] columns), as float32: a view of float32 output the run made for itself (no copy),
 * a copy of output in memory the decoder reuses.
 */
export function positionLogits(t: Logits, row: number, column: number, width: number): Float32Array {
  const vocab = t.dims[2]!;
  const kept = t.dims[1]!;
  const at = column - (width - kept);
  if (at < 0) throw new Error(`the run returned the logits of its last ${kept} positions, not of column ${column} of ${width}`);
  const offset = (row * kept + at) * vocab;
  if (t.half) return halfToFloat((t.data as Uint16Array).subarray(offset, offset + vocab));
  const data = t.data as Float32Array;
  return t.reused ? data.slice(offset, offset + vocab) : data.subarray(offset, offset + vocab);
}

/**
 * The logits of row `row`'s last position as float32. A float32 output that is exactly those
 * logits is returned as it is (the run made it for itself): at a 151k vocabulary a copy per token
 * is some 20 µs. Otherwise (and always from memory the decoder reuses) a copy, which outlives
 * the decoder's next run.
 */
export function lastLogits(t: Logits, row: number): Float32Array {
  const vocab = t.dims[2]!;
  const width = t.dims[1]!;
  const offset = (row * width + width - 1) * vocab;
  if (t.half) return halfToFloat((t.data as Uint16Array).subarray(offset, offset + vocab));
  const data = t.data as Float32Array;
  return offset === 0 && vocab === data.length && !t.reused ? data : data.slice(offset, offset + vocab);
}

/** A right-padded mask of each row's length, int64 [batch, maskWidth] (the fused layout). */
export function rightPaddedMask(s: StepInputs): BigInt64Array {
  const mask = new BigInt64Array(s.batch * s.maskWidth);
  for (let r = 0; r < s.batch; r++) mask.fill(1n, r * s.maskWidth, r * s.maskWidth + s.lengths[r]!);
  return mask;
}
