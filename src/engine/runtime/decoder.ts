// One decoder session: the ONNX Runtime session and what its graph expects. The KV caches and
// batched runs that feed it live in src/engine/batching.
import { existsSync, readdirSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import * as ort from "onnxruntime-node";
import { onnxFileName } from "../../onnx-dtypes.ts";
import { declaresSharedBuffer, decoderSpec, locateModelFiles, type DecoderSpec, type TensorInfo } from "./decoder-spec.ts";
import { planPositions, type RopePlan } from "./mrope.ts";
import { LOGITS_START_INPUT } from "./last-logits.ts";
import { NativeSession, type Fetches } from "./native-session.ts";
import { prepareDecoderGraph } from "./load-graph.ts";
import type { StepBlocks, StepKvOutputs } from "./step-kv-outputs.ts";
import { copyHeads, type KvArray } from "../batching/kv.ts";
import { floatInput, floatSlice, floatTensor, halfBits, int64Tensor, reusable } from "./tensors.ts";
import { nativeCall, nativeCallSync } from "../../native-calls.ts";

export interface SessionOptions {
  providers: ("cuda" | "cpu")[];
  /** Intra-op threads; 0 chooses (see intraOpThreads). */
  threads: number;
}

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
    positions: rope ? planPositions(rope, past, tokens.length) : tokens.map((_, i) => past + i),
  };
}

export interface StepInputs {
  batch: number;
  /** Tokens per row in this run. */
  width: number;
  ids: ArrayLike<number>;
  /** [batch, maskWidth] of 0/1; an int64 one is fed as it is (no conversion). */
  mask: Uint8Array | BigInt64Array;
  maskWidth: number;
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

/** A lone sequence's past keys and values, grown by ONNX Runtime: [1, kv_heads, length, head_dim]. */
export interface KvCache {
  length: number;
  tensors: ort.Tensor[];
}

/** Where a run's new positions are in the packed step output (see step-kv-outputs.ts). */
export interface StepKvLayout {
  /** Output name: [2 * layers * batch, kv_heads, new tokens, head_dim]. */
  output: string;
  /** Per layer, as spec.layers. */
  blocks: StepBlocks[];
}

export class DecoderSession {
  private constructor(
    readonly session: NativeSession,
    /** The same decoder for runs of one token per row (fewer nodes), when made; see run(). */
    readonly oneTokenSession: NativeSession | null,
    readonly spec: DecoderSpec,
    readonly provider: string,
    /** The embed_tokens graph of a split (vision-language) export: input_ids -> inputs_embeds. */
    readonly embedder: ort.InferenceSession | null,
    /**
     * The output holding only the positions a run adds, for shared-buffer graphs rewritten at
     * load (see load-graph.ts); null when the presents must be fetched.
     */
    readonly stepKv: StepKvLayout | null,
    /** How stepKv is produced (see load-graph.ts); null without step outputs. */
    readonly stepMode: StepKvOutputs["kind"] | null,
    /** What the operator should know about how the graph was loaded. */
    readonly notes: string[],
    /**
     * Whether the general session's logits are of the last position unless told otherwise (its
     * LOGITS_START_INPUT); false when they cover every position of a run (the rewrite failed).
     */
    readonly trimmedLogits: boolean,
  ) {}

  /** [-n] tensors for LOGITS_START_INPUT, by n (few distinct widths ever occur). */
  private readonly logitStarts = new Map<number, ort.Tensor>();

