// stories260K for the benchmarks that measure ONNX Runtime's step directly: the fused export in
// .cache/bench-models, and a decode step's feeds over cached keys and values.
import { existsSync } from "node:fs";
import { join } from "node:path";
import type * as ort from "onnxruntime-node";
import type { NodeDecoder } from "../src/engine/runtime/node-decoder.ts";
import { floatTensor } from "../src/engine/runtime/tensors.ts";
import { importLlama2c } from "../src/modelkit/index.ts";

export const STORIES = join(import.meta.dir, "..", "..", "shared", "models", "stories260k");
const FUSED_DIR = join(import.meta.dir, "..", ".cache", "bench-models", "stories260k-fused");

/** The fused export's directory, imported on first use; null (with a warning) without stories260K. */
export async function storiesFused(): Promise<string | null> {
  if (!existsSync(join(STORIES, "stories260K.bin"))) {
    console.warn(`stories260K absent at ${STORIES}: nothing to measure`);
    return null;
  }
  if (!existsSync(join(FUSED_DIR, "sluice.json"))) {
    await importLlama2c(join(STORIES, "stories260K.bin"), join(STORIES, "tok512.bin"), { id: "bench/stories260k-fused", outDir: FUSED_DIR, variant: "fused" });
  }
  return FUSED_DIR;
}

/** Deterministic values that are not zero: zero pages would all map to one physical page. */
export function filler(size: number, seed: number): Float32Array {
  return Float32Array.from({ length: size }, (_, j) => (((j + seed) * 2654435761) % 1000) / 5000 - 0.1);
}

/** A decode step's feeds: one new token per row after `positions` cached ones, in pools of `capacity`. */
export async function decodeFeeds(decoder: NodeDecoder, rows: number, capacity: number, positions: number): Promise<Record<string, ort.Tensor>> {
  const { spec } = decoder;
  const width = positions + 1;
  const feeds = await decoder.feeds({
    batch: rows,
    width: 1,
    ids: Array.from({ length: rows }, (_, r) => 5 + r),
    mask: new Uint8Array(rows * width).fill(1),
    maskWidth: width,
    lengths: new Array<number>(rows).fill(width),
    positions: new Array<number>(rows).fill(positions),
  });
  const size = rows * spec.kvHeads * capacity * spec.headDim;
  spec.layers.forEach((l, i) => {
    feeds[l.pastKey] = floatTensor("float32", filler(size, 2 * i), [rows, spec.kvHeads, capacity, spec.headDim]);
    feeds[l.pastValue] = floatTensor("float32", filler(size, 2 * i + 1), [rows, spec.kvHeads, capacity, spec.headDim]);
  });
  return feeds;
}
