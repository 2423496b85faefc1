// A decoder session run through onnxruntime-node's native binding directly. The binding's run is
// synchronous; onnxruntime-node wraps it in a promise that waits for a setImmediate, and
// onnxruntime-common's InferenceSession checks the feeds and fetches against the graph's names
// at every run. For a small model whose step takes a fraction of a millisecond that was some 6%
// of the step (stories260K: 21 µs of 340, measured on this machine), paid at every decode step
// of the model worker, which has nothing else to do while the run lasts (the run blocked its
// thread all the same, one event-loop turn later). The engine builds its feeds from the graph's
// own metadata, so the checks added nothing there.
//
// Same model loading, options, tensors and results as ort.InferenceSession (the binding is the
// one onnxruntime-node itself uses, pinned with it); `run` keeps the promise form for callers
// off the hot path.
import * as ort from "onnxruntime-node";
import { binding, initOrt, type Binding } from "onnxruntime-node/dist/binding.js";
import { elementType } from "./element-types.ts";

function metadata(raw: Binding.ValueMetadata[]): ort.InferenceSession.ValueMetadata[] {
  return raw.map((m): ort.InferenceSession.ValueMetadata => {
    if (!m.isTensor) return { name: m.name, isTensor: false };
    const type = elementType(m.type) as ort.Tensor.Type | null;
    if (!type) throw new Error(`unsupported data type ${m.type} of ${m.name}`);
    const shape = m.shape.map((d, i) => (d === -1 ? m.symbolicDimensions[i]! : d));
    return { name: m.name, isTensor: true, type, shape };
  });
}

export type Fetches = Record<string, ort.Tensor | null> | readonly string[];

export class NativeSession {
  readonly inputNames: string[];
  readonly outputNames: string[];
  readonly inputMetadata: ort.InferenceSession.ValueMetadata[];
  readonly outputMetadata: ort.InferenceSession.ValueMetadata[];
  /** Every output, for runs that name none. */
  private readonly allOutputs: Record<string, null>;

  private constructor(private readonly native: Binding.InferenceSession) {
    this.inputMetadata = metadata(native.inputMetadata);
    this.outputMetadata = metadata(native.outputMetadata);
    this.inputNames = this.inputMetadata.map((m) => m.name);
    this.outputNames = this.outputMetadata.map((m) => m.name);
    this.allOutputs = Object.fromEntries(this.outputNames.map((n) => [n, null]));
  }

  /** Loads a model file or its bytes with ort.InferenceSession's options. */
  static async create(model: string | Uint8Array, options: ort.InferenceSession.SessionOptions): Promise<NativeSession> {
    initOrt();
    const native = new binding.InferenceSession();
    if (typeof model === "string") native.loadModel(model, options);
    else native.loadModel(model.buffer as ArrayBuffer, model.byteOffset, model.byteLength, options);
    return new NativeSession(native);
  }

  /** One run, now: the named outputs (all of them without `fetches`); a given tensor is written in place. */
  runSync(feeds: Record<string, ort.Tensor>, fetches?: Fetches): Record<string, ort.Tensor> {
    const wanted = !fetches ? this.allOutputs : Array.isArray(fetches) ? Object.fromEntries(fetches.map((n) => [n, null])) : fetches;
    return this.native.run(feeds, wanted as Record<string, ort.Tensor | null>, {}) as Record<string, ort.Tensor>;
  }

  async run(feeds: Record<string, ort.Tensor>, fetches?: Fetches): Promise<Record<string, ort.Tensor>> {
    return this.runSync(feeds, fetches);
  }

  async release(): Promise<void> {
    this.native.dispose();
  }
}
