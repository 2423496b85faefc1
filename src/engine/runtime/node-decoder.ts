// The decoder through onnxruntime-node's JavaScript binding: every tensor a run takes or returns is
// in host memory, so the KV cache is JavaScript arrays fed to each run (and, on a GPU, copied to the
// device and back by ONNX Runtime at every step). The KV caches and batched runs that feed it live
// in src/engine/batching; capi/ holds the other way of calling ONNX Runtime.
import * as ort from "onnxruntime-node";
import type { DecoderSpec, TensorInfo } from "./decoder-spec.ts";
import { decoderFiles, describeDecoder, embedderPath, loadSessions } from "./decoder-load.ts";
import {
  chunkInputs,
  poolDims,
  positionBytes,
  type BatchInvariance,
  rightPaddedMask,
  type Decoder,
  type Logits,
  type PaddedRun,
  type PoolRun,
  type SessionOptions,
  type StepInputs,
  type StepKvLayout,
  type StepMode,
} from "./decoder.ts";
import { LOGITS_START_INPUT } from "./last-logits.ts";
import { NativeSession, type Fetches } from "./native-session.ts";
import type { StepKvOutputs } from "./step-kv-outputs.ts";
import { copyHeads, hostBuffer, HostKvMemory, type HostDeviceTraffic, type KvArray, type KvBuffer } from "./kv-memory.ts";
import { floatInput, floatSlice, floatTensor, halfBits, int64Tensor, reusable } from "./tensors.ts";
import { nativeCallSync } from "../../native-calls.ts";
import { embedTokens, NodeHostSession, type HostSession } from "./host-session.ts";

/** A lone sequence's past keys and values, grown by ONNX Runtime: [1, kv_heads, length, head_dim]. */
export interface KvCache {
  length: number;
  tensors: ort.Tensor[];
}

/** Bytes of a tensor's data. */
function tensorBytes(t: ort.Tensor): number {
  return (t.data as ArrayBufferView).byteLength;
}

/** A logits output as the batching code reads it. */
function logitsOf(t: ort.Tensor): Logits {
  const half = t.type === "float16";
  return { data: half ? halfBits(t.data) : (t.data as Float32Array), half, dims: t.dims };
}

export class NodeDecoder implements Decoder {
  readonly binding = "node" as const;
  readonly traffic: HostDeviceTraffic = { toDevice: 0, toHost: 0 };
  readonly memory: HostKvMemory;
  readonly takesMask: boolean;
  readonly positionBytes: number;
  readonly stepMode: StepMode | null;

  private constructor(
    readonly session: NativeSession,
    /** The same decoder for runs of one token per row (fewer nodes), when made; see run(). */
    readonly oneTokenSession: NativeSession | null,
    readonly spec: DecoderSpec,
    readonly provider: string,
    /** The embed_tokens graph of a split (vision-language) export: input_ids -> inputs_embeds. */
    readonly embedder: HostSession | null,
    /**
     * The output holding only the positions a run adds, for shared-buffer graphs rewritten at
     * load (see load-graph.ts); null when the presents must be fetched.
     */
    readonly stepKv: StepKvLayout | null,
    /** How stepKv is produced (see load-graph.ts); null without step outputs. */
    stepKind: StepKvOutputs["kind"] | null,
    /** What the operator should know about how the graph was loaded. */
    readonly notes: string[],
    /**
     * Whether the general session's logits are of the last position unless told otherwise (its
     * LOGITS_START_INPUT); false when they cover every position of a run (the rewrite failed).
     */
    readonly trimmedLogits: boolean,
    readonly invariance: BatchInvariance | null,
  ) {
    this.memory = new HostKvMemory(spec.kvType === "float16", false);
    this.takesMask = spec.attentionMask !== null;
    this.positionBytes = positionBytes(spec);
    // Without step outputs, a shared-buffer pool is bound as both past and present: ONNX Runtime
    // writes in place, and the binding copies each present back.
    this.stepMode = stepKind ?? (spec.sharedBuffer ? "inplace" : null);
  }

  /** [-n] tensors for LOGITS_START_INPUT, by n (few distinct widths ever occur). */
  private readonly logitStarts = new Map<number, ort.Tensor>();

