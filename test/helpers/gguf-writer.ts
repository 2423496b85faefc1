// Writes GGUF files for tests, from the format's specification (ggml's docs/gguf.md): the magic
// "GGUF", version 3, counts, key/value pairs, tensor infos, then the tensors' bytes, each aligned
// to 32. And ggml's block layouts (ggml-common.h), packed here from chosen integer codes and
// scales, so that tests know every value a block stands for without the importer's code.
import { writeFileSync } from "node:fs";
import { toHalfBits, fromHalfBits } from "../../src/modelkit/onnx/dtype.ts";

/** GGUF value types (gguf.md: gguf_metadata_value_type). */
export const GGUF = { UINT32: 4, INT32: 5, FLOAT32: 6, BOOL: 7, STRING: 8, ARRAY: 9 } as const;

export type GgufValue = string | boolean | number | { f32: number } | { i32: number } | string[] | { f32s: number[] } | { i32s: number[] };

export interface GgufTensorSpec {
  name: string;
  /** ggml's dimensions, innermost first. */
  dims: number[];
  /** ggml type id. */
  type: number;
  bytes: Uint8Array;
}

class Out {
  private parts: Uint8Array[] = [];
  length = 0;
  push(b: Uint8Array) {
    this.parts.push(b);
    this.length += b.length;
  }
  u32(v: number) {
    const b = new Uint8Array(4);
    new DataView(b.buffer).setUint32(0, v, true);
    this.push(b);
  }
  i32(v: number) {
    const b = new Uint8Array(4);
    new DataView(b.buffer).setInt32(0, v, true);
    this.push(b);
  }
  u64(v: number) {
    const b = new Uint8Array(8);
    new DataView(b.buffer).setBigUint64(0, BigInt(v), true);
    this.push(b);
  }
  f32(v: number) {
    const b = new Uint8Array(4);
    new DataView(b.buffer).setFloat32(0, v, true);
    this.push(b);
  }
  str(s: string) {
    const b = new TextEncoder().encode(s);
    this.u64(b.length);
    this.push(b);
  }
  pad(align: number) {
    const n = (align - (this.length % align)) % align;
    if (n) this.push(new Uint8Array(n));
  }
  bytes(): Uint8Array {
    const out = new Uint8Array(this.length);
    let at = 0;
    for (const p of this.parts) {
      out.set(p, at);
      at += p.length;
    }
    return out;
  }
}

function writeValue(o: Out, v: GgufValue): void {
  if (typeof v === "string") {
    o.u32(GGUF.STRING);
    o.str(v);
  } else if (typeof v === "boolean") {
    o.u32(GGUF.BOOL);
    o.push(Uint8Array.of(v ? 1 : 0));
  } else if (typeof v === "number") {
    if (!Number.isInteger(v) || v < 0) throw new Error(`${v}: say { f32 } or { i32 }`);
    o.u32(GGUF.UINT32);
    o.u32(v);
  } else if (Array.isArray(v)) {
    o.u32(GGUF.ARRAY);
    o.u32(GGUF.STRING);
    o.u64(v.length);
    for (const s of v) o.str(s);
  } else if ("f32" in v) {
    o.u32(GGUF.FLOAT32);
    o.f32(v.f32);
  } else if ("i32" in v) {
    o.u32(GGUF.INT32);
    o.i32(v.i32);
  } else if ("f32s" in v) {
    o.u32(GGUF.ARRAY);
    o.u32(GGUF.FLOAT32);
    o.u64(v.f32s.length);
    for (const x of v.f32s) o.f32(x);
  } else {
    o.u32(GGUF.ARRAY);
    o.u32(GGUF.INT32);
    o.u64(v.i32s.length);
    for (const x of v.i32s) o.i32(x);
  }
}

/** The bytes of a GGUF v3 file. */
export function ggufBytes(metadata: Record<string, GgufValue>, tensors: GgufTensorSpec[]): Uint8Array {
  const o = new Out();
  o.push(new TextEncoder().encode("GGUF"));
  o.u32(3);
  o.u64(tensors.length);
  o.u64(Object.keys(metadata).length);
  for (const [k, v] of Object.entries(metadata)) {
    o.str(k);
    writeValue(o, v);
  }
  let offset = 0;
  for (const t of tensors) {
    o.str(t.name);
    o.u32(t.dims.length);
    for (const d of t.dims) o.u64(d);
    o.u32(t.type);
    o.u64(offset);
    offset += Math.ceil(t.bytes.length / 32) * 32;
  }
  o.pad(32);
  for (const t of tensors) {
    o.push(t.bytes);
    o.pad(32);
  }
  return o.bytes();
}

export function writeGguf(path: string, metadata: Record<string, GgufValue>, tensors: GgufTensorSpec[]): void {
  writeFileSync(path, ggufBytes(metadata, tensors));
}

// ---------------------------------------------------------------- ggml block layouts

