// What makes a request's output depend on its batch, measured on ONNX Runtime's CPU kernels (the
// first part of bench/batch-invariance.ts): one operator at a time, each row's result against
// the same row computed otherwise; then whole decoders at the KV cache's level.
import * as ort from "onnxruntime-node";
import { openDecoder } from "../src/engine/decoders.ts";
import { floatTensor as ortFloat, halfBits } from "../src/engine/runtime/tensors.ts";
import { GraphBuilder, MS_DOMAIN, serializeModel } from "../src/modelkit/onnx/builder.ts";
import { float32ToHalf } from "../src/modelkit/onnx/dtype.ts";
import { floatTensor, tensor } from "../src/modelkit/onnx/tensor.ts";
import { quantizeQ4 } from "../src/modelkit/quant/q4.ts";
import { invarianceScenarios, LONG } from "../test/helpers/invariance.ts";

const OPSETS = { opsets: [{ domain: "", version: 17 }, { domain: MS_DOMAIN, version: 1 }] };

/** A fixed pseudo-random sequence in [-1, 1) (Park–Miller), the same at every run. */
function random(seed: number): () => number {
  let s = seed;
  return () => ((s = (s * 16807) % 2147483647) / 2147483647) * 2 - 1;
}

async function session(build: (g: GraphBuilder) => void, threads: number): Promise<ort.InferenceSession> {
  const g = new GraphBuilder("probe");
  build(g);
  return ort.InferenceSession.create(serializeModel(g, OPSETS).model, { intraOpNumThreads: threads, graphOptimizationLevel: "all" });
}

export interface ProductRow {
  activations: "float32" | "float16";
  op: string;
  threads: number;
  /** Per M, rows whose result differs from the same row computed alone (M = 1). */
  vsAlone: Map<number, number>;
  /** Per M, rows differing from the same row in a run of 64. */
  vsMany: Map<number, number>;
}

export const PRODUCT_MS = [2, 3, 8, 17, 64];

/**
 * One product x [M, K] · W [K, N]: MatMulNBits (4-bit blocks of 32, accuracy_level 0 and 4) and a
 * float MatMul of the same weights (prepacked by ONNX Runtime), each row of X computed in runs of M
 * rows against the same row alone and in a run of 64.
 */
export async function productRows(K: number, N: number): Promise<ProductRow[]> {
  const next = random(7);
  const W = Float32Array.from({ length: K * N }, next);
  const q = quantizeQ4(W, K, N);
  const X = Float32Array.from({ length: 64 * K }, next);
  const Xh = float32ToHalf(X);
  const rows: ProductRow[] = [];
  for (const activations of ["float32", "float16"] as const) {
    for (const op of ["MatMulNBits, accuracy_level 0", "MatMulNBits, accuracy_level 4", "MatMul (float weights)"]) {
      for (const threads of [1, 2]) {
        const s = await session((g) => {
          const x = g.input("x", activations, ["M", K]);
          let y: string;
          if (op.startsWith("MatMulNBits")) {
            const level = op.endsWith("4") ? 4 : 0;
            const data = g.initializer("w_Q4", tensor("uint8", [q.n, q.blocks, 16], q.data));
            const scales = g.initializer("w_scales", floatTensor(activations, [q.n * q.blocks], q.scales));
            const zeros = g.initializer("w_zp", tensor("uint8", [q.zeroPoints.length], q.zeroPoints));
            y = g.op("MatMulNBits", [x, data, scales, zeros], { K, N, bits: 4, block_size: 32, ...(level ? { accuracy_level: level } : {}) }, MS_DOMAIN);
          } else y = g.op("MatMul", [x, g.initializer("w", floatTensor(activations, [K, N], W))]);
          g.output("y", activations, ["M", N], y);
        }, threads);
        const run = async (from: number, M: number): Promise<ArrayLike<number>> => {
          const input = activations === "float32" ? new ort.Tensor("float32", X.slice(from * K, (from + M) * K), [M, K]) : ortFloat("float16", Xh.slice(from * K, (from + M) * K), [M, K]);
          const out = (await s.run({ x: input })).y!;
          return activations === "float16" ? halfBits(out.data) : (out.data as Float32Array);
        };
        const alone: ArrayLike<number>[] = [];
        for (let r = 0; r < 64; r++) alone.push(await run(r, 1));
        const many = await run(0, 64);
        const differing = (out: ArrayLike<number>, M: number, ref: (r: number, j: number) => number) => {
          let n = 0;
          for (let r = 0; r < M; r++) {
            for (let j = 0; j < N; j++) {
              if (out[r * N + j] !== ref(r, j)) {
                n++;
                break;
              }
            }
          }
          return n;
        };
        const vsAlone = new Map<number, number>();
        const vsMany = new Map<number, number>();
        for (const M of PRODUCT_MS) {
          const out = await run(0, M);
          vsAlone.set(M, differing(out, M, (r, j) => alone[r]![j]!));
          vsMany.set(M, differing(out, M, (r, j) => many[r * N + j]!));
        }
        rows.push({ activations, op, threads, vsAlone, vsMany });
        await s.release();
      }
    }
  }
  return rows;
}

export interface BlockRow {
  what: string;
  /** Whether every compared result had the same bits. */
  same: boolean;
}

/**
 * The operations the canonical attention is built from, and the ones it avoids: is a row's
 * result the same bits however the run around it is shaped?
 */