  static async create(dir: string, opts: SessionOptions): Promise<NodeDecoder> {
    const d = decoderFiles(dir, opts);
    const sessionOptions: ort.InferenceSession.SessionOptions = {
      executionProviders: opts.providers.map((p) => (p === "cuda" ? { name: "cuda" } : { name: "cpu" })),
      graphOptimizationLevel: "all",
      ...(d.threads > 0 ? { intraOpNumThreads: d.threads } : {}),
      interOpNumThreads: 1,
    };
    // Loaded from memory: external weights are found next to the original file.
    const fromMemory = { ...sessionOptions, extra: { session: { model_external_initializers_file_folder_path: d.weightsDir } } };
    const loaded = await loadSessions(
      d,
      { stepOutputs: !opts.inPlace, invariant: opts.batchInvariant === true },
      (model) => (typeof model === "string" ? NativeSession.create(model, sessionOptions) : NativeSession.create(model, fromMemory)),
      (s) => s.release(),
    );
    const meta = (list: readonly ort.InferenceSession.ValueMetadata[]): TensorInfo[] =>
      list.map((m) => ({
        name: m.name,
        type: m.isTensor ? m.type : "non-tensor",
        shape: m.isTensor ? [...m.shape] : [],
      }));
    const { spec, stepKv } = describeDecoder(d.files, meta(loaded.session.inputMetadata), meta(loaded.session.outputMetadata), loaded.step);
    const path = embedderPath(dir, d, spec);
    const embedder = path ? await NodeHostSession.open(path, { providers: opts.providers, threads: d.threads }) : null;
    return new NodeDecoder(loaded.session, loaded.oneToken, spec, opts.providers[0]!, embedder, stepKv, stepKv ? loaded.step!.kind : null, loaded.notes, loaded.trimmedLogits, loaded.invariance);
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

  /** Token embeddings [ids.length, hidden] from the embed_tokens graph, as float32. */
  async embed(ids: ArrayLike<number>): Promise<Float32Array> {
    if (!this.embedder) throw new Error("this decoder has no embed_tokens graph");
    return embedTokens(this.embedder, ids);
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
    if (spec.attentionMask) feeds[spec.attentionMask] = int64Tensor(s.mask ?? rightPaddedMask(s), [s.batch, s.maskWidth]);
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

  /** Counts what a run took from and gave to host memory: all of it, on this binding. */
  private count(feeds: Record<string, ort.Tensor>, out: Record<string, ort.Tensor>): void {
    for (const k in feeds) this.traffic.toDevice += tensorBytes(feeds[k]!);
    for (const k in out) this.traffic.toHost += tensorBytes(out[k]!);
  }

  async runPool<T>(r: PoolRun, read: (logits: Logits) => T): Promise<T> {
    const { spec, stepKv } = this;
    const feeds = await this.feeds(r.inputs);
    // Tensors over the rows, made again only when the buffers are replaced: onnxruntime-common
    // validates each new tensor, a few microseconds for a layer's pair at every step of a small model.
    const key = r.firstRow * 2 ** 24 + r.rows;
    let kv = r.views.get(key) as ort.Tensor[] | undefined;
    if (!kv) {
      const stride = spec.kvHeads * r.capacity * spec.headDim;
      kv = r.buffers.map((b, i) => floatTensor(spec.kvType, b.host!.subarray(r.firstRow * stride, (r.firstRow + r.rows) * stride), poolDims(spec, stepKv, r.rows, r.capacity, i % 2 === 1)));
      r.views.set(key, kv);
    }
    const fetches: Record<string, ort.Tensor | null> = { [spec.logits]: null };
    spec.layers.forEach((l, i) => {
      feeds[l.pastKey] = kv[2 * i]!;
      feeds[l.pastValue] = kv[2 * i + 1]!;
      if (!stepKv) {
        fetches[l.presentKey] = kv[2 * i]!;
        fetches[l.presentValue] = kv[2 * i + 1]!;
      }
    });
    if (stepKv) fetches[stepKv.output] = null;
    const out = await this.run(feeds, fetches, r.width, r.logitPositions, r.general);
    this.count(feeds, out);
    if (stepKv) {
      const packed = out[stepKv.output]!;
      r.onStep?.({ buffer: hostBuffer(packed.type === "float16" ? halfBits(packed.data) : (packed.data as Float32Array)), tokens: packed.dims[2]! });
    }
    return read(logitsOf(out[spec.logits]!));
  }

  dropViews(views: Map<number, unknown>): void {
    views.clear();
  }

  async runPadded<T>(inputs: StepInputs, pasts: KvBuffer[], pastLength: number, logitPositions: number, read: (logits: Logits) => T): Promise<PaddedRun<T>> {
    const { spec } = this;
    const feeds = await this.feeds(inputs);
    const dims = [inputs.batch, spec.kvHeads, pastLength, spec.headDim];
    spec.layers.forEach((l, i) => {
      feeds[l.pastKey] = floatTensor(spec.kvType, pasts[2 * i]!.host!, dims);
      feeds[l.pastValue] = floatTensor(spec.kvType, pasts[2 * i + 1]!.host!, dims);
    });
    const out = await this.run(feeds, undefined, inputs.width, logitPositions);
    this.count(feeds, out);
    const data = (t: ort.Tensor): KvArray => (t.type === "float16" ? halfBits(t.data) : (t.data as Float32Array));
    const presents = spec.layers.flatMap((l) => [hostBuffer(data(out[l.presentKey]!)), hostBuffer(data(out[l.presentValue]!))]);
    return { read: read(logitsOf(out[spec.logits]!)), presents, done: () => {} };
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
    const feeds = await this.feeds(chunkInputs(tokens, past));
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
    return floatSlice(out[spec.logits]!, out[spec.logits]!.size - spec.vocabSize, spec.vocabSize);
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

