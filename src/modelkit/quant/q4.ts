// 4-bit block quantisation in the layout of ONNX Runtime's MatMulNBits (com.microsoft), and its
// inverse. For a MatMul weight W [K, N] (y = x W), each output column n is cut along K into blocks
// of BLOCK values; a block keeps a float scale and a 4-bit zero point, and its values become
// codes q in [0, 15] with W[k, n] ≈ (q - zero_point) * scale:
//
//   B            uint8 [N, blocks, BLOCK / 2]  two codes a byte, the even k in the low nibble
//   scales       float [N * blocks]            column n's blocks one after another
//   zero_points  uint8 [N * ceil(blocks / 2)]  two a byte (even block low), each column padded
//
// A last block shorter than BLOCK (K not a multiple of it) is padded with zeros, whose code is the
// zero point. The range and rounding follow ONNX Runtime's own quantiser (MLAS's blockwise
// quantiser, asymmetric): the block's [min, max] widened to include 0, scale = (max - min) / 15,
// zero point = round(-min / scale), code = clamp(round(v / scale + zero point), 0, 15), in float32.
// An embedding table [vocab, hidden] quantised along hidden has exactly these bytes with vocab as
// N, so GatherBlockQuantized can read a tied output head's weights.

export const Q4_BLOCK = 32;
const MAX_CODE = 15;

export interface Q4Matrix {
  /** Rows of the MatMul weight (the reduced dimension) and its columns (outputs). */
  k: number;
  n: number;
  /** ceil(k / Q4_BLOCK). */
  blocks: number;
  /** [n, blocks, Q4_BLOCK / 2]. */
  data: Uint8Array;
  /** [n * blocks]. */
  scales: Float32Array;
  /** [n * ceil(blocks / 2)]. */
  zeroPoints: Uint8Array;
  /**
   * [n * blocks], optional: a value added to every weight of the block, for formats whose blocks
   * are q * scale + min (GGUF's Q4_1 and Q4_K) and whose codes are kept as they are. MatMulNBits
   * has no such term; the graph adds it as the input's block sums times these offsets.
   */
  offsets?: Float32Array;
}

export function q4Blocks(k: number): number {
  return Math.ceil(k / Q4_BLOCK);
}

/** C's roundf: halves away from zero. */
function roundHalfAway(x: number): number {
  return x < 0 ? -Math.floor(-x + 0.5) : Math.floor(x + 0.5);
}

/**
 * Quantises `n` vectors of length `k` held one after another (row-major [n, k]: torch's
 * nn.Linear weight [out, in], or an embedding table [vocab, hidden]).
 */
export function quantizeQ4Rows(m: Float32Array, n: number, k: number): Q4Matrix {
  if (m.length !== n * k) throw new Error(`q4: expected ${n * k} values, got ${m.length}`);
  const blocks = q4Blocks(k);
  const half = Q4_BLOCK / 2;
  const zpPerRow = Math.ceil(blocks / 2);
  const data = new Uint8Array(n * blocks * half);
  const scales = new Float32Array(n * blocks);
  const zeroPoints = new Uint8Array(n * zpPerRow);
  const codes = new Uint8Array(Q4_BLOCK);
  for (let r = 0; r < n; r++) {
    const row = r * k;
    for (let b = 0; b < blocks; b++) {
      const start = b * Q4_BLOCK;
      const end = Math.min(start + Q4_BLOCK, k);
      let min = 0;
      let max = 0;
      for (let i = start; i < end; i++) {
        const v = m[row + i]!;
        if (v < min) min = v;
        if (v > max) max = v;
      }
      const scale = Math.fround((max - min) / MAX_CODE);
      let zp = scale !== 0 ? Math.fround(-min / scale) : min;
      zp = zp < 0 ? 0 : zp > MAX_CODE ? MAX_CODE : roundHalfAway(zp);
      const inv = scale !== 0 ? Math.fround(1 / scale) : 0;
      codes.fill(zp);
      for (let i = start; i < end; i++) {
        const q = roundHalfAway(Math.fround(Math.fround(m[row + i]! * inv) + zp));
        codes[i - start] = q < 0 ? 0 : q > MAX_CODE ? MAX_CODE : q;
      }
      const at = (r * blocks + b) * half;
      for (let j = 0; j < half; j++) data[at + j] = codes[2 * j]! | (codes[2 * j + 1]! << 4);
      scales[r * blocks + b] = scale;
      zeroPoints[r * zpPerRow + (b >> 1)] |= b & 1 ? zp << 4 : zp;
    }
  }
  return { k, n, blocks, data, scales, zeroPoints };
}

