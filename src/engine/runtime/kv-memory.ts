// Where a KV cache's buffers live, and the copies the KV backends make between them. The engine
// keeps its caches in one of three memories: JavaScript arrays (onnxruntime-node's binding, which
// takes every input from the host at each run), or the execution provider's own memory through
// ONNX Runtime's C API (the CPU provider's, which the host can address; or a GPU's, which it
// cannot: see capi/). The batching code moves rows, positions and prefixes through this interface
// and never learns which.
//
// Lengths and offsets are in elements (float32, or float16 kept as its bits).

export type KvArray = Float32Array | Uint16Array;

/** A buffer of `length` elements: a whole allocation, or a prefix view of one (`whole`). */
export interface KvBuffer {
  readonly length: number;
  /** The elements in host memory, where the host can address them (null on a GPU). */
  readonly host: KvArray | null;
  /** Its address, for an OrtValue over it; 0 for JavaScript memory (the JS binding wraps it). */
  readonly address: number;
  /** The allocation this is a view of; null: it is one. */
  readonly whole: KvBuffer | null;
}

/** Bytes moved between host memory and the provider's memory: what crosses PCIe on a GPU. */
export interface HostDeviceTraffic {
  toDevice: number;
  toHost: number;
}

export interface KvMemory {
  /**
   * Whether buffers live in the provider's memory and are bound in place: runs are not handed
   * them from the host. False for JavaScript arrays, which onnxruntime-node copies in at every
   * run (on a GPU) and which therefore count as traffic whenever a run takes them.
   */
  readonly resident: boolean;
  /** float16 elements (as their bits) rather than float32. */
  readonly half: boolean;
  /** A zero-filled buffer. */
  alloc(length: number): KvBuffer;
  /** The first `length` elements of `b`. */
  prefix(b: KvBuffer, length: number): KvBuffer;
  /** Frees a whole buffer (a view frees nothing). */
  free(b: KvBuffer): void;
  /** Zeroes elements [from, to). */
  fill0(b: KvBuffer, from: number, to: number): void;
  copy(src: KvBuffer, srcOffset: number, dst: KvBuffer, dstOffset: number, length: number): void;
  /**
   * Copies `length` positions of every head between [heads, srcStride, dim] and [heads,
   * dstStride, dim] layouts; with `zeroRest`, the destination's positions past them are cleared.
   */
  copyHeads(src: KvBuffer, srcOffset: number, srcStride: number, dst: KvBuffer, dstOffset: number, dstStride: number, heads: number, dim: number, length: number, zeroRest?: boolean): void;
  /** Positions [0, length) of [heads, stride, dim] from `offset`, into host memory [heads, length, dim]. */
  read(src: KvBuffer, offset: number, stride: number, heads: number, dim: number, length: number): KvArray;
  /** Host [heads, srcStride, dim]'s first `length` positions into `dst` at [heads, dstStride, dim] from `offset`. */
  write(src: KvArray, srcStride: number, dst: KvBuffer, offset: number, stride: number, heads: number, dim: number, length: number): void;
  /** Makes pending copies visible to the next run (a GPU's queue); nothing on the host. */
  settle(): void;
}

/**
 * Copies `length` positions of every head between [heads, srcStride, dim] and [heads, dstStride, dim]
 * layouts; with `zeroRest`, the destination's positions past them are cleared too.
 */
export function copyHeads(
  src: KvArray,
  srcOffset: number,
  srcStride: number,
  dst: KvArray,
  dstOffset: number,
  dstStride: number,
  heads: number,
  dim: number,
  length: number,
  zeroRest = false,
): void {
  const n = length * dim;
  for (let h = 0; h < heads; h++) {
    const s = srcOffset + h * srcStride * dim;
    const d = dstOffset + h * dstStride * dim;
    dst.set(src.subarray(s, s + n), d);
    if (zeroRest) dst.fill(0, d + n, d + dstStride * dim);
  }
}

/** How a host-addressable memory gets and gives back its allocations. */
export interface HostAllocator {
  /** A zero-filled allocation of `length` elements, with its address (0 when it has none). */
  alloc(length: number, half: boolean): { array: KvArray; address: number };
  free(b: KvBuffer): void;
}

/** JavaScript arrays: the garbage collector frees them. */
export const JS_ALLOCATOR: HostAllocator = {
  alloc: (length, half) => ({ array: half ? new Uint16Array(length) : new Float32Array(length), address: 0 }),
  free: () => {},
};

/**
 * Memory the host can address: JavaScript arrays, or the CPU provider's memory. Copies are the
 * typed arrays' own; with `traffic`, what is read out or written in counts as crossing (the
 * provider's memory stands for a device's).
 */
export class HostKvMemory implements KvMemory {
  constructor(
    readonly half: boolean,
    readonly resident: boolean,
    private readonly allocator: HostAllocator = JS_ALLOCATOR,
    private readonly traffic: HostDeviceTraffic | null = null,
  ) {}

  private get bytes(): number {
    return this.half ? 2 : 4;
  }

  alloc(length: number): KvBuffer {
    const { array, address } = this.allocator.alloc(length, this.half);
    return { length, host: array, address, whole: null };
  }

  prefix(b: KvBuffer, length: number): KvBuffer {
    const whole = b.whole ?? b;
    return { length, host: whole.host!.subarray(0, length), address: whole.address, whole };
  }

  free(b: KvBuffer): void {
    if (!b.whole) this.allocator.free(b);
  }

  fill0(b: KvBuffer, from: number, to: number): void {
    b.host!.fill(0, from, to);
  }

  copy(src: KvBuffer, srcOffset: number, dst: KvBuffer, dstOffset: number, length: number): void {
    dst.host!.set(src.host!.subarray(srcOffset, srcOffset + length), dstOffset);
  }

  copyHeads(src: KvBuffer, srcOffset: number, srcStride: number, dst: KvBuffer, dstOffset: number, dstStride: number, heads: number, dim: number, length: number, zeroRest = false): void {
    copyHeads(src.host!, srcOffset, srcStride, dst.host!, dstOffset, dstStride, heads, dim, length, zeroRest);
  }

  read(src: KvBuffer, offset: number, stride: number, heads: number, dim: number, length: number): KvArray {
    const out = this.half ? new Uint16Array(heads * length * dim) : new Float32Array(heads * length * dim);
    copyHeads(src.host!, offset, stride, out, 0, length, heads, dim, length);
    if (this.traffic) this.traffic.toHost += out.byteLength;
    return out;
  }

  write(src: KvArray, srcStride: number, dst: KvBuffer, offset: number, stride: number, heads: number, dim: number, length: number): void {
    copyHeads(src, 0, srcStride, dst.host!, offset, stride, heads, dim, length);
    if (this.traffic) this.traffic.toDevice += heads * length * dim * this.bytes;
  }

  settle(): void {}
}

/** A host array as a buffer of its memory (JavaScript memory: no address). */
export function hostBuffer(array: KvArray): KvBuffer {
  return { length: array.length, host: array, address: 0, whole: null };
}
