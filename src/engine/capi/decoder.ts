// The decoder through ONNX Runtime's C API (ort-api.ts): the KV cache lives in the execution
// provider's memory (provider-memory.ts) and is bound in place through an IoBinding; per run only
// the token ids, positions, per-row lengths (and the logits start) cross from the host, and only
// the logits come back. On the CPU provider the graph is the one the JS binding runs (the same
// rewrites, the same step outputs, written into the pool in the provider's memory), so both give
// the same tokens. On a GPU, GroupQueryAttention writes each run's keys and values straight into
// the buffer bound as both its past and its present, as onnxruntime-genai does.
import { onnxRuntimeLibDir } from "../providers.ts";
import {
  poolDims,
  positionBytes,
  rightPaddedMask,
  type BatchInvariance,
  type Decoder,
  type Logits,
  type PaddedRun,
  type PoolRun,
  type SessionOptions,
  type StepInputs,
  type StepKvLayout,
  type StepMode,
  type StepOutput,
} from "../runtime/decoder.ts";
import type { DecoderSpec } from "../runtime/decoder-spec.ts";
import { decoderFiles, describeDecoder, embedderPath, loadSessions } from "../runtime/decoder-load.ts";
import { embedTokens, type HostSession } from "../runtime/host-session.ts";
import { floatArray, int64Array } from "../runtime/host-arrays.ts";
import type { HostDeviceTraffic, KvBuffer } from "../runtime/kv-memory.ts";
import { LOGITS_START_INPUT } from "../runtime/last-logits.ts";
import { nativeCallSync } from "../../native-calls.ts";
import { ortLibrary, outArg, outPtr, type OrtLibrary, type Ptr } from "./ort-api.ts";
import { CpuProviderMemory, CudaProviderMemory, type ProviderMemory } from "./provider-memory.ts";
import { CapiHostSession } from "./host-session.ts";
import { addressOf, CapiSession, IoBinding, MemoryInfo, releaseValue, tensorValue, valueTensor, type ElementType, type ProviderOptions } from "./session.ts";

/** A session and its binding, which keeps the pool's tensors bound from one run to the next. */
interface Bound {
  session: CapiSession;
  binding: IoBinding;
  /** The pool tensors bound last (rebinding the same ones is skipped). */
  pool: Ptr[] | null;
  /** Host memory the runs' logits are written into, reused from run to run (grown as needed). */
  logits: Float32Array | Uint16Array | null;
}

/** Host arrays handed to one run, as OrtValues; released after it. */
class RunValues {
  readonly values: Ptr[] = [];
  /** Kept alive until the run is over: ONNX Runtime reads them in place. */
  readonly arrays: NodeJS.TypedArray[] = [];
  bytes = 0;

  constructor(
    private readonly lib: OrtLibrary,
    private readonly host: MemoryInfo,
  ) {}

  add(array: NodeJS.TypedArray, dims: readonly number[], type: ElementType): Ptr {
    this.arrays.push(array);
    this.bytes += array.byteLength;
    const v = tensorValue(this.lib, this.host, addressOf(array), array.byteLength, dims, type);
    this.values.push(v);
    return v;
  }

  release(): void {
    for (const v of this.values) releaseValue(this.lib, v);
  }
}

export interface CapiDecoderOptions extends SessionOptions {
  /** CUDA device ordinal (default 0). */
  device?: number;
}

export class CapiDecoder implements Decoder {
  readonly binding = "capi" as const;
  readonly positionBytes: number;
  readonly takesMask: boolean;
  private readonly general: Bound;
  private readonly oneToken: Bound | null;
  /** Scratch in the provider's memory for the packed step output (grown as needed). */
  private stepBuffer: KvBuffer | null = null;
  /** OrtValues over pool rows handed out to pools' `views`, released by dropViews or release(). */
  private readonly views = new Set<Ptr>();
  private readonly elementBytes: number;

  private constructor(
    private readonly lib: OrtLibrary,
    readonly spec: DecoderSpec,
    readonly provider: "cpu" | "cuda",
    readonly notes: string[],
    readonly stepMode: StepMode | null,
    readonly stepKv: StepKvLayout | null,
    private readonly trimmedLogits: boolean,
    general: CapiSession,
    oneToken: CapiSession | null,
    private readonly embedder: HostSession | null,
    readonly memory: ProviderMemory,
    /** Where the pool and step buffers live (OrtValues over them say so). */
    private readonly deviceInfo: MemoryInfo,
    /** Host memory, for what crosses. */
    private readonly hostInfo: MemoryInfo,
    private readonly allocator: Ptr | null,
    readonly traffic: HostDeviceTraffic,
    readonly invariance: BatchInvariance | null,
  ) {
    this.general = { session: general, binding: new IoBinding(general), pool: null, logits: null };
    this.oneToken = oneToken ? { session: oneToken, binding: new IoBinding(oneToken), pool: null, logits: null } : null;
    this.positionBytes = positionBytes(spec);
    this.takesMask = spec.attentionMask !== null;
    this.elementBytes = spec.kvType === "float16" ? 2 : 4;
  }

