// The weights around a GroupQueryAttention node, found and edited at load (unpad-heads.ts,
// query-scale.ts): the float projections that make its query, key and value and the one that
// reads its output, when they are plain enough to rewrite exactly: MatMul initializers held inline
// in the graph (with or without a bias Add, separate or packed q/k/v), each read by that node alone.
import type { onnx } from "onnx-proto";
import { FLOAT } from "./graph-edit.ts";

/** A GroupQueryAttention node as split-attention.ts reads it. */
export interface AttentionLayer {
  node: onnx.INodeProto;
  heads: number;
  kvHeads: number;
  /** Head size of the cache inputs. */
  dim: number;
  /** The query input holds q, k and v one after another in its last axis (key and value unset). */
  packed: boolean;
  /**
   * Leading dimensions of each head that rotate: twice the cos cache's width, as in
   * GroupQueryAttention (less than `dim` for partial rotary); 0 without rotary.
   */
  rotaryDim: number;
}

/**
 * A float matrix initializer, row-major [rows, cols]. Its values are copied out when first read:
 * a model with nothing to rewrite has only the first columns it checks read (unpad-heads.ts).
 */
export class Matrix {
  private values: Float32Array | null = null;
  constructor(
    readonly init: onnx.ITensorProto,
    readonly rows: number,
    readonly cols: number,
  ) {}

  /** New values (and dims: [rows, cols], or [cols] for a vector), in the graph and here. */
  replace(data: Float32Array, rows: number, cols: number): void {
    this.init.rawData = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    this.init.floatData = [];
    this.init.dims = this.init.dims!.length === 2 ? [rows, cols] : [cols];
    this.values = data;
  }

  get data(): Float32Array {
    if (!this.values) {
      const { rawData, floatData } = this.init;
      // A copy: the bytes may be a view into the whole decoded file, at any offset.
      this.values = rawData && rawData.length > 0 ? new Float32Array(Uint8Array.from(rawData).buffer) : Float32Array.from(floatData ?? []);
    }
    return this.values;
  }
}

/** A projection: x·W (+ b), producing one GroupQueryAttention input. */
export interface Projection {
  weight: Matrix;
  bias: Matrix | null;
}

/** Inline float data of an initializer of `rank` dims; null for anything else (external, other types). */
export function floats(init: onnx.ITensorProto | undefined, rank: number): Matrix | null {
  if (!init || init.dataType !== FLOAT || init.dataLocation === 1 || (init.dims ?? []).length !== rank) return null;
  const dims = (init.dims ?? []).map(Number);
  const [rows, cols] = rank === 2 ? [dims[0]!, dims[1]!] : [1, dims[0]!];
  const held = init.rawData && init.rawData.length > 0 ? init.rawData.length / 4 : (init.floatData?.length ?? 0);
  return held === rows * cols ? new Matrix(init, rows, cols) : null;
}

export class GraphIndex {
  readonly producer = new Map<string, onnx.INodeProto>();
  readonly uses = new Map<string, number>();
  readonly initializers = new Map<string, onnx.ITensorProto>();
  constructor(readonly graph: onnx.IGraphProto) {
    for (const n of graph.node ?? []) {
      for (const o of n.output ?? []) if (o) this.producer.set(o, n);
      for (const i of n.input ?? []) if (i) this.uses.set(i, (this.uses.get(i) ?? 0) + 1);
    }
    for (const o of graph.output ?? []) if (o.name) this.uses.set(o.name, (this.uses.get(o.name) ?? 0) + 1);
    for (const t of graph.initializer ?? []) if (t.name) this.initializers.set(t.name, t);
  }

  /** The initializer `name` as a matrix, when nothing else reads it. */
  private owned(name: string | undefined, rank: number): Matrix | null {
    return name && this.uses.get(name) === 1 ? floats(this.initializers.get(name), rank) : null;
  }

  /** The MatMul (and bias Add) that alone produce `name`, which only its one reader (the attention) reads. */
  projection(name: string | undefined): Projection | null {
    if (!name || this.uses.get(name) !== 1) return null;
    let n = this.producer.get(name);
    let bias: Matrix | null = null;
    if (n?.opType === "Add") {
      const [a, b] = n.input ?? [];
      const biasName = this.initializers.has(a ?? "") ? a : b;
      const other = biasName === a ? b : a;
      bias = this.owned(biasName, 1);
      if (!bias || this.uses.get(other ?? "") !== 1) return null;
      n = this.producer.get(other ?? "");
    }
    if (n?.opType !== "MatMul") return null;
    const weight = this.owned(n.input?.[1], 2);
    if (!weight || (bias && bias.cols !== weight.cols)) return null;
    return { weight, bias };
  }

  /** The output projection reading the attention's output `name`, its only reader. */
  outputProjection(name: string | undefined): Matrix | null {
    if (!name || this.uses.get(name) !== 1) return null;
    const reader = (this.graph.node ?? []).find((n) => n.opType === "MatMul" && n.input?.[0] === name);
    return reader ? this.owned(reader.input?.[1], 2) : null;
  }
}

/** A layer's projections: q, k and v (k and v from a column of a packed one), and the output's. */
export interface LayerProjections {
  layer: AttentionLayer;
  q: Projection;
  k: { p: Projection; from: number };
  v: { p: Projection; from: number };
  output: Matrix | null;
}

/** Every layer's projections, or null when one of them is not plain (see above). */
export function attentionProjections(index: GraphIndex, layers: AttentionLayer[]): LayerProjections[] | null {
  const found: LayerProjections[] = [];
  for (const l of layers) {
    const [q, k, v] = l.node.input!;
    const output = index.outputProjection(l.node.output?.[0]);
    const qDim = l.heads * l.dim;
    const kvDim = l.kvHeads * l.dim;
    if (output && output.rows !== qDim) return null;
    if (l.packed) {
      const p = index.projection(q);
      if (!p || p.weight.cols !== qDim + 2 * kvDim) return null;
      found.push({ layer: l, q: p, k: { p, from: qDim }, v: { p, from: qDim + kvDim }, output });
    } else {
      const [pq, pk, pv] = [index.projection(q), index.projection(k), index.projection(v)];
      if (!pq || !pk || !pv || pq.weight.cols !== qDim || pk.weight.cols !== kvDim || pv.weight.cols !== kvDim) return null;
      found.push({ layer: l, q: pq, k: { p: pk, from: 0 }, v: { p: pv, from: 0 }, output });
    }
  }
  return found;
}
