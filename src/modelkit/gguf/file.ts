// A GGUF file (llama.cpp's format) opened for import: its header parsed by @huggingface/gguf (the
// Hugging Face library for the format, which reads a local file by ranges), every tensor's place
// checked against the file's size, and tensor data read by offset, a part at a time, so an import
// holds one tensor's bytes at most. A model split into `NAME-00001-of-0000N.gguf` files is opened
// from any of them: each shard has its own header and tensors, the first the model's metadata.

import { closeSync, existsSync, fstatSync, openSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { gguf, type MetadataValue, parseGgufShardFilename } from "@huggingface/gguf";
import { readExactly } from "../hf/safetensors.ts";
import { dequantize, ggmlBytes, ggmlType, type GgmlType } from "./ggml.ts";

export interface GgufTensor {
  name: string;
  type: GgmlType;
  /** ggml's dimensions, innermost first: a [out, in] matrix is [in, out] here. */
  dims: number[];
  file: string;
  /** Absolute byte offset in `file`, and byte length. */
  start: number;
  bytes: number;
}

export type GgufMetadata = Record<string, MetadataValue>;

/** The shard files of a split model, from any one of them (a single file is its own list). */
export function ggufShardPaths(path: string): string[] {
  const shard = parseGgufShardFilename(basename(path));
  if (!shard) return [path];
  const total = Number(shard.total);
  const width = shard.total.length;
  const paths: string[] = [];
  for (let i = 1; i <= total; i++) {
    const p = join(dirname(path), `${basename(shard.prefix)}-${String(i).padStart(width, "0")}-of-${shard.total}.gguf`);
    if (!existsSync(p)) throw new Error(`${basename(path)} is part ${Number(shard.shard)} of ${total}, but ${basename(p)} is not beside it`);
    paths.push(p);
  }
  return paths;
}

export class GgufFile {
  private readonly fds = new Map<string, number>();

  private constructor(
    readonly paths: string[],
    readonly metadata: GgufMetadata,
    readonly tensors: Map<string, GgufTensor>,
  ) {}

  /** Opens a file (or all shards of a split one); throws, in words, on anything malformed. */
  static async open(path: string): Promise<GgufFile> {
    if (!existsSync(path)) throw new Error(`no such file: ${path}`);
    const paths = ggufShardPaths(path);
    const tensors = new Map<string, GgufTensor>();
    let metadata: GgufMetadata | null = null;
    for (const p of paths) {
      let parsed: Awaited<ReturnType<typeof gguf>>;
      try {
        parsed = await gguf(p, { allowLocalFile: true });
      } catch (e) {
        const msg = (e as Error).message;
        throw new Error(`${p}: ${/magic/i.test(msg) ? "not a GGUF file (it does not start with GGUF)" : `the GGUF header cannot be read (${msg}); is the file complete?`}`);
      }
      if (!parsed.littleEndian) throw new Error(`${p}: a big-endian GGUF file; only little-endian files are read`);
      metadata ??= parsed.metadata as unknown as GgufMetadata;
      const fd = openSync(p, "r");
      const size = fstatSync(fd).size;
      closeSync(fd);
      const base = Number(parsed.tensorDataOffset);
      for (const t of parsed.tensorInfos) {
        const type = ggmlType(t.dtype, t.name);
        const dims = t.shape.map(Number);
        const count = dims.reduce((a, b) => a * b, 1);
        if (dims[0]! % type.blockValues !== 0) throw new Error(`${p}: tensor ${t.name} has rows of ${dims[0]} values, not whole ${type.name} blocks of ${type.blockValues}`);
        const bytes = ggmlBytes(type, count);
        const start = base + Number(t.offset);
        if (start + bytes > size) {
          throw new Error(`${p} is truncated: tensor ${t.name} (${type.name} [${dims.join(", ")}]) ends at byte ${start + bytes}, but the file has ${size} bytes (an incomplete download?)`);
        }
        if (tensors.has(t.name)) throw new Error(`tensor ${t.name} appears twice (in ${tensors.get(t.name)!.file} and ${p})`);
        tensors.set(t.name, { name: t.name, type, dims, file: p, start, bytes });
      }
    }
    const split = metadata!["split.count"];
    if (typeof split === "number" && split !== paths.length) throw new Error(`${path} says the model is split into ${split} files, but its name says ${paths.length}`);
    return new GgufFile(paths, metadata!, tensors);
  }

  tensor(name: string): GgufTensor | undefined {
    return this.tensors.get(name);
  }

  /** The raw bytes of rows [first, first + count) of a tensor (a row: dims[0] values). */
  readRaw(t: GgufTensor, first = 0, count = t.dims.slice(1).reduce((a, b) => a * b, 1)): Uint8Array {
    const rowBytes = ggmlBytes(t.type, t.dims[0]!);
    let fd = this.fds.get(t.file);
    if (fd === undefined) {
      fd = openSync(t.file, "r");
      this.fds.set(t.file, fd);
    }
    const out = new Uint8Array(rowBytes * count);
    readExactly(fd, out, t.start + rowBytes * first, `${t.file} (${t.name})`);
    return out;
  }

  /** Rows [first, first + count) as float32, dequantised as ggml does; the whole tensor by default. */
  readFloat32(t: GgufTensor, first = 0, count?: number): Float32Array {
    const raw = this.readRaw(t, first, count);
    const out = new Float32Array((raw.length / t.type.blockBytes) * t.type.blockValues);
    dequantize(t.type, raw, out);
    return out;
  }

  close(): void {
    for (const fd of this.fds.values()) closeSync(fd);
    this.fds.clear();
  }
}
