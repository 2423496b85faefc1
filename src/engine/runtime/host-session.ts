// A session whose inputs and outputs all live in host memory (a vision encoder, an embed_tokens
// graph), run through either binding: decoders.ts opens it on the one the model's decoder uses.
import * as ort from "onnxruntime-node";
import { nativeCall } from "../../native-calls.ts";
import { halfToFloat } from "./half.ts";
import { int64Array } from "./host-arrays.ts";

/** A tensor in host memory: float16 as its bits (Uint16Array), as onnxruntime-node's tensors hold it. */
export interface HostTensor {
  readonly type: string;
  readonly data: ArrayBufferView;
  readonly dims: readonly number[];
}

export interface HostSession {
  readonly inputNames: readonly string[];
  readonly outputNames: readonly string[];
  /** An input's element type ("float32", "float16", "int64", …), or null when it is not a tensor. */
  inputType(name: string): string | null;
  run(feeds: Record<string, HostTensor>): Promise<Record<string, HostTensor>>;
  release(): Promise<void>;
}

export interface HostSessionOptions {
  providers: ("cuda" | "cpu")[];
  /** Intra-op threads; 0: ONNX Runtime's default. */
  threads: number;
}

/** A float tensor's values as float32 (a float32 tensor's own array). */
export function hostFloats(t: HostTensor): Float32Array {
  if (t.type === "float16") return halfToFloat(new Uint16Array(t.data.buffer, t.data.byteOffset, t.data.byteLength / 2));
  if (t.type !== "float32") throw new Error(`expected float values, got ${t.type}`);
  return new Float32Array(t.data.buffer, t.data.byteOffset, t.data.byteLength / 4);
}

/** Token embeddings [ids.length, hidden] from an embed_tokens graph (input_ids -> inputs_embeds), as float32. */
export async function embedTokens(session: HostSession, ids: ArrayLike<number>): Promise<Float32Array> {
  const out = await session.run({ [session.inputNames[0]!]: { type: "int64", data: int64Array(ids), dims: [1, ids.length] } });
  return hostFloats(out[session.outputNames[0]!]!);
}

/** Through onnxruntime-node's JavaScript binding. */
export class NodeHostSession implements HostSession {
  private constructor(private readonly session: ort.InferenceSession) {}

  static async open(path: string, opts: HostSessionOptions): Promise<NodeHostSession> {
    return new NodeHostSession(
      await ort.InferenceSession.create(path, {
        executionProviders: opts.providers.map((p) => ({ name: p })),
        graphOptimizationLevel: "all",
        ...(opts.threads > 0 ? { intraOpNumThreads: opts.threads } : {}),
        interOpNumThreads: 1,
      }),
    );
  }

  get inputNames(): readonly string[] {
    return this.session.inputNames;
  }

  get outputNames(): readonly string[] {
    return this.session.outputNames;
  }

  inputType(name: string): string | null {
    const m = this.session.inputMetadata.find((x) => x.name === name);
    return m?.isTensor ? m.type : null;
  }

  async run(feeds: Record<string, HostTensor>): Promise<Record<string, HostTensor>> {
    return (await nativeCall(() => this.session.run(feeds as Record<string, ort.Tensor>))) as unknown as Record<string, HostTensor>;
  }

  async release(): Promise<void> {
    await this.session.release();
  }
}
