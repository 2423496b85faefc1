// ggml's tensor types as GGUF stores them, and their dequantisation, exactly as ggml defines it
// (ggml-common.h's block structs, ggml-quants.c's dequantize_row_*): every type is a run of
// blocks along a row (ne0), each block a few scale fields and packed integer codes. Values are
// computed in float32 in ggml's order of operations, so they are bit for bit what llama.cpp's CPU
// dequantisation gives.
//
// The 4-bit types whose blocks are 32 values with one scale (and a minimum) map straight onto
// MatMulNBits' blocks of 32 (quant/q4.ts): toQ4Rows keeps their codes and scales as they are.

import { fromHalfBits, halfToFloat32Into } from "../onnx/dtype.ts";
import { Q4_BLOCK, type Q4Matrix } from "../quant/q4.ts";

export interface GgmlType {
  name: string;
  /** Values per block and bytes per block. */
  blockValues: number;
  blockBytes: number;
  /** Bits a weight takes, for `auto`'s choice (4-bit types become q4). */
  bits: number;
}

/** The types this importer reads, by ggml's type id (ggml.h enum ggml_type). */
export const GGML_TYPES: Record<number, GgmlType> = {
  0: { name: "F32", blockValues: 1, blockBytes: 4, bits: 32 },
  1: { name: "F16", blockValues: 1, blockBytes: 2, bits: 16 },
  2: { name: "Q4_0", blockValues: 32, blockBytes: 18, bits: 4 },
  3: { name: "Q4_1", blockValues: 32, blockBytes: 20, bits: 4 },
  6: { name: "Q5_0", blockValues: 32, blockBytes: 22, bits: 5 },
  7: { name: "Q5_1", blockValues: 32, blockBytes: 24, bits: 5 },
  8: { name: "Q8_0", blockValues: 32, blockBytes: 34, bits: 8 },
  12: { name: "Q4_K", blockValues: 256, blockBytes: 144, bits: 4 },
  13: { name: "Q5_K", blockValues: 256, blockBytes: 176, bits: 5 },
  14: { name: "Q6_K", blockValues: 256, blockBytes: 210, bits: 6 },
  30: { name: "BF16", blockValues: 1, blockBytes: 2, bits: 16 },
};

/** ggml's names of the types it has that this importer refuses (for the message). */
const OTHER_TYPE_NAMES: Record<number, string> = {
  9: "Q8_1", 10: "Q2_K", 11: "Q3_K", 15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S", 20: "IQ4_NL",
  21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS", 24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64", 29: "IQ1_M",
  34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4",
};

export const SUPPORTED_GGML_TYPES = Object.values(GGML_TYPES).map((t) => t.name);

/** The type's description, or an error naming it. */
export function ggmlType(id: number, tensor: string): GgmlType {
  const t = GGML_TYPES[id];
  if (t) return t;
  const name = OTHER_TYPE_NAMES[id] ?? `type ${id}`;
  throw new Error(`tensor ${tensor} is ${name}, which this importer does not read (supported: ${SUPPORTED_GGML_TYPES.join(", ")})`);
}

/** Bytes of `values` values of a type (a whole number of blocks). */
export function ggmlBytes(t: GgmlType, values: number): number {
  return (values / t.blockValues) * t.blockBytes;
}

const scratchF32 = new Float32Array(1);
const scratchU32 = new Uint32Array(scratchF32.buffer);
const half = (b: Uint8Array, at: number) => fromHalfBits(b[at]! | (b[at + 1]! << 8));
const f = Math.fround;

/** K-quants' 6-bit scale and minimum of sub-block j (ggml's get_scale_min_k4). */
function scaleMinK4(j: number, s: Uint8Array, at: number): [number, number] {
  if (j < 4) return [s[at + j]! & 63, s[at + j + 4]! & 63];
  return [(s[at + j + 4]! & 0xf) | ((s[at + j - 4]! >> 6) << 4), (s[at + j + 4]! >> 4) | ((s[at + j]! >> 6) << 4)];
}

type Dequant = (b: Uint8Array, at: number, out: Float32Array, o: number) => void;

