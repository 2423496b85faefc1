// ONNX Runtime's C API, called through bun:ffi on the libonnxruntime.so that onnxruntime-node
// ships (one runtime, one version in the process; the JS binding and this module share its
// environment). onnxruntime-node's JavaScript API keeps every tensor in host memory; the C API
// has IoBinding and OrtValues over any provider's memory, which is what a KV cache that stays on
// a GPU needs.
//
// The API is a struct of function pointers (OrtApi) that ONNX Runtime only ever appends to, so a
// function's index is the same in every version that has it. The indices below are those of
// onnxruntime_c_api.h; every function used here exists since ONNX Runtime 1.13 (API 13).
import { CFunction, CString, dlopen, FFIType, read, type Pointer } from "bun:ffi";
import { join } from "node:path";

/** Addresses as bun:ffi passes them: a number (x86-64 user space fits in 53 bits). */
export type Ptr = Pointer;

const { ptr: P, i32, u32, u64, void: V, cstring } = FFIType;

/** name: [index in OrtApi, argument types, return type]; S = returns an OrtStatus* (null: success). */
const FUNCTIONS = {
  GetErrorCode: [1, [P], u32],
  GetErrorMessage: [2, [P], cstring],
  CreateEnv: [3, [i32, P, P], P],
  CreateSession: [7, [P, P, P, P], P],
  CreateSessionFromArray: [8, [P, P, u64, P, P], P],
  CreateSessionOptions: [10, [P], P],
  SetSessionGraphOptimizationLevel: [23, [P, i32], P],
  SetIntraOpNumThreads: [24, [P, i32], P],
  SetInterOpNumThreads: [25, [P, i32], P],
  SessionGetInputCount: [30, [P, P], P],
  SessionGetOutputCount: [31, [P, P], P],
  SessionGetInputTypeInfo: [33, [P, u64, P], P],
  SessionGetOutputTypeInfo: [34, [P, u64, P], P],
  SessionGetInputName: [36, [P, u64, P, P], P],
  SessionGetOutputName: [37, [P, u64, P, P], P],
  CreateTensorWithDataAsOrtValue: [49, [P, P, u64, P, u64, i32, P], P],
  GetTensorMutableData: [51, [P, P], P],
  CastTypeInfoToTensorInfo: [55, [P, P], P],
  GetOnnxTypeFromTypeInfo: [56, [P, P], P],
  GetTensorElementType: [60, [P, P], P],
  GetDimensionsCount: [61, [P, P], P],
  GetDimensions: [62, [P, P, u64], P],
  GetSymbolicDimensions: [63, [P, P, u64], P],
  GetTensorTypeAndShape: [65, [P, P], P],
  CreateMemoryInfo: [68, [P, i32, i32, i32, P], P],
  CreateCpuMemoryInfo: [69, [i32, i32, P], P],
  MemoryInfoGetName: [71, [P, P], P],
  AllocatorAlloc: [75, [P, u64, P], P],
  AllocatorFree: [76, [P, P], P],
  GetAllocatorWithDefaultOptions: [78, [P], P],
  ReleaseStatus: [93, [P], V],
  ReleaseMemoryInfo: [94, [P], V],
  ReleaseSession: [95, [P], V],
  ReleaseValue: [96, [P], V],
  ReleaseTypeInfo: [98, [P], V],
  ReleaseTensorTypeAndShapeInfo: [99, [P], V],
  ReleaseSessionOptions: [100, [P], V],
  AddSessionConfigEntry: [130, [P, P, P], P],
  CreateAllocator: [131, [P, P, P], P],
  ReleaseAllocator: [132, [P], V],
  RunWithBinding: [133, [P, P, P], P],
  CreateIoBinding: [134, [P, P], P],
  ReleaseIoBinding: [135, [P], V],
  BindInput: [136, [P, P, P], P],
  BindOutput: [137, [P, P, P], P],
  BindOutputToDevice: [138, [P, P, P], P],
  GetBoundOutputValues: [140, [P, P, P, P], P],
  ClearBoundInputs: [141, [P], V],
  ClearBoundOutputs: [142, [P], V],
  SessionOptionsAppendExecutionProvider_CUDA_V2: [204, [P, P], P],
  CreateCUDAProviderOptions: [205, [P], P],
  UpdateCUDAProviderOptions: [206, [P, P, P, u64], P],
  ReleaseCUDAProviderOptions: [208, [P], V],
} as const satisfies Record<string, readonly [number, readonly FFIType[], FFIType]>;