  static async create(dir: string, opts: SessionOptions): Promise<DecoderSession> {
    const files = locateModelFiles(dir);
    const small = isSmallModel(files.onnxPath);
    const threads = intraOpThreads(opts.threads, small);
    const sessionOptions: ort.InferenceSession.SessionOptions = {
      executionProviders: opts.providers.map((p) => (p === "cuda" ? { name: "cuda" } : { name: "cpu" })),
      graphOptimizationLevel: "all",
      ...(threads > 0 ? { intraOpNumThreads: threads } : {}),
      interOpNumThreads: 1,
    };
    const logitsName = files.genai?.model?.decoder?.outputs?.logits ?? "logits";
    const notes: string[] = [];
    let stepGraph: StepKvOutputs | null = null;
    let session: NativeSession;
    let oneTokenSession: NativeSession | null = null;
    let trimmedLogits = false;
    try {
      const graph = prepareDecoderGraph(files.onnxPath, logitsName, declaresSharedBuffer(files), small);
      // Loaded from memory: external weights are found next to the original file.
      const fromMemory = { ...sessionOptions, extra: { session: { model_external_initializers_file_folder_path: dirname(files.onnxPath) } } };
      session = graph.bytes ? await NativeSession.create(graph.bytes, fromMemory) : await NativeSession.create(files.onnxPath, sessionOptions);
      if (graph.oneTokenBytes) oneTokenSession = await NativeSession.create(graph.oneTokenBytes, fromMemory);
      stepGraph = graph.step;
      trimmedLogits = graph.trimmedLogits;
    } catch (e) {
      // The rewrites only save work; an export they do not fit still runs as it is.
      notes.push(`the load-time graph rewrites failed (${(e as Error).message.split("\n")[0]}); running the graph as exported`);
      await oneTokenSession?.release();
      oneTokenSession = null;
      session = await NativeSession.create(files.onnxPath, sessionOptions);
    }
    const meta = (list: readonly ort.InferenceSession.ValueMetadata[]): TensorInfo[] =>
      list.map((m) => ({
        name: m.name,
        type: m.isTensor ? m.type : "non-tensor",
        shape: m.isTensor ? [...m.shape] : [],
      }));
    const spec = decoderSpec(files, meta(session.inputMetadata), meta(session.outputMetadata), stepGraph ? new Set(stepGraph.blocks.keys()) : undefined);
    const blocks = stepGraph ? spec.layers.map((l) => stepGraph.blocks.get(l.pastKey)) : [];
    const complete: StepKvLayout | null =
      stepGraph && blocks.every((b) => b !== undefined) ? { output: stepGraph.packed, blocks: blocks as StepBlocks[] } : null;
    let embedder: ort.InferenceSession | null = null;
    if (spec.inputsEmbeds) {
      const path = join(dirname(files.onnxPath), onnxFileName("embed_tokens", files.dtype));
      if (!existsSync(path)) throw new Error(`the decoder takes ${spec.inputsEmbeds} but there is no ${path.slice(dir.length + 1)}`);
      embedder = await ort.InferenceSession.create(path, sessionOptions);
    }
    if (oneTokenSession) notes.push("decode steps run a one-token graph (attention reshaped, not transposed: fewer nodes)");
    const dims = stepGraph?.headDims;
    if (dims) notes.push(`heads of ${dims.used} dimensions, not the ${dims.exported} they were padded to for GroupQueryAttention's kernel (the padding's weights are zero)`);
    return new DecoderSession(session, oneTokenSession, spec, opts.providers[0]!, embedder, complete, complete ? stepGraph!.kind : null, notes, trimmedLogits);
  }

  /**
   * One run of `width` tokens per row, on the one-token graph when there is one and it fits,
   * unless `general`. `logitPositions`: the logits come for each row's last that many positions
   * (at least; see positionLogits), for verifying speculated tokens.
   */
  async run(feeds: Record<string, ort.Tensor>, fetches: Fetches | undefined, width: number, logitPositions = 1, general = false): Promise<Record<string, ort.Tensor>> {
    const one = this.oneTokenSession;
    if (width === 1 && one && !general) return nativeCallSync(() => one.runSync(feeds, fetches));
    return this.general(feeds, fetches, logitPositions);
  }

  /** A run of the general session, with its logits' start when it takes one. */
  private general(feeds: Record<string, ort.Tensor>, fetches: Fetches | undefined, logitPositions: number): Record<string, ort.Tensor> | Promise<Record<string, ort.Tensor>> {
    if (this.trimmedLogits) {
      let start = this.logitStarts.get(logitPositions);
      if (!start) this.logitStarts.set(logitPositions, (start = int64Tensor([-logitPositions], [1])));
      feeds[LOGITS_START_INPUT] = start;
    }
    return nativeCallSync(() => this.session.runSync(feeds, fetches));
  }

  /** Bytes of one cached position of one layer's key (or value) for one sequence. */
  get positionBytes(): number {
    return this.spec.kvHeads * this.spec.headDim * (this.spec.kvType === "float16" ? 2 : 4);
  }

  /** Token embeddings [ids.length, hidden] from the embed_tokens graph, as float32. */
  async embed(ids: ArrayLike<number>): Promise<Float32Array> {
    if (!this.embedder) throw new Error("this decoder has no embed_tokens graph");
    const embedder = this.embedder;
    const out = await nativeCall(() => embedder.run({ [embedder.inputNames[0]!]: int64Tensor(ids, [1, ids.length]) }));
    const t = out[this.embedder.outputNames[0]!]!;
    return floatSlice(t, 0, t.size);
  }