/** ggml type ids (ggml.h). */
export const T = { F32: 0, F16: 1, Q4_0: 2, Q4_1: 3, Q5_0: 6, Q5_1: 7, Q8_0: 8, Q4_K: 12, Q5_K: 13, Q6_K: 14, BF16: 30 } as const;

/** A half's bits and the float32 it is (scales are stored as halves). */
export const half = (x: number) => toHalfBits(x);
export const halfValue = (x: number) => fromHalfBits(toHalfBits(x));

const le16 = (b: Uint8Array, at: number, bits: number) => {
  b[at] = bits & 255;
  b[at + 1] = bits >> 8;
};

/** One block's codes and scale fields, as the tests choose them; `values` what it stands for. */
export interface Block {
  bytes: Uint8Array;
  values: number[];
}

/**
 * A block of `type` from codes L (the unsigned integers each format stores: 0..15, 0..31, …) and
 * scales, packed as ggml's quantize_row_*_ref functions lay them out; `values` from the formula
 * in the format's definition.
 */
export function packBlock(type: number, p: { d: number; m?: number; L: number[]; sc?: number[]; mins?: number[] }): Block {
  const d = halfValue(p.d);
  const m = halfValue(p.m ?? 0);
  const L = p.L;
  switch (type) {
    case T.Q4_0:
    case T.Q4_1: {
      const head = type === T.Q4_0 ? 2 : 4;
      const b = new Uint8Array(head + 16);
      le16(b, 0, half(p.d));
      if (type === T.Q4_1) le16(b, 2, half(p.m ?? 0));
      for (let j = 0; j < 16; j++) b[head + j] = L[j]! | (L[j + 16]! << 4);
      return { bytes: b, values: L.map((q) => (type === T.Q4_0 ? (q - 8) * d : q * d + m)) };
    }
    case T.Q5_0:
    case T.Q5_1: {
      const head = type === T.Q5_0 ? 2 : 4;
      const b = new Uint8Array(head + 4 + 16);
      le16(b, 0, half(p.d));
      if (type === T.Q5_1) le16(b, 2, half(p.m ?? 0));
      let qh = 0;
      for (let j = 0; j < 16; j++) {
        b[head + 4 + j] = (L[j]! & 15) | ((L[j + 16]! & 15) << 4);
        qh |= ((L[j]! & 16) >> 4) << j;
        qh |= ((L[j + 16]! & 16) >> 4) << (j + 16);
      }
      new DataView(b.buffer).setUint32(head, qh >>> 0, true);
      return { bytes: b, values: L.map((q) => (type === T.Q5_0 ? (q - 16) * d : q * d + m)) };
    }
    case T.Q8_0: {
      // L holds the signed codes.
      const b = new Uint8Array(34);
      le16(b, 0, half(p.d));
      for (let j = 0; j < 32; j++) b[2 + j] = L[j]! & 255;
      return { bytes: b, values: L.map((q) => q * d) };
    }
    case T.Q4_K:
    case T.Q5_K: {
      const sc = p.sc!;
      const mins = p.mins!;
      const q5 = type === T.Q5_K;
      const b = new Uint8Array(q5 ? 176 : 144);
      le16(b, 0, half(p.d));
      le16(b, 2, half(p.m ?? 0));
      for (let j = 0; j < 8; j++) {
        if (j < 4) {
          b[4 + j] = sc[j]!;
          b[4 + j + 4] = mins[j]!;
        } else {
          b[4 + j + 4] = (sc[j]! & 15) | ((mins[j]! & 15) << 4);
          b[4 + j - 4] |= (sc[j]! >> 4) << 6;
          b[4 + j] |= (mins[j]! >> 4) << 6;
        }
      }
      const qs = q5 ? 48 : 16;
      for (let n = 0, m1 = 1, m2 = 2; n < 256; n += 64, m1 <<= 2, m2 <<= 2) {
        for (let l = 0; l < 32; l++) {
          let l1 = L[n + l]!;
          let l2 = L[n + l + 32]!;
          if (q5 && l1 > 15) {
            l1 -= 16;
            b[16 + l] |= m1;
          }
          if (q5 && l2 > 15) {
            l2 -= 16;
            b[16 + l] |= m2;
          }
          b[qs + n / 2 + l] = l1 | (l2 << 4);
        }
      }
      return { bytes: b, values: L.map((q, i) => d * sc[i >> 5]! * q - m * mins[i >> 5]!) };
    }
    case T.Q6_K: {
      // L in 0..63 (code + 32); sc signed 8-bit scales of 16-value groups.
      const sc = p.sc!;
      const b = new Uint8Array(210);
      for (let n = 0; n < 2; n++) {
        for (let l = 0; l < 32; l++) {
          const [a0, a1, a2, a3] = [L[128 * n + l]!, L[128 * n + l + 32]!, L[128 * n + l + 64]!, L[128 * n + l + 96]!];
          b[64 * n + l] = (a0 & 15) | ((a2 & 15) << 4);
          b[64 * n + l + 32] = (a1 & 15) | ((a3 & 15) << 4);
          b[128 + 32 * n + l] = (a0 >> 4) | ((a1 >> 4) << 2) | ((a2 >> 4) << 4) | ((a3 >> 4) << 6);
        }
      }
      for (let i = 0; i < 16; i++) b[192 + i] = sc[i]! & 255;
      le16(b, 208, half(p.d));
      return { bytes: b, values: L.map((q, i) => d * sc[i >> 4]! * (q - 32)) };
    }
    default:
      throw new Error(`no block layout for type ${type}`);
  }
}

