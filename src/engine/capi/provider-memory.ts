// The execution provider's memory, where the C API binding keeps KV caches (runtime/kv-memory.ts
// says what the batching code asks of it). Allocations come from ONNX Runtime's allocators and are
// tracked, so a model's unload frees whatever its caches still held.
//
// The CPU provider's memory is host memory: its buffers carry a typed-array view and copy like
// JavaScript arrays; what is read out of them or written into them from elsewhere still counts as
// host-device traffic, as it would on a GPU. A CUDA device's memory is copied with the CUDA runtime
// (cudart, which the CUDA provider itself loads), on its default stream, then synchronised before
// the next run: ONNX Runtime computes on a stream of its own that does not wait for the default one.
import { dlopen, FFIType, ptr, type Pointer } from "bun:ffi";
import { join } from "node:path";
import { HostKvMemory, type HostAllocator, type HostDeviceTraffic, type KvArray, type KvBuffer, type KvMemory } from "../runtime/kv-memory.ts";
import { outArg, outPtr, type OrtLibrary, type Ptr } from "./ort-api.ts";
import { hostBytes, releaseValue } from "./session.ts";

/** Allocations of one memory, by address: each freed exactly once. */
class Allocations {
  private readonly live = new Map<number, () => void>();

  add(address: number, free: () => void): void {
    this.live.set(address, free);
  }

  free(address: number): void {
    const f = this.live.get(address);
    if (!f) return;
    this.live.delete(address);
    f();
  }

  freeAll(): void {
    for (const f of this.live.values()) f();
    this.live.clear();
  }

  get count(): number {
    return this.live.size;
  }
}

/** Memory the C API binding keeps buffers in, and can free all at once. */
export interface ProviderMemory extends KvMemory {
  /** A buffer over an OrtValue's tensor that ONNX Runtime allocated; freeing it releases the value. */
  adopt(value: Ptr, address: number, length: number): KvBuffer;
  /** Frees every allocation still live (the model is unloading). */
  freeAll(): void;
  /** Live allocations (for tests). */
  readonly live: number;
}

/** An address bun:ffi can pass for an empty buffer (ONNX Runtime wants one even for no bytes). */
const EMPTY = new BigInt64Array(1);

/** The CPU provider's memory, from ONNX Runtime's default CPU allocator. */
export class CpuProviderMemory extends HostKvMemory implements ProviderMemory {
  private readonly allocations: Allocations;
  private readonly elementBytes: number;

  constructor(
    private readonly lib: OrtLibrary,
    half: boolean,
    traffic: HostDeviceTraffic,
  ) {
    const allocations = new Allocations();
    const allocator: HostAllocator = {
      alloc: (length, isHalf) => {
        const bytes = length * (isHalf ? 2 : 4);
        if (bytes === 0) return { array: isHalf ? new Uint16Array(0) : new Float32Array(0), address: ptr(EMPTY) };
        lib.check("AllocatorAlloc", lib.defaultAllocator, bytes, outArg());
        const address = outPtr();
        allocations.add(address, () => lib.check("AllocatorFree", lib.defaultAllocator, address as Pointer));
        const buffer = hostBytes(address, bytes);
        const array: KvArray = isHalf ? new Uint16Array(buffer) : new Float32Array(buffer);
        array.fill(0);
        return { array, address };
      },
      free: (b) => allocations.free(b.address),
    };
    super(half, true, allocator, traffic);
    this.allocations = allocations;
    this.elementBytes = half ? 2 : 4;
  }

  adopt(value: Ptr, address: number, length: number): KvBuffer {
    const buffer = hostBytes(address, length * this.elementBytes);
    this.allocations.add(address, () => releaseValue(this.lib, value));
    return { length, host: this.half ? new Uint16Array(buffer) : new Float32Array(buffer), address, whole: null };
  }

  freeAll(): void {
    this.allocations.freeAll();
  }

  get live(): number {
    return this.allocations.count;
  }
}

// cudaMemcpyKind
const HOST_TO_DEVICE = 1;
const DEVICE_TO_HOST = 2;
const DEVICE_TO_DEVICE = 3;

const { ptr: P, i32, u64 } = FFIType;

function loadCudart(libDir: string) {
  const symbols = {
    cudaMemcpy: { args: [P, P, u64, i32], returns: i32 },
    cudaMemcpy2D: { args: [P, u64, P, u64, u64, u64, i32], returns: i32 },
    cudaMemset: { args: [P, i32, u64], returns: i32 },
    cudaMemset2D: { args: [P, u64, i32, u64, u64], returns: i32 },
    cudaDeviceSynchronize: { args: [], returns: i32 },
    cudaSetDevice: { args: [i32], returns: i32 },
    cudaGetErrorString: { args: [i32], returns: FFIType.cstring },
  } as const;
  const errors: string[] = [];
  // The provider's own copy (linked beside ONNX Runtime) first, then the system's.
  for (const name of [join(libDir, "libcudart.so.13"), "libcudart.so.13", join(libDir, "libcudart.so.12"), "libcudart.so.12"]) {
    try {
      return dlopen(name, symbols).symbols;
    } catch (e) {
      errors.push((e as Error).message);
    }
  }
  throw new Error(`the CUDA runtime (libcudart) cannot be loaded: ${errors.join("; ")}`);
}