export async function attentionBlocks(): Promise<BlockRow[]> {
  const next = random(11);
  const out: BlockRow[] = [];
  const T = (d: Float32Array, dims: number[]) => new ort.Tensor("float32", d, dims);
  const product = (alpha: number, N: number, threads: number) =>
    session((g) => {
      const a = g.input("a", "float32", ["M", "K"]);
      const b = g.input("b", "float32", ["K", N]);
      g.output("y", "float32", ["M", N], g.op("FusedMatMul", [a, b], { alpha: { float: alpha } as never }, MS_DOMAIN));
    }, threads);
  // A row of weights over `live` positions, zero past them up to K, against values [K, N].
  const sameRows = async (alpha: number, N: number, threads: number, live: number, Ks: number[]) => {
    const s = await product(alpha, N, threads);
    const V = Float32Array.from({ length: 2048 * N }, next);
    const weights = Array.from({ length: 8 }, () => Float32Array.from({ length: live }, () => Math.abs(next())));
    const run = async (M: number, K: number) => {
      const A = new Float32Array(M * K);
      for (let m = 0; m < M; m++) A.set(weights[m]!, m * K);
      return (await s.run({ a: T(A, [M, K]), b: T(V.slice(0, K * N), [K, N]) })).y!.data as Float32Array;
    };
    const ref = await run(2, live);
    let same = true;
    for (const M of [1, 2, 3, 8]) {
      for (const K of Ks) {
        const y = await run(M, K);
        for (let j = 0; j < N; j++) if (y[j] !== ref[j]) same = false;
      }
    }
    await s.release();
    return same;
  };
  out.push({ what: "a product's row, alone (M = 1) or among 2, 3 or 8, alpha 1 (MLAS's one-row kernel for M = 1)", same: await sameRows(1, 64, 1, 64, [64]) });
  out.push({ what: "the same, alpha 0.5 (never the one-row kernel)", same: await sameRows(0.5, 64, 1, 64, [64]) });
  out.push({
    what: "a product over 700 positions, zero past them to 768, 1100 or 2048, alpha 0.5, 2 threads (MLAS cuts the reduced axis by the columns each thread got)",
    same: await sameRows(0.5, 64, 2, 700, [700, 768, 1100, 2048]),
  });
  out.push({ what: "a product over one block of 64 positions, alpha 0.5, 2 threads", same: await sameRows(0.5, 64, 2, 64, [64]) });

  // Sums over an axis with trailing zero blocks: ReduceSum against CumSum's last element.
  for (const op of ["ReduceSum", "CumSum"] as const) {
    for (const threads of [1, 2]) {
      const s = await session((g) => {
        const x = g.input("x", "float32", ["B", "NB", "D"]);
        g.output("y", "float32", op === "ReduceSum" ? ["B", "D"] : ["B", "NB", "D"], op === "ReduceSum" ? g.op("ReduceSum", [x, g.i64([1])], { keepdims: 0 }) : g.op("CumSum", [x, g.i64([1])]));
      }, threads);
      const [B, D, live] = [16, 64, 7];
      const base = Float32Array.from({ length: B * live * D }, next);
      const run = async (NB: number) => {
        const X = new Float32Array(B * NB * D);
        for (let b = 0; b < B; b++) X.set(base.subarray(b * live * D, (b + 1) * live * D), b * NB * D);
        const y = (await s.run({ x: T(X, [B, NB, D]) })).y!.data as Float32Array;
        if (op === "ReduceSum") return y;
        const last = new Float32Array(B * D);
        for (let b = 0; b < B; b++) last.set(y.subarray((b * NB + NB - 1) * D, (b * NB + NB) * D), b * D);
        return last;
      };
      const ref = await run(live);
      let same = true;
      for (const NB of [8, 9, 64]) if ((await run(NB)).some((v, i) => v !== ref[i])) same = false;
      out.push({ what: `${op === "ReduceSum" ? "ReduceSum over" : "CumSum's last element along"} an axis of 7 blocks, zero blocks after them to 8, 9 or 64, ${threads} thread${threads > 1 ? "s" : ""}`, same });
      await s.release();
    }
  }
  {
    const s = await session((g) => {
      const a = g.input("a", "float32", ["N"]);
      g.output("y", "float32", ["N"], g.op("Exp", [a]));
    }, 1);
    const X = Float32Array.from({ length: 4096 }, () => next() * 20);
    const ref = (await s.run({ a: T(X, [4096]) })).y!.data as Float32Array;
    let same = true;
    for (const [from, n] of [[0, 1], [1, 3], [7, 9], [13, 100], [3, 1000]] as const) {
      const y = (await s.run({ a: T(X.slice(from, from + n), [n]) })).y!.data as Float32Array;
      for (let i = 0; i < n; i++) if (y[i] !== ref[from + i]) same = false;
    }
    out.push({ what: "Exp of an element at any offset of a tensor of any length", same });
    await s.release();
  }
  return out;
}

/** Per scenario, steps differing from the reference without the option and with it. */
export interface EngineRow {
  label: string;
  today: Record<string, { differing: number; steps: number }>;
  /** With --batch-invariant: the most differing steps of any scenario, on the short and the 180-position prompt. */
  invariant: number;
}

/** Each model's decoder as serve loads it (the C API, its threads), through the KV cache's runs. */
export async function engineRows(models: { label: string; dir: string }[]): Promise<EngineRow[]> {
  const rows: EngineRow[] = [];
  for (const m of models) {
    const today = await openDecoder(m.dir, { providers: ["cpu"], threads: 0, binding: "capi" });
    const { results } = await invarianceScenarios(today);
    await today.release();
    const invariant = await openDecoder(m.dir, { providers: ["cpu"], threads: 0, binding: "capi", batchInvariant: true });
    const short = await invarianceScenarios(invariant);
    const long = await invarianceScenarios(invariant, LONG.slice(0, 180), 30);
    await invariant.release();
    const worst = Math.max(...[...Object.values(short.results), ...Object.values(long.results)].map((r) => r.differing));
    rows.push({ label: m.label, today: results, invariant: worst });
  }
  return rows;
}