/** Values per block of each quantised type. */
export const BLOCK_VALUES: Record<number, number> = { [T.Q4_0]: 32, [T.Q4_1]: 32, [T.Q5_0]: 32, [T.Q5_1]: 32, [T.Q8_0]: 32, [T.Q4_K]: 256, [T.Q5_K]: 256, [T.Q6_K]: 256 };

/**
 * Float values stored as `type` by a simple quantiser written here (not ggml's, and not the
 * importer's): per block, the scale that spans the values and rounded codes. Returns the bytes and
 * the values the blocks stand for, which a model built from the file must compute with.
 */
export function quantizeFloats(type: number, x: Float32Array): { bytes: Uint8Array; values: Float32Array } {
  if (type === T.F32) return { bytes: new Uint8Array(x.slice().buffer), values: x.slice() };
  if (type === T.F16) {
    const h = Uint16Array.from(x, (v) => half(v));
    return { bytes: new Uint8Array(h.buffer), values: Float32Array.from(h, (v) => fromHalfBits(v)) };
  }
  const n = BLOCK_VALUES[type]!;
  const blocks: Uint8Array[] = [];
  const values = new Float32Array(x.length);
  for (let at = 0; at < x.length; at += n) {
    const v = [...x.subarray(at, at + n)];
    const lo = Math.min(...v);
    const hi = Math.max(...v);
    let block: Block;
    const clamp = (q: number, top: number) => Math.max(0, Math.min(top, Math.round(q)));
    if (type === T.Q4_0 || type === T.Q5_0 || type === T.Q8_0) {
      const amax = Math.max(Math.abs(lo), Math.abs(hi)) || 1;
      const [zero, top] = type === T.Q4_0 ? [8, 15] : type === T.Q5_0 ? [16, 31] : [0, 0];
      const d = type === T.Q8_0 ? amax / 127 : amax / zero;
      const L = type === T.Q8_0 ? v.map((y) => Math.max(-127, Math.min(127, Math.round(y / halfValue(d))))) : v.map((y) => clamp(y / halfValue(d) + zero, top));
      block = packBlock(type, { d, L });
    } else if (type === T.Q4_1 || type === T.Q5_1) {
      const top = type === T.Q4_1 ? 15 : 31;
      const d = (hi - lo) / top || 1;
      block = packBlock(type, { d, m: lo, L: v.map((y) => clamp((y - halfValue(lo)) / halfValue(d), top)) });
    } else if (type === T.Q4_K || type === T.Q5_K) {
      const top = type === T.Q4_K ? 15 : 31;
      // Sub-block scales and mins as 6-bit multiples of the super-block's d and dmin.
      const subs = Array.from({ length: 8 }, (_, s) => v.slice(32 * s, 32 * s + 32));
      const mins = subs.map((s) => Math.max(0, -Math.min(...s)));
      const spans = subs.map((s, i) => (Math.max(...s) + mins[i]!) / top);
      const dmin = Math.max(...mins) / 63 || 1;
      const d = Math.max(...spans) / 63 || 1;
      const sc = spans.map((s) => Math.max(1, Math.round(s / halfValue(d))));
      const mq = mins.map((m) => Math.round(m / halfValue(dmin)));
      const L = v.map((y, i) => clamp((y + halfValue(dmin) * mq[i >> 5]!) / (halfValue(d) * sc[i >> 5]!), top));
      block = packBlock(type, { d, m: dmin, sc, mins: mq, L });
    } else {
      const groups = Array.from({ length: 16 }, (_, g) => v.slice(16 * g, 16 * g + 16));
      const amax = groups.map((g) => Math.max(...g.map(Math.abs)) / 31);
      const d = Math.max(...amax) / 127 || 1;
      const sc = amax.map((a) => Math.max(1, Math.round(a / halfValue(d))));
      const L = v.map((y, i) => Math.max(0, Math.min(63, Math.round(y / (halfValue(d) * sc[i >> 4]!)) + 32)));
      block = packBlock(type, { d, sc, L });
    }
    blocks.push(block.bytes);
    values.set(block.values, at);
  }
  const bytes = new Uint8Array(blocks.reduce((s, b) => s + b.length, 0));
  let o = 0;
  for (const b of blocks) {
    bytes.set(b, o);
    o += b.length;
  }
  return { bytes, values };
}
