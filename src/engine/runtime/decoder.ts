// One decoder session and the KV cache it reads and writes. This is the only place that feeds
// ONNX Runtime during generation.
import * as ort from "onnxruntime-node";
import { decoderSpec, locateModelFiles, type DecoderSpec, type TensorInfo } from "./decoder-spec.ts";
import { floatSlice, floatTensor, halfBits, int64Tensor, reusable } from "./tensors.ts";

export interface SessionOptions {
  providers: ("cuda" | "cpu")[];
  threads: number;
}

/** A sequence's past keys and values: two tensors per layer, [1, kv_heads, length, head_dim]. */
export interface KvCache {
  length: number;
  tensors: ort.Tensor[];
}

export class DecoderSession {
  private constructor(
    readonly session: ort.InferenceSession,
    readonly spec: DecoderSpec,
    readonly provider: string,
  ) {}

  static async create(dir: string, opts: SessionOptions): Promise<DecoderSession> {
    const files = locateModelFiles(dir);
    const sessionOptions: ort.InferenceSession.SessionOptions = {
      executionProviders: opts.providers.map((p) => (p === "cuda" ? { name: "cuda" } : { name: "cpu" })),
      graphOptimizationLevel: "all",
      ...(opts.threads > 0 ? { intraOpNumThreads: opts.threads } : {}),
      interOpNumThreads: 1,
    };
    const session = await ort.InferenceSession.create(files.onnxPath, sessionOptions);
    const meta = (list: readonly ort.InferenceSession.ValueMetadata[]): TensorInfo[] =>
      list.map((m) => ({
        name: m.name,
        type: m.isTensor ? m.type : "non-tensor",
        shape: m.isTensor ? [...m.shape] : [],
      }));
    const spec = decoderSpec(files, meta(session.inputMetadata), meta(session.outputMetadata));
    return new DecoderSession(session, spec, opts.providers[0]!);
  }

  emptyCache(): KvCache {
    const { kvType, kvHeads, headDim } = this.spec;
    const dims = [1, kvHeads, 0, headDim];
    const tensors: ort.Tensor[] = [];
    for (let i = 0; i < this.spec.layers.length * 2; i++) {
      tensors.push(floatTensor(kvType, kvType === "float16" ? new Uint16Array(0) : new Float32Array(0), dims));
    }
    return { length: 0, tensors };
  }

  /** A copy that the fork can extend without touching the original (for n > 1). */
  cloneCache(kv: KvCache): KvCache {
    return {
      length: kv.length,
      tensors: kv.tensors.map((t) =>
        t.type === "float16"
          ? floatTensor("float16", halfBits(t.data).slice(), t.dims)
          : floatTensor("float32", (t.data as Float32Array).slice(), t.dims),
      ),
    };
  }

  /**
   * Runs `tokens` after the cached past, extends the cache, and returns the logits of the last
   * position as float32.
   */
  async forward(tokens: number[], kv: KvCache): Promise<Float32Array> {
    const { spec } = this;
    const past = kv.length;
    const total = past + tokens.length;
    const feeds: Record<string, ort.Tensor> = { [spec.inputIds]: int64Tensor(tokens, [1, tokens.length]) };
    if (spec.attentionMask) feeds[spec.attentionMask] = int64Tensor(new Array(total).fill(1), [1, total]);
    if (spec.positionIds) feeds[spec.positionIds] = int64Tensor(tokens.map((_, i) => past + i), [1, tokens.length]);
    spec.layers.forEach((l, i) => {
      feeds[l.pastKey] = kv.tensors[2 * i]!;
      feeds[l.pastValue] = kv.tensors[2 * i + 1]!;
    });
    const out = await this.session.run(feeds);
    spec.layers.forEach((l, i) => {
      kv.tensors[2 * i] = reusable(out[l.presentKey]!);
      kv.tensors[2 * i + 1] = reusable(out[l.presentValue]!);
    });
    kv.length = total;
    const vocab = spec.vocabSize;
    return floatSlice(out[spec.logits]!, (tokens.length - 1) * vocab, vocab);
  }

  async release(): Promise<void> {
    await this.session.release();
  }
}
