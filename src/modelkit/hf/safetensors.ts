// The safetensors format, read a tensor at a time from the file, and written.
//
// A file is an 8-byte little-endian header length N, a JSON header of N bytes mapping each
// tensor's name to { dtype, shape, data_offsets: [begin, end] } (offsets into the bytes after the
// header; "__metadata__" holds string pairs), then the tensors' raw little-endian bytes. A
// sharded checkpoint adds model.safetensors.index.json, whose weight_map names each tensor's file.
//
// No npm package reads local files by offset (the registry's `safetensors` is an unmaintained
// 0.0.1; @huggingface/hub parses remote headers only), and the format is this small: reading each
// tensor with positioned reads is what keeps an import's memory to one tensor at a time.

import { closeSync, existsSync, fstatSync, openSync, readdirSync, readFileSync, readSync, writeSync } from "node:fs";
import { join } from "node:path";
import { float32ToHalf, halfToFloat32Into } from "../onnx/dtype.ts";

/** The element types a checkpoint's float weights may have, and their sizes. */
export const FLOAT_DTYPES = { F32: 4, F16: 2, BF16: 2 } as const;
export type SafetensorsFloat = keyof typeof FLOAT_DTYPES;

const DTYPE_BYTES: Record<string, number> = {
  ...FLOAT_DTYPES,
  F64: 8,
  I64: 8,
  I32: 4,
  I16: 2,
  I8: 1,
  U8: 1,
  BOOL: 1,
  F8_E4M3: 1,
  F8_E5M2: 1,
};

export interface SafetensorsTensor {
  name: string;
  dtype: string;
  shape: number[];
  file: string;
  /** Absolute byte offsets in the file. */
  start: number;
  end: number;
}

/** Elements converted at a time from half-width types. */
const READ_CHUNK = 1 << 20;

/** Headers above this are refused: a corrupt length would otherwise be read as a huge allocation. */
const MAX_HEADER_BYTES = 100 * 2 ** 20;

/** Fills `into` from `position` of the file, or throws naming `what` when the file ends first. */
export function readExactly(fd: number, into: Uint8Array, position: number, what: string): void {
  let at = 0;
  while (at < into.length) {
    const n = readSync(fd, into, at, into.length - at, position + at);
    if (n === 0) throw new Error(`${what}: the file ends early`);
    at += n;
  }
}

/** The tensors listed in one .safetensors file's header, checked against the file's size. */
export function readSafetensorsHeader(path: string): { tensors: SafetensorsTensor[]; metadata: Record<string, string> } {
  const fd = openSync(path, "r");
  try {
    const size = fstatSync(fd).size;
    if (size < 8) throw new Error(`${path}: too short for a safetensors file`);
    const head = new Uint8Array(8);
    readExactly(fd, head, 0, path);
    const n = Number(new DataView(head.buffer).getBigUint64(0, true));
    if (n < 2 || n > MAX_HEADER_BYTES || 8 + n > size) throw new Error(`${path}: not a safetensors file (header length ${n})`);
    const json = new Uint8Array(n);
    readExactly(fd, json, 8, path);
    let header: Record<string, unknown>;
    try {
      header = JSON.parse(new TextDecoder().decode(json)) as Record<string, unknown>;
    } catch {
      throw new Error(`${path}: the safetensors header is not JSON`);
    }
    const base = 8 + n;
    const tensors: SafetensorsTensor[] = [];
    let metadata: Record<string, string> = {};
    for (const [name, v] of Object.entries(header)) {
      if (name === "__metadata__") {
        metadata = (v ?? {}) as Record<string, string>;
        continue;
      }
      const e = v as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
      const shape = e.shape;
      const offsets = e.data_offsets;
      if (typeof e.dtype !== "string" || !Array.isArray(shape) || !Array.isArray(offsets) || offsets.length !== 2) {
        throw new Error(`${path}: tensor ${name} has a malformed header entry`);
      }
      const [begin, end] = offsets as number[];
      const bytes = DTYPE_BYTES[e.dtype];
      const count = (shape as number[]).reduce((a, b) => a * b, 1);
      if (!Number.isInteger(begin) || !Number.isInteger(end) || begin! < 0 || end! < begin! || base + end! > size) {
        throw new Error(`${path}: tensor ${name} lies outside the file`);
      }
      if (bytes !== undefined && (end! - begin!) !== count * bytes) {
        throw new Error(`${path}: tensor ${name} holds ${end! - begin!} bytes, but ${e.dtype}[${(shape as number[]).join(", ")}] needs ${count * bytes}`);
      }
      tensors.push({ name, dtype: e.dtype, shape: shape as number[], file: path, start: base + begin!, end: base + end! });
    }
    return { tensors, metadata };
  } finally {
    closeSync(fd);
  }
}

