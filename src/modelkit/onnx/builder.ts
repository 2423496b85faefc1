// A small typed builder for ONNX graphs on top of onnx-proto's generated bindings. It keeps
// names unique, deduplicates small constants, and knows the attribute encodings.

import { closeSync, openSync, writeSync } from "node:fs";
import { onnx } from "onnx-proto";
import { type DType, DTYPE_BYTES, type DTypeArray, ONNX_DTYPE } from "./dtype.ts";
import { type TensorData, elementCount, int64Tensor, rawBytes, tensor } from "./tensor.ts";

/** A dimension: a fixed size, or a symbolic name such as "batch_size". */
export type Dim = number | string;

/**
 * Attribute values. Plain numbers are INT (ONNX has far more int attributes than float ones);
 * floats must be explicit so `epsilon: 1` can never be mis-encoded.
 */
export type AttrValue =
  | number
  | string
  | number[]
  | { float: number }
  | { floats: number[] }
  | { tensor: TensorData };

export type Attrs = Record<string, AttrValue>;

export interface OpsetImport {
  domain: string;
  version: number;
}

export const MS_DOMAIN = "com.microsoft";

interface ValueInfo {
  name: string;
  dtype: DType;
  shape: Dim[];
}

function encodeAttr(name: string, v: AttrValue): onnx.IAttributeProto {
  const T = onnx.AttributeProto.AttributeType;
  if (typeof v === "number") {
    if (!Number.isInteger(v)) throw new Error(`attribute ${name}: ${v} is not an integer; use { float: ${v} }`);
    return { name, type: T.INT, i: v };
  }
  if (typeof v === "string") return { name, type: T.STRING, s: new TextEncoder().encode(v) };
  if (Array.isArray(v)) {
    for (const x of v) if (!Number.isInteger(x)) throw new Error(`attribute ${name}: ints only`);
    return { name, type: T.INTS, ints: v };
  }
  if ("float" in v) return { name, type: T.FLOAT, f: v.float };
  if ("floats" in v) return { name, type: T.FLOATS, floats: v.floats };
  return { name, type: T.TENSOR, t: tensorProto(`${name}_value`, v.tensor) };
}

export function tensorProto(name: string, t: TensorData): onnx.ITensorProto {
  return { name, dataType: ONNX_DTYPE[t.dtype], dims: t.dims, rawData: rawBytes(t) };
}

function valueInfoProto(v: ValueInfo): onnx.IValueInfoProto {
  return {
    name: v.name,
    type: {
      tensorType: {
        elemType: ONNX_DTYPE[v.dtype],
        shape: { dim: v.shape.map((d) => (typeof d === "number" ? { dimValue: d } : { dimParam: d })) },
      },
    },
  };
}

/** Where an initializer's bytes went in an external data file. */
export interface ExternalPlacement {
  location: string;
  offset: number;
  length: number;
}

/** An initializer being written a part at a time (GraphBuilder.partInitializer). */
export interface InitializerParts<D extends DType> {
  readonly name: string;
  /** Writes `values` as the elements from index `first` on. */
  put(first: number, values: DTypeArray[D]): void;
  /** Throws unless every element has been written. */
  done(): void;
}

/** An initializer whose bytes are already in an external data file. */
interface SpilledTensor {
  dtype: DType;
  dims: number[];
  placed: ExternalPlacement;
}

export class GraphBuilder {
  private readonly nodes: onnx.INodeProto[] = [];
  private readonly inits = new Map<string, TensorData | SpilledTensor>();
  private readonly inputs: ValueInfo[] = [];
  private readonly outputs: ValueInfo[] = [];
  private readonly infos: ValueInfo[] = [];
  private readonly constCache = new Map<string, string>();
  private readonly used = new Set<string>();
  private counter = 0;

  /**
   * `spill`: large initializers are written to this file as they are added and only their place is
   * kept, so a graph's weights never need to be in memory all at once (see ExternalDataFile).
   */
  constructor(
    readonly name: string,
    private readonly spill?: ExternalDataFile,
  ) {}

  /** A fresh value name derived from `hint`. */
  fresh(hint: string): string {
    let n = hint;
    while (this.used.has(n)) n = `${hint}_${++this.counter}`;
    this.used.add(n);
    return n;
  }

  private claim(name: string): string {
    if (this.used.has(name)) throw new Error(`duplicate value name ${name}`);
    this.used.add(name);
    return name;
  }