const DEQUANT: Record<string, Dequant> = {
  F32(b, at, out, o) {
    out[o] = new DataView(b.buffer, b.byteOffset + at, 4).getFloat32(0, true);
  },
  F16(b, at, out, o) {
    out[o] = half(b, at);
  },
  BF16(b, at, out, o) {
    // bfloat16 is float32's upper half.
    scratchU32[0] = (b[at]! | (b[at + 1]! << 8)) << 16;
    out[o] = scratchF32[0]!;
  },
  Q4_0(b, at, out, o) {
    const d = half(b, at);
    for (let j = 0; j < 16; j++) {
      const q = b[at + 2 + j]!;
      out[o + j] = f(((q & 0xf) - 8) * d);
      out[o + j + 16] = f(((q >> 4) - 8) * d);
    }
  },
  Q4_1(b, at, out, o) {
    const d = half(b, at);
    const m = half(b, at + 2);
    for (let j = 0; j < 16; j++) {
      const q = b[at + 4 + j]!;
      out[o + j] = f(f((q & 0xf) * d) + m);
      out[o + j + 16] = f(f((q >> 4) * d) + m);
    }
  },
  Q5_0(b, at, out, o) {
    const d = half(b, at);
    const qh = (b[at + 2]! | (b[at + 3]! << 8) | (b[at + 4]! << 16) | (b[at + 5]! << 24)) >>> 0;
    for (let j = 0; j < 16; j++) {
      const q = b[at + 6 + j]!;
      const h0 = ((qh >>> j) << 4) & 0x10;
      const h1 = (qh >>> (j + 12)) & 0x10;
      out[o + j] = f((((q & 0xf) | h0) - 16) * d);
      out[o + j + 16] = f((((q >> 4) | h1) - 16) * d);
    }
  },
  Q5_1(b, at, out, o) {
    const d = half(b, at);
    const m = half(b, at + 2);
    const qh = (b[at + 4]! | (b[at + 5]! << 8) | (b[at + 6]! << 16) | (b[at + 7]! << 24)) >>> 0;
    for (let j = 0; j < 16; j++) {
      const q = b[at + 8 + j]!;
      const h0 = ((qh >>> j) << 4) & 0x10;
      const h1 = (qh >>> (j + 12)) & 0x10;
      out[o + j] = f(f(((q & 0xf) | h0) * d) + m);
      out[o + j + 16] = f(f(((q >> 4) | h1) * d) + m);
    }
  },
  Q8_0(b, at, out, o) {
    const d = half(b, at);
    for (let j = 0; j < 32; j++) out[o + j] = f(((b[at + 2 + j]! << 24) >> 24) * d);
  },
  Q4_K(b, at, out, o) {
    const d = half(b, at);
    const min = half(b, at + 2);
    const q = at + 16;
    for (let j = 0, is = 0; j < 256; j += 64, is += 2) {
      const [sc1, m1] = scaleMinK4(is, b, at + 4);
      const [sc2, m2] = scaleMinK4(is + 1, b, at + 4);
      const [d1, n1, d2, n2] = [f(d * sc1), f(min * m1), f(d * sc2), f(min * m2)];
      const qa = q + j / 2;
      for (let l = 0; l < 32; l++) {
        out[o + j + l] = f(f(d1 * (b[qa + l]! & 0xf)) - n1);
        out[o + j + 32 + l] = f(f(d2 * (b[qa + l]! >> 4)) - n2);
      }
    }
  },
  Q5_K(b, at, out, o) {
    const d = half(b, at);
    const min = half(b, at + 2);
    const qh = at + 16;
    const ql = at + 48;
    for (let j = 0, is = 0, u1 = 1, u2 = 2; j < 256; j += 64, is += 2, u1 <<= 2, u2 <<= 2) {
      const [sc1, m1] = scaleMinK4(is, b, at + 4);
      const [sc2, m2] = scaleMinK4(is + 1, b, at + 4);
      const [d1, n1, d2, n2] = [f(d * sc1), f(min * m1), f(d * sc2), f(min * m2)];
      const qa = ql + j / 2;
      for (let l = 0; l < 32; l++) {
        out[o + j + l] = f(f(d1 * ((b[qa + l]! & 0xf) + (b[qh + l]! & u1 ? 16 : 0))) - n1);
        out[o + j + 32 + l] = f(f(d2 * ((b[qa + l]! >> 4) + (b[qh + l]! & u2 ? 16 : 0))) - n2);
      }
    }
  },
  Q6_K(b, at, out, o) {
    const d = half(b, at + 208);
    for (let n = 0; n < 2; n++) {
      const ql = at + 64 * n;
      const qh = at + 128 + 32 * n;
      const sc = at + 192 + 8 * n;
      const y = o + 128 * n;
      const s = (i: number) => (b[sc + i]! << 24) >> 24;
      for (let l = 0; l < 32; l++) {
        const is = l >> 4;
        const h = b[qh + l]!;
        const q1 = ((b[ql + l]! & 0xf) | ((h & 3) << 4)) - 32;
        const q2 = ((b[ql + l + 32]! & 0xf) | (((h >> 2) & 3) << 4)) - 32;
        const q3 = ((b[ql + l]! >> 4) | (((h >> 4) & 3) << 4)) - 32;
        const q4 = ((b[ql + l + 32]! >> 4) | (((h >> 6) & 3) << 4)) - 32;
        out[y + l] = f(f(d * s(is)) * q1);
        out[y + l + 32] = f(f(d * s(is + 2)) * q2);
        out[y + l + 64] = f(f(d * s(is + 4)) * q3);
        out[y + l + 96] = f(f(d * s(is + 6)) * q4);
      }
    }
  },
};