  static async create(dir: string, opts: CapiDecoderOptions): Promise<CapiDecoder> {
    const libDir = onnxRuntimeLibDir();
    const lib = ortLibrary(libDir);
    const d = decoderFiles(dir, opts);
    const provider = opts.providers[0] === "cuda" ? "cuda" : "cpu";
    const device = opts.device ?? 0;
    const base: ProviderOptions = {
      provider,
      threads: d.threads,
      ...(provider === "cuda"
        ? { cuda: { device_id: String(device), arena_extend_strategy: "kSameAsRequested", do_copy_in_default_stream: "1", cudnn_conv_algo_search: "HEURISTIC" } }
        : {}),
    };
    const fromMemory: ProviderOptions = { ...base, config: { "session.model_external_initializers_file_folder_path": d.weightsDir } };
    // On a GPU the attention writes in place; on the CPU the same graph as the JS binding's.
    const inPlace = provider === "cuda" || opts.inPlace === true;
    const loaded = await loadSessions(
      d,
      { stepOutputs: !inPlace, lengthsInput: true, mask: d.files.genai?.model?.decoder?.inputs?.attention_mask ?? "attention_mask", invariant: opts.batchInvariant === true },
      async (model) => CapiSession.create(lib, model, typeof model === "string" ? base : fromMemory),
      (s) => s.release(),
    );
    const session = loaded.session;
    const { spec, stepKv } = describeDecoder(d.files, session.inputs, session.outputs, loaded.step);
    const path = embedderPath(dir, d, spec);
    const embedder = path ? CapiHostSession.open(path, { providers: [provider], threads: d.threads, device }) : null;
    const traffic: HostDeviceTraffic = { toDevice: 0, toHost: 0 };
    const hostInfo = MemoryInfo.cpu(lib);
    const half = spec.kvType === "float16";
    let memory: ProviderMemory;
    let deviceInfo: MemoryInfo;
    let allocator: Ptr | null = null;
    if (provider === "cuda") {
      deviceInfo = MemoryInfo.named(lib, "Cuda", device);
      lib.check("CreateAllocator", session.handle, deviceInfo.handle, outArg());
      allocator = outPtr();
      memory = new CudaProviderMemory(lib, allocator, half, traffic, libDir, device);
    } else {
      deviceInfo = hostInfo;
      memory = new CpuProviderMemory(lib, half, traffic);
    }
    const stepMode: StepMode | null = stepKv ? loaded.step!.kind : spec.sharedBuffer ? "inplace" : null;
    const notes = [...loaded.notes, `ONNX Runtime ${lib.version} through its C API (${provider} provider): the KV cache stays in the provider's memory`];
    return new CapiDecoder(lib, spec, provider, notes, stepMode, stepKv, loaded.trimmedLogits, session, loaded.oneToken, embedder, memory, deviceInfo, hostInfo, allocator, traffic, loaded.invariance);
  }

  /** The logits positions a run of `width` returns on `bound`'s graph. */
  private kept(bound: Bound, width: number, logitPositions: number): number {
    if (bound === this.oneToken) return 1;
    return this.trimmedLogits ? Math.min(logitPositions, width) : width;
  }

