// Sessions, OrtValues and IoBindings of the C API (see ort-api.ts), as small owning objects: each
// releases what it created exactly once.
import { CString, ptr, read, toArrayBuffer } from "bun:ffi";
import { ELEMENT_TYPES, elementType, type ElementType } from "../runtime/element-types.ts";
import { cString, outArg, outEnum, outPtr, takeString, type OrtLibrary, type Ptr } from "./ort-api.ts";

export type { ElementType };

const ELEMENT_BYTES: Partial<Record<ElementType, number>> = {
  float32: 4,
  uint8: 1,
  int8: 1,
  uint16: 2,
  int16: 2,
  int32: 4,
  int64: 8,
  bool: 1,
  float16: 2,
  float64: 8,
  uint32: 4,
  uint64: 8,
  bfloat16: 2,
};

export function elementBytes(type: ElementType): number {
  const n = ELEMENT_BYTES[type];
  if (!n) throw new Error(`tensors of ${type} are not supported here`);
  return n;
}

export interface ValueInfo {
  name: string;
  /** Element type, or "non-tensor" for sequences and maps (and types no binding here reads). */
  type: ElementType | "non-tensor";
  /** Fixed sizes, and the names of symbolic ones. */
  shape: (number | string)[];
}

export interface ProviderOptions {
  provider: "cpu" | "cuda";
  /** Intra-op threads; 0: ONNX Runtime's default. */
  threads: number;
  /** session.* configuration entries (AddSessionConfigEntry). */
  config?: Record<string, string>;
  /** CUDA provider options (UpdateCUDAProviderOptions keys: device_id, arena_extend_strategy, …). */
  cuda?: Record<string, string>;
}

/** ORT_ENABLE_ALL, as the engine's node sessions use ("all"). */
const OPTIMIZE_ALL = 99;

/** Reads a tensor type-and-shape info (not released here). */
function tensorInfo(lib: OrtLibrary, info: Ptr): { type: ElementType; shape: (number | string)[] } {
  const out = outArg();
  lib.check("GetTensorElementType", info, out);
  const type = elementType(outEnum());
  if (!type) throw new Error(`tensors of ONNX element type ${outEnum()} are not supported here`);
  lib.check("GetDimensionsCount", info, out);
  const n = Number(out[0]);
  const dims = new BigInt64Array(Math.max(1, n));
  if (n > 0) lib.check("GetDimensions", info, dims, n);
  const symbolic = new BigUint64Array(Math.max(1, n));
  if (n > 0) lib.check("GetSymbolicDimensions", info, symbolic, n);
  const shape: (number | string)[] = [];
  for (let i = 0; i < n; i++) {
    const d = Number(dims[i]);
    const sym = symbolic[i] ? String(new CString(Number(symbolic[i]) as Ptr)) : "";
    shape.push(d >= 0 ? d : sym || `d${i}`);
  }
  return { type, shape };
}

export class CapiSession {
  readonly inputs: ValueInfo[];
  readonly outputs: ValueInfo[];
  private released = false;

  private constructor(
    readonly lib: OrtLibrary,
    readonly handle: Ptr,
  ) {
    this.inputs = this.metadata("Input");
    this.outputs = this.metadata("Output");
  }

  /** A session of a model file or its bytes, on `provider` (the CPU provider stays as fallback). */
  static create(lib: OrtLibrary, model: string | Uint8Array, opts: ProviderOptions): CapiSession {
    const out = outArg();
    lib.check("CreateSessionOptions", out);
    const options = outPtr();
    try {
      lib.check("SetSessionGraphOptimizationLevel", options, OPTIMIZE_ALL);
      if (opts.threads > 0) lib.check("SetIntraOpNumThreads", options, opts.threads);
      lib.check("SetInterOpNumThreads", options, 1);
      for (const [k, v] of Object.entries(opts.config ?? {})) lib.check("AddSessionConfigEntry", options, cString(k), cString(v));
      if (opts.provider === "cuda") appendCuda(lib, options, opts.cuda ?? {});
      if (typeof model === "string") lib.check("CreateSession", lib.env, cString(model), options, out);
      else lib.check("CreateSessionFromArray", lib.env, model, model.byteLength, options, out);
      return new CapiSession(lib, outPtr());
    } finally {
      lib.call("ReleaseSessionOptions", options);
    }
  }

  private metadata(kind: "Input" | "Output"): ValueInfo[] {
    const { lib } = this;
    const out = outArg();
    lib.check(kind === "Input" ? "SessionGetInputCount" : "SessionGetOutputCount", this.handle, out);
    const count = Number(out[0]);
    const list: ValueInfo[] = [];
    for (let i = 0; i < count; i++) {
      lib.check(kind === "Input" ? "SessionGetInputName" : "SessionGetOutputName", this.handle, i, lib.defaultAllocator, out);
      const name = takeString(lib, outPtr());
      lib.check(kind === "Input" ? "SessionGetInputTypeInfo" : "SessionGetOutputTypeInfo", this.handle, i, out);
      const typeInfo = outPtr();
      try {
        lib.check("GetOnnxTypeFromTypeInfo", typeInfo, out);
        // ONNX_TYPE_TENSOR
        if (outEnum() !== 1) {
          list.push({ name, type: "non-tensor", shape: [] });
          continue;
        }
        lib.check("CastTypeInfoToTensorInfo", typeInfo, out);
        list.push({ name, ...tensorInfo(lib, outPtr()) });
      } finally {
        lib.call("ReleaseTypeInfo", typeInfo);
      }
    }
    return list;
  }

  release(): void {
    if (this.released) return;
    this.released = true;
    this.lib.call("ReleaseSession", this.handle);
  }
}