  input(name: string, dtype: DType, shape: Dim[]): string {
    this.inputs.push({ name: this.claim(name), dtype, shape });
    return name;
  }

  /** Declares `value` as a graph output, renaming it through Identity when the names differ. */
  output(name: string, dtype: DType, shape: Dim[], value?: string): string {
    if (value !== undefined && value !== name) {
      this.node("Identity", [value], [name]);
    }
    this.outputs.push({ name, dtype, shape });
    return name;
  }

  valueInfo(name: string, dtype: DType, shape: Dim[]): void {
    this.infos.push({ name, dtype, shape });
  }

  initializer(name: string, t: TensorData): string {
    const placed = this.spill?.place(t);
    this.inits.set(this.claim(name), placed ? { dtype: t.dtype, dims: t.dims, placed } : t);
    return name;
  }

  /**
   * An initializer written to the external data file a part at a time: `put` writes elements
   * from a given index on, and `done` checks that every element was written. Null when the
   * graph has no external data file (build the tensor whole then). A checkpoint's largest tensor
   * (the embedding table) is then never whole in memory.
   */
  partInitializer<D extends DType>(name: string, dtype: D, dims: number[]): InitializerParts<D> | null {
    const spill = this.spill;
    if (!spill) return null;
    const width = DTYPE_BYTES[dtype];
    const total = elementCount(dims);
    const placed = spill.reserve(total * width);
    this.inits.set(this.claim(name), { dtype, dims, placed });
    let written = 0;
    return {
      name,
      put(first, values) {
        spill.write(placed, first * width, new Uint8Array(values.buffer, values.byteOffset, values.byteLength));
        written += values.length;
      },
      done() {
        if (written !== total) throw new Error(`${name}: ${written} of ${total} elements were written`);
      },
    };
  }

  /** A deduplicated small constant initializer. */
  constant(t: TensorData, hint = "const"): string {
    const key = `${t.dtype}|${t.dims.join(",")}|${Array.from(t.data as ArrayLike<number | bigint>, String).join(",")}`;
    const hit = this.constCache.get(key);
    if (hit) return hit;
    const name = this.fresh(hint);
    this.inits.set(name, t);
    this.constCache.set(key, name);
    return name;
  }

  /** int64 constant: a scalar when `values` is a number, else a 1-D tensor. */
  i64(values: number | number[]): string {
    return typeof values === "number" ? this.constant(int64Tensor([], [values]), "i64") : this.constant(int64Tensor([values.length], values), "i64");
  }

  f32(values: number | number[]): string {
    return typeof values === "number"
      ? this.constant(tensor("float32", [], Float32Array.of(values)), "f32")
      : this.constant(tensor("float32", [values.length], Float32Array.from(values)), "f32");
  }

  /**
   * Adds a node. `outputs` is a count of fresh outputs or explicit names ("" skips an optional
   * output). Returns the output names.
   */
  node(
    opType: string,
    inputs: string[],
    outputs: number | string[] = 1,
    attrs: Attrs = {},
    domain = "",
  ): string[] {
    const hint = opType.replace(/[^A-Za-z0-9]/g, "").toLowerCase();
    const outs = typeof outputs === "number" ? Array.from({ length: outputs }, () => this.fresh(hint)) : outputs.map((o) => (o === "" ? "" : this.used.has(o) ? o : this.claim(o)));
    this.nodes.push({
      name: this.fresh(`${opType}_node`),
      opType,
      domain,
      input: inputs,
      output: outs,
      attribute: Object.entries(attrs).map(([k, v]) => encodeAttr(k, v)),
    });
    return outs;
  }

  /** A single-output node. */
  op(opType: string, inputs: string[], attrs: Attrs = {}, domain = ""): string {
    return this.node(opType, inputs, 1, attrs, domain)[0];
  }

  initializerBytes(): number {
    let n = 0;
    for (const t of this.inits.values()) n += "placed" in t ? t.placed.length : t.data.byteLength;
    return n;
  }

  toGraph(external?: ExternalDataPlan): onnx.IGraphProto {
    const initializer: onnx.ITensorProto[] = [];
    for (const [name, t] of this.inits) {
      const placed = "placed" in t ? t.placed : external?.place(name, t);
      if (placed) {
        initializer.push({
          name,
          dataType: ONNX_DTYPE[t.dtype],
          dims: t.dims,
          dataLocation: onnx.TensorProto.DataLocation.EXTERNAL,
          externalData: [
            { key: "location", value: placed.location },
            { key: "offset", value: String(placed.offset) },
            { key: "length", value: String(placed.length) },
          ],
        });
      } else {
        initializer.push(tensorProto(name, t as TensorData));
      }
    }
    return {
      name: this.name,
      node: this.nodes,
      initializer,
      input: this.inputs.map(valueInfoProto),
      output: this.outputs.map(valueInfoProto),
      valueInfo: this.infos.map(valueInfoProto),
    };
  }
}