  /** Binds the inputs every run takes from the host: ids or embeddings, mask or lengths, positions, logits start. */
  private bindInputs(bound: Bound, s: StepInputs, run: RunValues, logitPositions: number): void {
    const { spec } = this;
    const b = bound.binding;
    if (spec.inputIds) b.input(spec.inputIds, run.add(int64Array(s.ids), [s.batch, s.width], "int64"));
    else {
      if (!s.embeds) throw new Error("this decoder takes inputs_embeds: the run needs its embeddings (see withEmbeds)");
      const data = floatArray(spec.embedsType!, s.embeds);
      b.input(spec.inputsEmbeds!, run.add(data, [s.batch, s.width, s.embeds.length / (s.batch * s.width)], spec.embedsType!));
    }
    if (spec.attentionMask) b.input(spec.attentionMask, run.add(int64Array(s.mask ?? rightPaddedMask(s)), [s.batch, s.maskWidth], "int64"));
    if (spec.seqlensK) {
      const seqlens = new Int32Array(s.batch);
      for (let r = 0; r < s.batch; r++) seqlens[r] = s.lengths[r]! - 1;
      b.input(spec.seqlensK, run.add(seqlens, [s.batch], "int32"));
    }
    if (spec.totalLength) b.input(spec.totalLength, run.add(Int32Array.of(s.maskWidth), [], "int32"));
    if (spec.positionIds) {
      const n = s.batch * s.width;
      if (spec.positionRows === 1) b.input(spec.positionIds, run.add(int64Array(s.positions), [s.batch, s.width], "int64"));
      else {
        const rows = s.positions.length === n ? Array.from({ length: 3 * n }, (_, i) => s.positions[i % n]!) : s.positions;
        b.input(spec.positionIds, run.add(int64Array(rows), [3, s.batch, s.width], "int64"));
      }
    }
    if (this.trimmedLogits && bound === this.general) b.input(LOGITS_START_INPUT, run.add(BigInt64Array.of(BigInt(-logitPositions)), [1], "int64"));
  }

  /**
   * Binds the logits [batch, kept, vocab] to host memory this binding reuses: the logits are the
   * one output that crosses back, and a fresh array per step would be allocated and zeroed only to
   * be copied out of (lastLogits copies each row it reads). Grown to the largest run, never shrunk.
   */
  private bindLogits(bound: Bound, run: RunValues, batch: number, kept: number): Logits {
    const { spec } = this;
    const half = spec.logitsType === "float16";
    const n = batch * kept * spec.vocabSize;
    if (!bound.logits || bound.logits.length < n) bound.logits = half ? new Uint16Array(n) : new Float32Array(n);
    const data = bound.logits.subarray(0, n);
    const dims = [batch, kept, spec.vocabSize];
    bound.binding.output(spec.logits, run.add(data, dims, spec.logitsType));
    run.bytes -= data.byteLength;
    return { data, half, dims, reused: true };
  }

  /**
   * One run of `bound`, counted as in flight for the worker's teardown (see native-calls.ts). It
   * returns without yielding once the run is over (a promise only while the thread is stopping,
   * which never settles), so what follows it runs before any other caller's run.
   */
  private execute(bound: Bound): Promise<void> | void {
    this.memory.settle();
    const ran = nativeCallSync(() => bound.binding.run());
    if (ran instanceof Promise) return ran;
  }

  /**
   * The run's inputs with the tokens' embeddings, for a graph that takes inputs_embeds: looked up
   * before anything is bound, so that binding and running happen with no other run in between.
   */
  private async withEmbeds(s: StepInputs): Promise<StepInputs> {
    return this.spec.inputsEmbeds && !s.embeds ? { ...s, embeds: await this.embed(s.ids) } : s;
  }

  async runPool<T>(r: PoolRun, read: (logits: Logits) => T): Promise<T> {
    const { spec, stepKv } = this;
    const inputs = await this.withEmbeds(r.inputs);
    const bound = r.width === 1 && this.oneToken && !r.general ? this.oneToken : this.general;
    const run = new RunValues(this.lib, this.hostInfo);
    try {
      this.bindInputs(bound, inputs, run, r.logitPositions);
      const pool = this.poolViews(r);
      if (bound.pool !== pool) {
        spec.layers.forEach((l, i) => {
          bound.binding.input(l.pastKey, pool[2 * i]!);
          bound.binding.input(l.pastValue, pool[2 * i + 1]!);
          if (this.stepMode === "inplace") {
            bound.binding.output(l.presentKey, pool[2 * i]!);
            bound.binding.output(l.presentValue, pool[2 * i + 1]!);
          }
        });
        bound.pool = pool;
      }
      const logits = this.bindLogits(bound, run, r.rows, this.kept(bound, r.width, r.logitPositions));
      let step: StepOutput | null = null;
      if (stepKv) {
        const length = 2 * spec.layers.length * r.rows * spec.kvHeads * r.width * spec.headDim;
        const buffer = this.stepScratch(length);
        const value = tensorValue(this.lib, this.deviceInfo, buffer.address, length * this.elementBytes, [2 * spec.layers.length * r.rows, spec.kvHeads, r.width, spec.headDim], spec.kvType);
        run.values.push(value);
        bound.binding.output(stepKv.output, value);
        step = { buffer, tokens: r.width };
      }
      const stopping = this.execute(bound);
      if (stopping) await stopping;
      // Before anything else can run and overwrite the scratch and the logits (see execute).
      if (step) r.onStep?.(step);
      this.traffic.toDevice += run.bytes;
      this.traffic.toHost += logits.data.byteLength;
      return read(logits);
    } finally {
      run.release();
    }
  }