type Cudart = ReturnType<typeof loadCudart>;

/**
 * A CUDA device's memory, from the session's CUDA allocator. The host cannot address it: every
 * copy is the CUDA runtime's, and those between it and the host count as traffic.
 */
export class CudaProviderMemory implements ProviderMemory {
  readonly resident = true;
  private readonly allocations = new Allocations();
  private readonly cuda: Cudart;
  private readonly elementBytes: number;
  /** Copies were queued on the default stream since the last settle(). */
  private pending = false;

  constructor(
    private readonly lib: OrtLibrary,
    /** The session's allocator for the device's memory (CreateAllocator). */
    private readonly allocator: Ptr,
    readonly half: boolean,
    private readonly traffic: HostDeviceTraffic,
    libDir: string,
    device: number,
  ) {
    this.cuda = loadCudart(libDir);
    this.elementBytes = half ? 2 : 4;
    this.ok(this.cuda.cudaSetDevice(device), "cudaSetDevice");
  }

  private ok(code: number, what: string): void {
    if (code !== 0) throw new Error(`${what}: CUDA error ${code} (${String(this.cuda.cudaGetErrorString(code))})`);
  }

  private at(b: KvBuffer, offset: number): Pointer {
    return (b.address + offset * this.elementBytes) as Pointer;
  }

  alloc(length: number): KvBuffer {
    const bytes = length * this.elementBytes;
    if (bytes === 0) return { length: 0, host: null, address: ptr(EMPTY), whole: null };
    this.lib.check("AllocatorAlloc", this.allocator, bytes, outArg());
    const address = outPtr();
    this.allocations.add(address, () => this.lib.check("AllocatorFree", this.allocator, address as Pointer));
    this.ok(this.cuda.cudaMemset(address, 0, bytes), "cudaMemset");
    this.pending = true;
    return { length, host: null, address, whole: null };
  }

  adopt(value: Ptr, address: number, length: number): KvBuffer {
    this.allocations.add(address, () => releaseValue(this.lib, value));
    return { length, host: null, address, whole: null };
  }

  prefix(b: KvBuffer, length: number): KvBuffer {
    const whole = b.whole ?? b;
    return { length, host: null, address: whole.address, whole };
  }

  free(b: KvBuffer): void {
    if (!b.whole) this.allocations.free(b.address);
  }

  fill0(b: KvBuffer, from: number, to: number): void {
    if (to <= from) return;
    this.ok(this.cuda.cudaMemset(this.at(b, from), 0, (to - from) * this.elementBytes), "cudaMemset");
    this.pending = true;
  }

  copy(src: KvBuffer, srcOffset: number, dst: KvBuffer, dstOffset: number, length: number): void {
    if (length <= 0) return;
    this.ok(this.cuda.cudaMemcpy(this.at(dst, dstOffset), this.at(src, srcOffset), length * this.elementBytes, DEVICE_TO_DEVICE), "cudaMemcpy");
    this.pending = true;
  }

  copyHeads(src: KvBuffer, srcOffset: number, srcStride: number, dst: KvBuffer, dstOffset: number, dstStride: number, heads: number, dim: number, length: number, zeroRest = false): void {
    const e = this.elementBytes;
    const row = dim * e;
    if (length > 0) {
      this.ok(this.cuda.cudaMemcpy2D(this.at(dst, dstOffset), dstStride * row, this.at(src, srcOffset), srcStride * row, length * row, heads, DEVICE_TO_DEVICE), "cudaMemcpy2D");
    }
    if (zeroRest && dstStride > length) {
      this.ok(this.cuda.cudaMemset2D(this.at(dst, dstOffset + length * dim), dstStride * row, 0, (dstStride - length) * row, heads), "cudaMemset2D");
    }
    this.pending = true;
  }

  read(src: KvBuffer, offset: number, stride: number, heads: number, dim: number, length: number): KvArray {
    const out = this.half ? new Uint16Array(heads * length * dim) : new Float32Array(heads * length * dim);
    if (out.length === 0) return out;
    const row = dim * this.elementBytes;
    this.settle();
    this.ok(this.cuda.cudaMemcpy2D(ptr(out), length * row, this.at(src, offset), stride * row, length * row, heads, DEVICE_TO_HOST), "cudaMemcpy2D");
    this.traffic.toHost += out.byteLength;
    return out;
  }

  write(src: KvArray, srcStride: number, dst: KvBuffer, offset: number, stride: number, heads: number, dim: number, length: number): void {
    if (length <= 0) return;
    const row = dim * this.elementBytes;
    this.ok(this.cuda.cudaMemcpy2D(this.at(dst, offset), stride * row, ptr(src), srcStride * row, length * row, heads, HOST_TO_DEVICE), "cudaMemcpy2D");
    this.traffic.toDevice += heads * length * row;
    this.pending = true;
  }

  settle(): void {
    if (!this.pending) return;
    this.ok(this.cuda.cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    this.pending = false;
  }

  freeAll(): void {
    this.settle();
    this.allocations.freeAll();
  }

  get live(): number {
    return this.allocations.count;
  }
}