/**
 * Dequantises `bytes` (whole blocks of type `t`) into `out` from index `offset` on; returns the
 * number of values written.
 */
export function dequantize(t: GgmlType, bytes: Uint8Array, out: Float32Array, offset = 0): number {
  const fn = DEQUANT[t.name]!;
  const blocks = bytes.length / t.blockBytes;
  if (!Number.isInteger(blocks)) throw new Error(`${t.name}: ${bytes.length} bytes is not a whole number of ${t.blockBytes}-byte blocks`);
  if (t.name === "F32") {
    // Plain float32: one copy instead of a call per value.
    out.set(new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length)), offset);
    return blocks;
  }
  if (t.name === "F16" && bytes.byteOffset % 2 === 0) {
    halfToFloat32Into(new Uint16Array(bytes.buffer, bytes.byteOffset, blocks), out, offset);
    return blocks;
  }
  for (let i = 0; i < blocks; i++) fn(bytes, i * t.blockBytes, out, offset + i * t.blockValues);
  return blocks * t.blockValues;
}

/** Types whose blocks keep their codes in MatMulNBits (toQ4Rows). */
export const Q4_DIRECT_TYPES = new Set(["Q4_0", "Q4_1", "Q4_K"]);

/**
 * `rows` rows of `k` values of a Q4_0, Q4_1 or Q4_K tensor as MatMulNBits blocks of 32, with no
 * round trip through float: the codes are kept and only their order within a block changes
 * (ggml puts value j and j + 16 in one byte, MatMulNBits values 2i and 2i + 1). Q4_0 is
 * (q - 8) * d: zero point 8, scale d. Q4_1 is q * d + m, and Q4_K's 32-value sub-blocks are
 * q * (d * sc) - dmin * m: zero point 0, and the minimum becomes the block's `offsets` entry,
 * which the graph adds as the block sums of the input times the offsets (see graph.ts).
 */
export function toQ4Rows(t: GgmlType, bytes: Uint8Array, rows: number, k: number): Q4Matrix {
  if (k % Q4_BLOCK !== 0) throw new Error(`${t.name}: rows of ${k} values are not whole blocks`);
  const blocks = k / Q4_BLOCK;
  const zpRow = Math.ceil(blocks / 2);
  const data = new Uint8Array(rows * blocks * (Q4_BLOCK / 2));
  const scales = new Float32Array(rows * blocks);
  const zeroPoints = new Uint8Array(rows * zpRow).fill(t.name === "Q4_0" ? 0x88 : 0);
  const offsets = t.name === "Q4_0" ? undefined : new Float32Array(rows * blocks);
  // One 32-value block of codes from 16 ggml bytes at `q`: `lowFirst` as Q4_0 (j low, j+16 high),
  // or Q4_K's sub-block halves (all low nibbles, or all high nibbles, of 32 bytes).
  const put = (block: number, code: (i: number) => number) => {
    const at = block * (Q4_BLOCK / 2);
    for (let i = 0; i < Q4_BLOCK / 2; i++) data[at + i] = code(2 * i) | (code(2 * i + 1) << 4);
  };
  const n = rows * blocks;
  if (t.name === "Q4_0" || t.name === "Q4_1") {
    const head = t.name === "Q4_0" ? 2 : 4;
    for (let blk = 0; blk < n; blk++) {
      const at = blk * t.blockBytes;
      scales[blk] = half(bytes, at);
      if (offsets) offsets[blk] = half(bytes, at + 2);
      put(blk, (e) => (e < 16 ? bytes[at + head + e]! & 0xf : bytes[at + head + e - 16]! >> 4));
    }
  } else {
    for (let sb = 0; sb < n / 8; sb++) {
      const at = sb * t.blockBytes;
      const d = half(bytes, at);
      const min = half(bytes, at + 2);
      for (let s = 0; s < 8; s++) {
        const [sc, m] = scaleMinK4(s, bytes, at + 4);
        const blk = sb * 8 + s;
        scales[blk] = f(d * sc);
        offsets![blk] = -f(min * m);
        const q = at + 16 + 32 * (s >> 1);
        put(blk, s & 1 ? (e) => bytes[q + e]! >> 4 : (e) => bytes[q + e]! & 0xf);
      }
    }
  }
  return { k, n: rows, blocks, data, scales, zeroPoints, ...(offsets ? { offsets } : {}) };
}