/** bfloat16 is float32's upper half: widening is a shift (into `out` from `offset` on). */
function bf16ToFloat32Into(bits: Uint16Array, out: Float32Array, offset: number): void {
  const u = new Uint32Array(out.buffer, out.byteOffset, out.length);
  for (let i = 0; i < bits.length; i++) u[offset + i] = bits[i]! << 16;
}

/** float32 -> bfloat16 bits, rounding to nearest even as torch does (NaN stays NaN). */
function float32ToBf16(values: Float32Array): Uint16Array {
  const u = new Uint32Array(values.buffer, values.byteOffset, values.length);
  const out = new Uint16Array(values.length);
  for (let i = 0; i < values.length; i++) {
    const x = u[i]!;
    if ((x & 0x7fffffff) > 0x7f800000) out[i] = (x >>> 16) | 0x40;
    else out[i] = (x + 0x7fff + ((x >>> 16) & 1)) >>> 16;
  }
  return out;
}

/**
 * A checkpoint directory: model.safetensors, or the shards model.safetensors.index.json names.
 * Tensors are read one at a time, by offset, as float32.
 */
export class SafetensorsCheckpoint {
  private readonly byName = new Map<string, SafetensorsTensor>();
  private readonly fds = new Map<string, number>();

  private constructor(
    readonly dir: string,
    readonly files: string[],
  ) {
    for (const f of files) {
      for (const t of readSafetensorsHeader(f).tensors) {
        if (this.byName.has(t.name)) throw new Error(`tensor ${t.name} appears in two files (${this.byName.get(t.name)!.file} and ${f})`);
        this.byName.set(t.name, t);
      }
    }
  }