function appendCuda(lib: OrtLibrary, options: Ptr, settings: Record<string, string>): void {
  const out = outArg();
  lib.check("CreateCUDAProviderOptions", out);
  const cuda = outPtr();
  try {
    const entries = Object.entries(settings);
    if (entries.length > 0) {
      // Arrays of char*: the strings must live until the call returns.
      const keys = entries.map(([k]) => cString(k));
      const values = entries.map(([, v]) => cString(v));
      const table = (list: Uint8Array[]) => BigUint64Array.from(list.map((s) => BigInt(addressOf(s))));
      lib.check("UpdateCUDAProviderOptions", cuda, table(keys), table(values), entries.length);
    }
    lib.check("SessionOptionsAppendExecutionProvider_CUDA_V2", options, cuda);
  } finally {
    lib.call("ReleaseCUDAProviderOptions", cuda);
  }
}

/** Memory for empty tensors: bun:ffi has no address for an empty array, ONNX Runtime wants one. */
const EMPTY = new BigInt64Array(1);

/** The address of a typed array's memory (valid while the array is alive). */
export function addressOf(a: NodeJS.TypedArray): number {
  return a.byteLength === 0 ? ptr(EMPTY) : ptr(a);
}

/** An OrtMemoryInfo: where an OrtValue's data lives. */
export class MemoryInfo {
  private constructor(
    private readonly lib: OrtLibrary,
    readonly handle: Ptr,
    readonly name: string,
  ) {}

  /** Host memory (OrtDeviceAllocator, OrtMemTypeDefault). */
  static cpu(lib: OrtLibrary): MemoryInfo {
    lib.check("CreateCpuMemoryInfo", 0, 0, outArg());
    return new MemoryInfo(lib, outPtr(), "Cpu");
  }

  /**
   * Named memory: "Cuda" (device `id`, OrtMemTypeDefault) or "CudaPinned" (host memory the
   * driver can copy from directly, OrtMemTypeCPUOutput).
   */
  static named(lib: OrtLibrary, name: "Cuda" | "CudaPinned", id: number): MemoryInfo {
    lib.check("CreateMemoryInfo", cString(name), 0, id, name === "CudaPinned" ? -1 : 0, outArg());
    return new MemoryInfo(lib, outPtr(), name);
  }

  release(): void {
    this.lib.call("ReleaseMemoryInfo", this.handle);
  }
}

/** An OrtValue tensor over memory that someone else owns (a typed array, a device allocation). */
export function tensorValue(lib: OrtLibrary, info: MemoryInfo, address: number, bytes: number, dims: readonly number[], type: ElementType): Ptr {
  const shape = BigInt64Array.from(dims.map((d) => BigInt(d)));
  lib.check("CreateTensorWithDataAsOrtValue", info.handle, address as Ptr, bytes, shape, dims.length, ELEMENT_TYPES.indexOf(type), outArg());
  return outPtr();
}

/** The data address, element type and shape of a tensor OrtValue. */
export function valueTensor(lib: OrtLibrary, value: Ptr): { address: number; type: ElementType; dims: number[] } {
  const out = outArg();
  lib.check("GetTensorMutableData", value, out);
  const address = Number(out[0]);
  lib.check("GetTensorTypeAndShape", value, out);
  const info = outPtr();
  try {
    const { type, shape } = tensorInfo(lib, info);
    return { address, type, dims: shape as number[] };
  } finally {
    lib.call("ReleaseTensorTypeAndShapeInfo", info);
  }
}

/** Bytes of host memory at `address`, viewed without a copy (valid while the memory is). */
export function hostBytes(address: number, bytes: number): ArrayBuffer {
  return toArrayBuffer(address as Ptr, 0, bytes);
}

/** An IoBinding of one session: inputs and outputs bound by name, kept between runs until rebound. */
export class IoBinding {
  private readonly names = new Map<string, Uint8Array>();
  private released = false;
  readonly handle: Ptr;

  constructor(private readonly session: CapiSession) {
    session.lib.check("CreateIoBinding", session.handle, outArg());
    this.handle = outPtr();
  }

  private cName(name: string): Uint8Array {
    let c = this.names.get(name);
    if (!c) this.names.set(name, (c = cString(name)));
    return c;
  }

  input(name: string, value: Ptr): void {
    this.session.lib.check("BindInput", this.handle, this.cName(name), value);
  }

  output(name: string, value: Ptr): void {
    this.session.lib.check("BindOutput", this.handle, this.cName(name), value);
  }

  /** An output ONNX Runtime allocates in `info`'s memory at each run (read with outputs()). */
  outputTo(name: string, info: MemoryInfo): void {
    this.session.lib.check("BindOutputToDevice", this.handle, this.cName(name), info.handle);
  }

  run(): void {
    this.session.lib.check("RunWithBinding", this.session.handle, null, this.handle);
  }

  /** The bound outputs' OrtValues in the order bound (the caller releases each). */
  outputs(): Ptr[] {
    const { lib } = this.session;
    const out = outArg();
    lib.check("GetBoundOutputValues", this.handle, lib.defaultAllocator, out, out.subarray(1));
    const array = outPtr(0);
    const count = Number(out[1]);
    const values: Ptr[] = [];
    for (let i = 0; i < count; i++) values.push(read.ptr(array, i * 8) as Ptr);
    if (array) lib.check("AllocatorFree", lib.defaultAllocator, array);
    return values;
  }

  clear(): void {
    this.session.lib.call("ClearBoundInputs", this.handle);
    this.session.lib.call("ClearBoundOutputs", this.handle);
  }

  release(): void {
    if (this.released) return;
    this.released = true;
    this.session.lib.call("ReleaseIoBinding", this.handle);
  }
}

export function releaseValue(lib: OrtLibrary, value: Ptr): void {
  lib.call("ReleaseValue", value);
}