type Name = keyof typeof FUNCTIONS;
// Arguments as bun:ffi takes them: addresses, typed arrays (their memory), numbers.
type Arg = number | bigint | Ptr | NodeJS.TypedArray | null;
type Fn = (...args: Arg[]) => unknown;

/** The API version asked for: 1.13's, which has every function above. */
const API_VERSION = 13;

export class OrtError extends Error {
  constructor(
    readonly call: string,
    readonly code: number,
    message: string,
  ) {
    super(`ONNX Runtime ${call}: ${message}`);
  }
}

export interface OrtLibrary {
  /** Where the library was loaded from, and the version it reports. */
  readonly path: string;
  readonly version: string;
  /** Calls a function that returns an OrtStatus*, throwing its message when it is not null. */
  check(name: Name, ...args: Arg[]): void;
  /** Calls a function that returns nothing (the Release functions, ClearBound*). */
  call(name: Name, ...args: Arg[]): void;
  /** The process's OrtEnv (ONNX Runtime keeps one per process, shared with onnxruntime-node's). */
  readonly env: Ptr;
  /** ONNX Runtime's default CPU allocator (frees the names and arrays the API hands out). */
  readonly defaultAllocator: Ptr;
}

/** Scratch for out-parameters: one thread runs one call at a time. */
const out = new BigUint64Array(4);

/** out[0]'s low 32 bits: where a call leaves an enum or an int (the high half is stale). */
const outInt32 = new Int32Array(out.buffer);

/** The enum or int a call left in out[0]. */
export function outEnum(): number {
  return outInt32[0]!;
}

/** The address left in out[i] by the last call. */
export function outPtr(i = 0): Ptr {
  return Number(out[i]!) as Ptr;
}

export function outArg(): BigUint64Array {
  return out;
}

export function cString(s: string): Uint8Array {
  return new TextEncoder().encode(`${s}\0`);
}

let loaded: OrtLibrary | null = null;

/** Loads libonnxruntime.so.1 from `dir` once per thread (later calls get the same library). */
export function ortLibrary(dir: string): OrtLibrary {
  if (loaded) return loaded;
  const path = join(dir, "libonnxruntime.so.1");
  const lib = dlopen(path, { OrtGetApiBase: { args: [], returns: P } });
  const base = lib.symbols.OrtGetApiBase();
  if (!base) throw new Error(`${path}: OrtGetApiBase returned null`);
  const getApi = CFunction({ ptr: read.ptr(base, 0) as Ptr, args: [u32], returns: P });
  const getVersion = CFunction({ ptr: read.ptr(base, 8) as Ptr, args: [], returns: cstring });
  const version = String(getVersion());
  const api = getApi(API_VERSION);
  if (!api) throw new Error(`${path} (ONNX Runtime ${version}) does not offer C API version ${API_VERSION}`);
  const fns = new Map<Name, Fn>();
  for (const [name, [index, args, returns]] of Object.entries(FUNCTIONS) as [Name, (typeof FUNCTIONS)[Name]][]) {
    const fp = read.ptr(api, index * 8) as Ptr;
    fns.set(name, CFunction({ ptr: fp, args: [...args], returns }) as unknown as Fn);
  }
  const releaseStatus = fns.get("ReleaseStatus")!;
  const errorMessage = fns.get("GetErrorMessage")!;
  const errorCode = fns.get("GetErrorCode")!;
  const check = (name: Name, ...args: Arg[]): void => {
    const status = fns.get(name)!(...args) as Ptr | null;
    if (!status) return;
    const message = String(errorMessage(status) as CString);
    const code = Number(errorCode(status));
    releaseStatus(status);
    throw new OrtError(name, code, message);
  };
  const call = (name: Name, ...args: Arg[]): void => {
    fns.get(name)!(...args);
  };
  // ORT_LOGGING_LEVEL_WARNING, as onnxruntime-node creates it. Where onnxruntime-node made the
  // environment first, ONNX Runtime hands that one back.
  check("CreateEnv", 2, cString("sluice"), out);
  const env = outPtr();
  check("GetAllocatorWithDefaultOptions", out);
  const defaultAllocator = outPtr();
  loaded = { path, version, check, call, env, defaultAllocator };
  return loaded;
}

/** A NUL-terminated string ONNX Runtime allocated, read and freed with the default allocator. */
export function takeString(lib: OrtLibrary, p: Ptr): string {
  const s = String(new CString(p));
  lib.check("AllocatorFree", lib.defaultAllocator, p);
  return s;
}