  /** The provider-memory scratch for a step output of `length` elements. */
  private stepScratch(length: number): KvBuffer {
    if (!this.stepBuffer || this.stepBuffer.length < length) {
      if (this.stepBuffer) this.memory.free(this.stepBuffer);
      this.stepBuffer = this.memory.alloc(Math.max(length, 2 * (this.stepBuffer?.length ?? 0)));
    }
    return this.memory.prefix(this.stepBuffer, length);
  }

  /** OrtValues over the run's pool rows, [rows, kv_heads, capacity, head_dim] per tensor, kept in the pool's views. */
  private poolViews(r: PoolRun): Ptr[] {
    const key = r.firstRow * 2 ** 24 + r.rows;
    const cached = r.views.get(key) as Ptr[] | undefined;
    if (cached) return cached;
    const { spec } = this;
    const stride = spec.kvHeads * r.capacity * spec.headDim;
    const values = r.buffers.map((b, i) => {
      const dims = poolDims(spec, this.stepKv, r.rows, r.capacity, i % 2 === 1);
      const v = tensorValue(this.lib, this.deviceInfo, b.address + r.firstRow * stride * this.elementBytes, r.rows * stride * this.elementBytes, dims, spec.kvType);
      this.views.add(v);
      return v;
    });
    r.views.set(key, values);
    return values;
  }

  dropViews(views: Map<number, unknown>): void {
    for (const list of views.values()) {
      for (const v of list as Ptr[]) {
        if (this.views.delete(v)) releaseValue(this.lib, v);
      }
      // A binding still holding them would keep the values alive inside ONNX Runtime; rebind next run.
      for (const bound of [this.general, this.oneToken]) if (bound && bound.pool === list) bound.pool = null;
    }
    views.clear();
  }

  async runPadded<T>(given: StepInputs, pasts: KvBuffer[], pastLength: number, logitPositions: number, read: (logits: Logits) => T): Promise<PaddedRun<T>> {
    const { spec } = this;
    const inputs = await this.withEmbeds(given);
    const bound = this.general;
    const run = new RunValues(this.lib, this.hostInfo);
    const b = bound.binding;
    b.clear();
    bound.pool = null;
    try {
      this.bindInputs(bound, inputs, run, logitPositions);
      const dims = [inputs.batch, spec.kvHeads, pastLength, spec.headDim];
      const bytes = inputs.batch * spec.kvHeads * pastLength * spec.headDim * this.elementBytes;
      spec.layers.forEach((l, i) => {
        for (const [name, buffer] of [[l.pastKey, pasts[2 * i]!], [l.pastValue, pasts[2 * i + 1]!]] as const) {
          const v = tensorValue(this.lib, this.deviceInfo, buffer.address, bytes, dims, spec.kvType);
          run.values.push(v);
          b.input(name, v);
        }
      });
      const logits = this.bindLogits(bound, run, inputs.batch, this.kept(bound, inputs.width, logitPositions));
      for (const l of spec.layers) {
        b.outputTo(l.presentKey, this.deviceInfo);
        b.outputTo(l.presentValue, this.deviceInfo);
      }
      const stopping = this.execute(bound);
      if (stopping) await stopping;
      this.traffic.toDevice += run.bytes;
      this.traffic.toHost += logits.data.byteLength;
      const [logitsValue, ...presentValues] = b.outputs();
      releaseValue(this.lib, logitsValue!);
      const presents = presentValues.map((v) => {
        const t = valueTensor(this.lib, v);
        return this.memory.adopt(v, t.address, t.dims.reduce((a, x) => a * x, 1));
      });
      return { read: read(logits), presents, done: () => presents.forEach((p) => this.memory.free(p)) };
    } finally {
      b.clear();
      run.release();
    }
  }

  async embed(ids: ArrayLike<number>): Promise<Float32Array> {
    if (!this.embedder) throw new Error("this decoder has no embed_tokens graph");
    return embedTokens(this.embedder, ids);
  }

  async release(): Promise<void> {
    for (const b of [this.general, this.oneToken]) {
      if (!b) continue;
      b.binding.release();
    }
    for (const v of this.views) releaseValue(this.lib, v);
    this.views.clear();
    this.memory.freeAll();
    this.stepBuffer = null;
    if (this.allocator) this.lib.call("ReleaseAllocator", this.allocator);
    this.general.session.release();
    this.oneToken?.session.release();
    await this.embedder?.release();
    if (this.deviceInfo !== this.hostInfo) this.deviceInfo.release();
    this.hostInfo.release();
  }
}
