// A session with host inputs and outputs through the C API (see runtime/host-session.ts): on a GPU
// a vision encoder runs there, its image features coming back once per image.
import { nativeCallSync } from "../../native-calls.ts";
import type { HostSession, HostSessionOptions, HostTensor } from "../runtime/host-session.ts";
import { onnxRuntimeLibDir } from "../providers.ts";
import { ortLibrary, type OrtLibrary, type Ptr } from "./ort-api.ts";
import { addressOf, CapiSession, elementBytes, hostBytes, IoBinding, MemoryInfo, releaseValue, tensorValue, valueTensor, type ElementType } from "./session.ts";

/** A typed array of `type` holding a copy of `bytes`. */
function typedCopy(type: ElementType, bytes: Uint8Array): ArrayBufferView {
  const b = bytes.slice().buffer;
  switch (type) {
    case "float32":
      return new Float32Array(b);
    case "float16":
    case "uint16":
    case "bfloat16":
      return new Uint16Array(b);
    case "int64":
      return new BigInt64Array(b);
    case "uint64":
      return new BigUint64Array(b);
    case "int32":
      return new Int32Array(b);
    case "uint32":
      return new Uint32Array(b);
    case "int16":
      return new Int16Array(b);
    case "int8":
      return new Int8Array(b);
    case "float64":
      return new Float64Array(b);
    default:
      return new Uint8Array(b);
  }
}

export class CapiHostSession implements HostSession {
  private constructor(
    private readonly lib: OrtLibrary,
    readonly session: CapiSession,
    private readonly host: MemoryInfo,
  ) {}

  static open(path: string | Uint8Array, opts: HostSessionOptions & { device?: number }): CapiHostSession {
    const lib = ortLibrary(onnxRuntimeLibDir());
    const provider = opts.providers[0] === "cuda" ? "cuda" : "cpu";
    const session = CapiSession.create(lib, path, {
      provider,
      threads: opts.threads,
      ...(provider === "cuda" ? { cuda: { device_id: String(opts.device ?? 0), arena_extend_strategy: "kSameAsRequested" } } : {}),
    });
    return new CapiHostSession(lib, session, MemoryInfo.cpu(lib));
  }

  get inputNames(): readonly string[] {
    return this.session.inputs.map((i) => i.name);
  }

  get outputNames(): readonly string[] {
    return this.session.outputs.map((o) => o.name);
  }

  inputType(name: string): string | null {
    const t = this.session.inputs.find((i) => i.name === name)?.type;
    return t && t !== "non-tensor" ? t : null;
  }

  async run(feeds: Record<string, HostTensor>): Promise<Record<string, HostTensor>> {
    const binding = new IoBinding(this.session);
    const values: Ptr[] = [];
    try {
      for (const [name, t] of Object.entries(feeds)) {
        const v = tensorValue(this.lib, this.host, addressOf(t.data as NodeJS.TypedArray), t.data.byteLength, t.dims, t.type as ElementType);
        values.push(v);
        binding.input(name, v);
      }
      for (const name of this.outputNames) binding.outputTo(name, this.host);
      const stopping = nativeCallSync(() => binding.run());
      if (stopping instanceof Promise) await stopping;
      const out: Record<string, HostTensor> = {};
      const results = binding.outputs();
      this.outputNames.forEach((name, i) => {
        const value = results[i]!;
        try {
          const t = valueTensor(this.lib, value);
          const n = t.dims.reduce((a, x) => a * x, 1);
          const bytes = n === 0 ? new Uint8Array(0) : new Uint8Array(hostBytes(t.address, n * elementBytes(t.type)));
          out[name] = { type: t.type, data: typedCopy(t.type, bytes), dims: t.dims };
        } finally {
          releaseValue(this.lib, value);
        }
      });
      return out;
    } finally {
      for (const v of values) releaseValue(this.lib, v);
      binding.release();
    }
  }

  async release(): Promise<void> {
    this.session.release();
    this.host.release();
  }
}
