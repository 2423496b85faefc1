// Every ggml tensor type the GGUF importer reads, in files the test writes: blocks packed from
// chosen codes and scales following ggml's block layouts (test/helpers/gguf-writer.ts), each value
// expected from the format's definition (q * d + m and the like, computed here), never from the
// importer's code. Then the 4-bit blocks handed to MatMulNBits as they are: the same values.
import { afterAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { GgufFile } from "../../src/modelkit/gguf/file.ts";
import { toQ4Rows } from "../../src/modelkit/gguf/ggml.ts";
import { dequantizeQ4 } from "../../src/modelkit/quant/q4.ts";
import { BLOCK_VALUES, half, halfValue, packBlock, T, writeGguf } from "../helpers/gguf-writer.ts";
import { tempDir } from "../helpers/paths.ts";

const dir = tempDir("gguf-types-");
afterAll(() => dir.remove());

/** A small deterministic generator (xorshift32), so every run checks the same blocks. */
function rng(seed: number) {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s / 2 ** 32;
  };
}

const ROWS = 3;
const K = 512;

interface Case {
  bytes: Uint8Array;
  values: number[];
}

/** ROWS x K values of a quantised type: random codes and scales, packed block by block. */
function quantCase(type: number, seed: number): Case {
  const r = rng(seed);
  const int = (lo: number, hi: number) => lo + Math.floor(r() * (hi - lo + 1));
  const n = BLOCK_VALUES[type]!;
  const parts: Uint8Array[] = [];
  const values: number[] = [];
  for (let b = 0; b < (ROWS * K) / n; b++) {
    const d = (r() - 0.3) * 0.05;
    const m = (r() - 0.5) * 0.2;
    const block =
      type === T.Q4_0 || type === T.Q4_1
        ? packBlock(type, { d, m, L: Array.from({ length: 32 }, () => int(0, 15)) })
        : type === T.Q5_0 || type === T.Q5_1
          ? packBlock(type, { d, m, L: Array.from({ length: 32 }, () => int(0, 31)) })
          : type === T.Q8_0
            ? packBlock(type, { d, L: Array.from({ length: 32 }, () => int(-128, 127)) })
            : type === T.Q6_K
              ? packBlock(type, { d, sc: Array.from({ length: 16 }, () => int(-128, 127)), L: Array.from({ length: 256 }, () => int(0, 63)) })
              : packBlock(type, {
                  d: Math.abs(d),
                  m: Math.abs(m),
                  sc: Array.from({ length: 8 }, () => int(0, 63)),
                  mins: Array.from({ length: 8 }, () => int(0, 63)),
                  L: Array.from({ length: 256 }, () => int(0, type === T.Q4_K ? 15 : 31)),
                });
    parts.push(block.bytes);
    values.push(...block.values);
  }
  const bytes = new Uint8Array(parts.reduce((s, p) => s + p.length, 0));
  let at = 0;
  for (const p of parts) {
    bytes.set(p, at);
    at += p.length;
  }
  return { bytes, values };
}

/** Float types: values chosen, stored as the type's bits (F16 halves, BF16 float32's upper halves). */
function floatCase(type: number, seed: number): Case {
  const r = rng(seed);
  const raw = Array.from({ length: ROWS * K }, () => (r() - 0.5) * 8);
  if (type === T.F32) {
    const f = Float32Array.from(raw);
    return { bytes: new Uint8Array(f.buffer), values: [...f] };
  }
  if (type === T.F16) {
    const h = Uint16Array.from(raw, half);
    return { bytes: new Uint8Array(h.buffer), values: raw.map(halfValue) };
  }
  // bfloat16: keep the top 16 bits of float32 (truncation: the value is exactly representable).
  const f = Float32Array.from(raw);
  const u = new Uint32Array(f.buffer);
  const bits = Uint16Array.from(u, (x) => x >>> 16);
  const values = [...Uint32Array.from(bits, (b) => b << 16)].map((x) => new Float32Array(new Uint32Array([x]).buffer)[0]!);
  return { bytes: new Uint8Array(bits.buffer), values };
}

const TYPES: [string, number][] = [
  ["F32", T.F32],
  ["F16", T.F16],
  ["BF16", T.BF16],
  ["Q8_0", T.Q8_0],
  ["Q4_0", T.Q4_0],
  ["Q4_1", T.Q4_1],
  ["Q5_0", T.Q5_0],
  ["Q5_1", T.Q5_1],
  ["Q4_K", T.Q4_K],
  ["Q5_K", T.Q5_K],
  ["Q6_K", T.Q6_K],
];

function close(got: ArrayLike<number>, want: number[]): void {
  expect(got.length).toBe(want.length);
  let worst = 0;
  for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i]! - want[i]!) / (Math.abs(want[i]!) + 1e-6));
  // float32 rounding of the format's products only.
  expect(worst).toBeLessThan(1e-5);
}

describe("ggml tensor types, dequantised as their blocks define them", () => {
  for (const [name, type] of TYPES) {
    test(name, async () => {
      const c = type === T.F32 || type === T.F16 || type === T.BF16 ? floatCase(type, type + 1) : quantCase(type, type + 1);
      const path = join(dir.path, `${name}.gguf`);
      writeGguf(path, { "general.architecture": "llama" }, [{ name: "w", dims: [K, ROWS], type, bytes: c.bytes }]);
      const f = await GgufFile.open(path);
      try {
        const t = f.tensor("w")!;
        expect(t.type.name).toBe(name);
        close(f.readFloat32(t), c.values);
        // A part of the rows alone (the importer streams embedding tables this way).
        close(f.readFloat32(t, 1, 2), c.values.slice(K, 3 * K));
      } finally {
        f.close();
      }
    });
  }
});

describe("Q4_0, Q4_1 and Q4_K blocks as MatMulNBits blocks (codes kept)", () => {
  for (const [name, type] of TYPES.filter(([n]) => ["Q4_0", "Q4_1", "Q4_K"].includes(n))) {
    test(name, () => {
      const c = quantCase(type, type + 7);
      const q = toQ4Rows({ name, blockValues: BLOCK_VALUES[type]!, blockBytes: c.bytes.length / ((ROWS * K) / BLOCK_VALUES[type]!), bits: 4 }, c.bytes, ROWS, K);
      expect(q.n).toBe(ROWS);
      expect(q.k).toBe(K);
      expect(q.offsets !== undefined).toBe(name !== "Q4_0");
      // dequantizeQ4 gives W [k, n]: column r is row r of the tensor.
      const w = dequantizeQ4(q);
      const rows: number[] = [];
      for (let r = 0; r < ROWS; r++) for (let k = 0; k < K; k++) rows.push(w[k * ROWS + r]!);
      close(rows, c.values);
    });
  }
});