  /** The feeds for ids (or their embeddings), mask and positions; the caller adds the past tensors. */
  async feeds(s: StepInputs): Promise<Record<string, ort.Tensor>> {
    const { spec } = this;
    const feeds: Record<string, ort.Tensor> = {};
    if (spec.inputIds) feeds[spec.inputIds] = int64Tensor(s.ids, [s.batch, s.width]);
    else {
      const embeds = s.embeds ?? (await this.embed(s.ids));
      feeds[spec.inputsEmbeds!] = floatInput(spec.embedsType!, embeds, [s.batch, s.width, embeds.length / (s.batch * s.width)]);
    }
    if (spec.attentionMask) feeds[spec.attentionMask] = int64Tensor(s.mask, [s.batch, s.maskWidth]);
    if (spec.positionIds) {
      const n = s.batch * s.width;
      if (spec.positionRows === 1) feeds[spec.positionIds] = int64Tensor(s.positions, [s.batch, s.width]);
      else {
        const rows = s.positions.length === n ? Array.from({ length: 3 * n }, (_, i) => s.positions[i % n]!) : s.positions;
        feeds[spec.positionIds] = int64Tensor(rows, [3, s.batch, s.width]);
      }
    }
    return feeds;
  }

  /** The logits of row `row`'s last position, from a [batch, width, vocab] output, as float32. */
  lastLogits(t: ort.Tensor, row: number): Float32Array {
    const vocab = this.spec.vocabSize;
    const width = t.dims[1]!;
    return floatSlice(t, (row * width + width - 1) * vocab, vocab);
  }

  /**
   * The logits of column `column` of row `row` of a run `width` tokens wide, from its output (the
   * last dims[1] columns): a view of float32 output, no copy.
   */
  positionLogits(t: ort.Tensor, row: number, column: number, width: number): Float32Array {
    const vocab = this.spec.vocabSize;
    const kept = t.dims[1]!;
    const at = column - (width - kept);
    if (at < 0) throw new Error(`the run returned the logits of its last ${kept} positions, not of column ${column} of ${width}`);
    const offset = (row * kept + at) * vocab;
    if (t.type === "float16") return floatSlice(t, offset, vocab);
    return (t.data as Float32Array).subarray(offset, offset + vocab);
  }

  /**
   * The simplest single-sequence path (a cache that ONNX Runtime re-creates each step), kept for
   * benchmarks and probes; the server batches through src/engine/batching instead.
   */
  emptyCache(): KvCache {
    const { kvType, kvHeads, headDim } = this.spec;
    const dims = [1, kvHeads, 0, headDim];
    const tensors = this.spec.layers.flatMap(() => [0, 1].map(() => floatTensor(kvType, kvType === "float16" ? new Uint16Array(0) : new Float32Array(0), dims)));
    return { length: 0, tensors };
  }

  /** Runs `tokens` after the cached past, replaces the cache with the present, returns the last logits. */
  async forward(tokens: number[], kv: KvCache): Promise<Float32Array> {
    const { spec } = this;
    const past = kv.length;
    const total = past + tokens.length;
    const feeds = await this.feeds({
      batch: 1,
      width: tokens.length,
      ids: tokens,
      mask: new Uint8Array(total).fill(1),
      maskWidth: total,
      positions: tokens.map((_, i) => past + i),
    });
    spec.layers.forEach((l, i) => {
      feeds[l.pastKey] = kv.tensors[2 * i]!;
      feeds[l.pastValue] = kv.tensors[2 * i + 1]!;
    });
    const out = await this.general(feeds, undefined, 1);
    const step = this.stepKv;
    spec.layers.forEach((l, i) => {
      if (step) {
        // Only the new positions come back: append them to each head of the cache.
        const packed = out[step.output]!;
        kv.tensors[2 * i] = this.appended(kv.tensors[2 * i]!, packed, step.blocks[i]!.key, past);
        kv.tensors[2 * i + 1] = this.appended(kv.tensors[2 * i + 1]!, packed, step.blocks[i]!.value, past);
      } else {
        kv.tensors[2 * i] = reusable(out[l.presentKey]!);
        kv.tensors[2 * i + 1] = reusable(out[l.presentValue]!);
      }
    });
    kv.length = total;
    return this.lastLogits(out[spec.logits]!, 0);
  }

  /** [1, heads, past, dim] followed by block `block` [1, heads, new, dim] of a packed step output. */
  private appended(cache: ort.Tensor, packed: ort.Tensor, block: number, past: number): ort.Tensor {
    const { kvType, kvHeads, headDim } = this.spec;
    const added = packed.dims[2]!;
    const total = past + added;
    const from = (t: ort.Tensor): KvArray => (kvType === "float16" ? halfBits(t.data) : (t.data as Float32Array));
    const out: KvArray = kvType === "float16" ? new Uint16Array(kvHeads * total * headDim) : new Float32Array(kvHeads * total * headDim);
    copyHeads(from(cache), 0, past, out, 0, total, kvHeads, headDim, past);
    copyHeads(from(packed), block * kvHeads * added * headDim, added, out, past * headDim, total, kvHeads, headDim, added);
    return floatTensor(kvType, out, [1, kvHeads, total, headDim]);
  }

  async release(): Promise<void> {
    await this.session.release();
    await this.oneTokenSession?.release();
    await this.embedder?.release();
  }
}