  static open(dir: string): SafetensorsCheckpoint {
    const index = join(dir, "model.safetensors.index.json");
    if (existsSync(index)) {
      let map: Record<string, string>;
      try {
        map = (JSON.parse(readFileSync(index, "utf8")) as { weight_map?: Record<string, string> }).weight_map ?? {};
      } catch (e) {
        throw new Error(`${index}: ${(e as Error).message}`);
      }
      const shards = [...new Set(Object.values(map))].sort();
      if (shards.length === 0) throw new Error(`${index} has an empty weight_map`);
      for (const s of shards) {
        if (s.includes("/") || s.includes("\\") || !existsSync(join(dir, s))) throw new Error(`${index} names shard ${s}, which is not in ${dir}`);
      }
      const ckpt = new SafetensorsCheckpoint(dir, shards.map((s) => join(dir, s)));
      for (const [name, file] of Object.entries(map)) {
        const t = ckpt.byName.get(name);
        if (!t || t.file !== join(dir, file)) throw new Error(`${index} places ${name} in ${file}, but that shard does not hold it`);
      }
      return ckpt;
    }
    if (existsSync(join(dir, "model.safetensors"))) return new SafetensorsCheckpoint(dir, [join(dir, "model.safetensors")]);
    const found = existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith(".safetensors")) : [];
    if (found.length === 1) return new SafetensorsCheckpoint(dir, [join(dir, found[0]!)]);
    if (found.length > 1) throw new Error(`${dir} holds ${found.length} .safetensors files but no model.safetensors.index.json to say which tensor is where`);
    const other = existsSync(dir) ? readdirSync(dir).filter((f) => /\.(bin|pt|pth|gguf|ckpt)$/.test(f)) : [];
    throw new Error(`no safetensors weights in ${dir}${other.length ? ` (found ${other.join(", ")}: only safetensors checkpoints are read)` : ""}`);
  }

  names(): string[] {
    return [...this.byName.keys()];
  }

  tensor(name: string): SafetensorsTensor | undefined {
    return this.byName.get(name);
  }

  /** The tensor as float32, after checking its shape; F32, F16 and BF16 are read. */
  readFloat32(name: string, shape?: number[]): Float32Array {
    const t = this.floatTensor(name, shape);
    return this.readElements(t, name, 0, (t.end - t.start) / FLOAT_DTYPES[t.dtype as keyof typeof FLOAT_DTYPES]);
  }

  /**
   * Rows [start, start + count) of a 2-D tensor of `shape`, as float32: a part of a large
   * tensor (an embedding table) without the rest in memory.
   */
  readFloat32Rows(name: string, shape: [number, number], start: number, count: number): Float32Array {
    const t = this.floatTensor(name, shape);
    if (!Number.isInteger(start) || !Number.isInteger(count) || start < 0 || count < 0 || start + count > shape[0]) {
      throw new Error(`rows ${start}..${start + count} of ${name} are outside its ${shape[0]} rows`);
    }
    return this.readElements(t, name, start * shape[1], count * shape[1]);
  }

  /** The entry of a float tensor, its shape checked. */
  private floatTensor(name: string, shape?: number[]): SafetensorsTensor {
    const t = this.byName.get(name);
    if (!t) throw new Error(`the checkpoint has no tensor ${name}`);
    if (shape && (shape.length !== t.shape.length || shape.some((d, i) => d !== t.shape[i]))) {
      throw new Error(`tensor ${name} has shape [${t.shape.join(", ")}], expected [${shape.join(", ")}]`);
    }
    if (!(t.dtype in FLOAT_DTYPES)) throw new Error(`tensor ${name} is ${t.dtype}; only ${Object.keys(FLOAT_DTYPES).join(", ")} weights can be imported`);
    return t;
  }

  /** `count` elements of the tensor from element `first` on, as float32. */
  private readElements(t: SafetensorsTensor, name: string, first: number, count: number): Float32Array {
    let fd = this.fds.get(t.file);
    if (fd === undefined) {
      fd = openSync(t.file, "r");
      this.fds.set(t.file, fd);
    }
    const what = `${t.file} (${name})`;
    if (t.dtype === "F32") {
      const bytes = new Uint8Array(4 * count);
      readExactly(fd, bytes, t.start + 4 * first, what);
      return new Float32Array(bytes.buffer);
    }
    // Half-width types are read a chunk at a time into the float32 result: no second copy of
    // the tensor's raw bytes (an embedding can be a large share of a model).
    const out = new Float32Array(count);
    const chunk = new Uint16Array(Math.min(out.length, READ_CHUNK));
    const chunkBytes = new Uint8Array(chunk.buffer);
    for (let at = 0; at < out.length; at += chunk.length) {
      const n = Math.min(chunk.length, out.length - at);
      readExactly(fd, chunkBytes.subarray(0, 2 * n), t.start + 2 * (first + at), what);
      if (t.dtype === "F16") halfToFloat32Into(chunk.subarray(0, n), out, at);
      else bf16ToFloat32Into(chunk.subarray(0, n), out, at);
    }
    return out;
  }

  close(): void {
    for (const fd of this.fds.values()) closeSync(fd);
    this.fds.clear();
  }
}

export interface SafetensorsEntry {
  name: string;
  shape: number[];
  /** Stored as `dtype` (converted from float32). */
  dtype: SafetensorsFloat;
  values: Float32Array;
}

function encode(e: SafetensorsEntry): Uint8Array {
  const count = e.shape.reduce((a, b) => a * b, 1);
  if (count !== e.values.length) throw new Error(`${e.name}: shape [${e.shape.join(", ")}] needs ${count} values, got ${e.values.length}`);
  const data = e.dtype === "F32" ? e.values : e.dtype === "F16" ? float32ToHalf(e.values) : float32ToBf16(e.values);
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}

/**
 * Writes one .safetensors file as transformers' save_pretrained does (header padded with spaces
 * to 8 bytes, tensors in the given order). Each tensor is converted and written in turn.
 */
export function writeSafetensors(path: string, entries: SafetensorsEntry[], metadata: Record<string, string> = { format: "pt" }): void {
  const header: Record<string, unknown> = { __metadata__: metadata };
  let offset = 0;
  for (const e of entries) {
    const length = e.values.length * FLOAT_DTYPES[e.dtype];
    header[e.name] = { dtype: e.dtype, shape: e.shape, data_offsets: [offset, offset + length] };
    offset += length;
  }
  const raw = new TextEncoder().encode(JSON.stringify(header));
  const head = new Uint8Array(Math.ceil(raw.length / 8) * 8).fill(0x20);
  head.set(raw);
  const fd = openSync(path, "w");
  try {
    const len = new Uint8Array(8);
    new DataView(len.buffer).setBigUint64(0, BigInt(head.length), true);
    writeSync(fd, len);
    writeSync(fd, head);
    for (const e of entries) {
      const bytes = encode(e);
      let at = 0;
      while (at < bytes.length) at += writeSync(fd, bytes, at, bytes.length - at);
    }
  } finally {
    closeSync(fd);
  }
}