/** Quantises a MatMul weight W [k, n] (row-major): each column is one quantised vector. */
export function quantizeQ4(w: Float32Array, k: number, n: number): Q4Matrix {
  if (w.length !== n * k) throw new Error(`q4: expected ${n * k} values, got ${w.length}`);
  const cols = new Float32Array(n * k);
  for (let r = 0; r < k; r++) {
    const base = r * n;
    for (let c = 0; c < n; c++) cols[c * k + r] = w[base + c]!;
  }
  return quantizeQ4Rows(cols, n, k);
}

/** The float weight W [k, n] that a Q4Matrix stands for: (code - zero point) * scale. */
export function dequantizeQ4(q: Q4Matrix): Float32Array {
  const out = new Float32Array(q.k * q.n);
  const half = Q4_BLOCK / 2;
  const zpPerRow = Math.ceil(q.blocks / 2);
  for (let c = 0; c < q.n; c++) {
    for (let b = 0; b < q.blocks; b++) {
      const scale = q.scales[c * q.blocks + b]!;
      const zpByte = q.zeroPoints[c * zpPerRow + (b >> 1)]!;
      const zp = b & 1 ? zpByte >> 4 : zpByte & 15;
      for (let i = 0; i < Q4_BLOCK; i++) {
        const k = b * Q4_BLOCK + i;
        if (k >= q.k) break;
        const byte = q.data[(c * q.blocks + b) * half + (i >> 1)]!;
        const code = i & 1 ? byte >> 4 : byte & 15;
        const v = Math.fround((code - zp) * scale);
        out[k * q.n + c] = q.offsets ? Math.fround(v + q.offsets[c * q.blocks + b]!) : v;
      }
    }
  }
  return out;
}

/**
 * A matrix whose columns are those of `parts` picked by `columns`: [part, column] pairs, or null
 * for a zero column (code = zero point, scale 0). Concatenation and the fused graph's head padding
 * (graph.ts padColumns) in the quantised layout, without a round trip through float.
 */
export function selectQ4Columns(parts: Q4Matrix[], columns: ([number, number] | null)[]): Q4Matrix {
  const { k, blocks } = parts[0]!;
  for (const p of parts) if (p.k !== k) throw new Error(`q4: cannot join columns of ${p.k} and ${k} rows`);
  const withOffsets = parts.some((p) => p.offsets);
  const half = Q4_BLOCK / 2;
  const zpRow = Math.ceil(blocks / 2);
  const n = columns.length;
  const out: Q4Matrix = {
    k,
    n,
    blocks,
    data: new Uint8Array(n * blocks * half).fill(0x88),
    scales: new Float32Array(n * blocks),
    zeroPoints: new Uint8Array(n * zpRow).fill(0x88),
    ...(withOffsets ? { offsets: new Float32Array(n * blocks) } : {}),
  };
  columns.forEach((src, c) => {
    if (!src) return;
    const p = parts[src[0]]!;
    const j = src[1];
    out.data.set(p.data.subarray(j * blocks * half, (j + 1) * blocks * half), c * blocks * half);
    out.scales.set(p.scales.subarray(j * blocks, (j + 1) * blocks), c * blocks);
    out.zeroPoints.set(p.zeroPoints.subarray(j * zpRow, (j + 1) * zpRow), c * zpRow);
    if (p.offsets) out.offsets!.set(p.offsets.subarray(j * blocks, (j + 1) * blocks), c * blocks);
  });
  return out;
}