/** Each tensor's start in an external data file: 4 KiB aligned, as onnx's saver does. */
const EXTERNAL_ALIGN = 4096;

/**
 * An external data file written as initializers are added (GraphBuilder's `spill`): large
 * tensors go to disk at once, aligned as ExternalDataPlan places them. Close it when the graph is
 * built.
 */
export class ExternalDataFile {
  private readonly fd: number;
  private size = 0;

  constructor(
    path: string,
    /** The file's name as the graph refers to it (relative to the .onnx file). */
    readonly location: string,
    private readonly minBytes = 1024,
  ) {
    this.fd = openSync(path, "w");
  }

  /** Writes the tensor and returns its place; null (nothing written) below the size threshold. */
  place(t: TensorData): ExternalPlacement | null {
    const bytes = rawBytes(t);
    if (bytes.length < this.minBytes) return null;
    const placed = this.reserve(bytes.length);
    this.write(placed, 0, bytes);
    return placed;
  }

  /** Room for `length` bytes, written later part by part (see write). */
  reserve(length: number): ExternalPlacement {
    const offset = Math.ceil(this.size / EXTERNAL_ALIGN) * EXTERNAL_ALIGN;
    this.size = offset + length;
    return { location: this.location, offset, length };
  }

  /** Writes `bytes` at byte `at` of a reserved place. */
  write(placed: ExternalPlacement, at: number, bytes: Uint8Array): void {
    if (at < 0 || at + bytes.length > placed.length) throw new Error(`bytes ${at}..${at + bytes.length} are outside a place of ${placed.length}`);
    let done = 0;
    while (done < bytes.length) done += writeSync(this.fd, bytes, done, bytes.length - done, placed.offset + at + done);
  }

  get bytes(): number {
    return this.size;
  }

  close(): void {
    closeSync(this.fd);
  }
}

/** Collects large initializers into one external data file, 4 KiB aligned as onnx's saver does. */
export class ExternalDataPlan {
  private readonly chunks: Uint8Array[] = [];
  private size = 0;

  constructor(
    readonly location: string,
    private readonly minBytes = 1024,
  ) {}

  place(_name: string, t: TensorData): { location: string; offset: number; length: number } | null {
    const bytes = rawBytes(t);
    if (bytes.length < this.minBytes) return null;
    const pad = (EXTERNAL_ALIGN - (this.size % EXTERNAL_ALIGN)) % EXTERNAL_ALIGN;
    if (pad) this.chunks.push(new Uint8Array(pad));
    const offset = this.size + pad;
    this.chunks.push(bytes);
    this.size = offset + bytes.length;
    return { location: this.location, offset, length: bytes.length };
  }

  get chunksToWrite(): readonly Uint8Array[] {
    return this.chunks;
  }
}

export interface ModelOptions {
  opsets: OpsetImport[];
  producerName?: string;
  producerVersion?: string;
  docString?: string;
  metadata?: Record<string, string>;
}

export interface SerializedModel {
  /** The ModelProto bytes. */
  model: Uint8Array;
  /** Chunks of the external data file (concatenate to write), when external data was used. */
  externalData: readonly Uint8Array[] | null;
}

/** ONNX IR version 8 (onnx 1.10+); onnx-proto's schema is that version. */
export const IR_VERSION = 8;

export function serializeModel(g: GraphBuilder, opts: ModelOptions, external?: ExternalDataPlan): SerializedModel {
  const model: onnx.IModelProto = {
    irVersion: IR_VERSION,
    producerName: opts.producerName ?? "sluice-modelkit",
    producerVersion: opts.producerVersion ?? "0.1.0",
    docString: opts.docString ?? "",
    opsetImport: opts.opsets.map((o) => ({ domain: o.domain, version: o.version })),
    graph: g.toGraph(external),
    metadataProps: Object.entries(opts.metadata ?? {}).map(([key, value]) => ({ key, value })),
  };
  const bytes = onnx.ModelProto.encode(model).finish();
  return { model: bytes, externalData: external ? external.chunksToWrite : null };
}

export { elementCount };
