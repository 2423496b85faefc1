// The decoder graph as the engine runs it: the directory's ONNX file with load-time rewrites that
// change no result, only what is computed and copied (see each module).
import { readFileSync } from "node:fs";
import { onnx } from "onnx-proto";
import { trimLogitsToLastPosition } from "./last-logits.ts";
import { takeLengthsAsInputs } from "./lengths-input.ts";
import { float16ProductsInFloat32 } from "./half-products.ts";
import { splitAttention } from "./split-attention.ts";
import { addStepKvOutputs, type StepKvOutputs } from "./step-kv-outputs.ts";

export interface PreparedGraph {
  /** The rewritten model; null when no rewrite applied (the file is loaded as it is). */
  bytes: Uint8Array | null;
  /** Step outputs of a shared-buffer decoder; null for the standard contract, or when not asked for. */
  step: StepKvOutputs | null;
  /**
   * The same decoder for runs of one token per row (see splitAttention's `oneToken`), with the
   * same inputs and outputs; null when not asked for or when the attention was not split.
   */
  oneTokenBytes: Uint8Array | null;
  /** The general graph's logits are trimmed, with LOGITS_START_INPUT to ask for more positions. */
  trimmedLogits: boolean;
  /** GroupQueryAttention's lengths are inputs of their own (see lengths-input.ts). */
  lengthsInput: boolean;
  /** The attention is canonical-attention.ts's (asked for with `invariant`, and the graph took it). */
  invariant: boolean;
  /**
   * The graph has products whose kernel computes a run of one row otherwise than a row among
   * several (see ROW_SENSITIVE_OPS): a batch-invariant run must give them two rows or more.
   */
  rowSensitive: boolean;
  /** Float16 weight products computed in float32 for batch invariance (half-products.ts). */
  halfProducts: number;
}

/**
 * Operators whose CPU kernel takes another path for a product of one row (M = 1) than for several,
 * with other bits in each row: MatMulNBits measured so (docs/BENCHMARKS.md, "Batch invariance"),
 * and the other quantised products and Gemm, whose weights may not be prepacked, by the same
 * structure of their kernels. A float32 MatMul of prepacked weights gives every row the same bits
 * whatever M is (measured too), so float32 models need no second row. A float16 decoder's products
 * give other bits by the number of rows (ONNX Runtime 1.29.0): half-products.ts computes them in float32.
 */
const ROW_SENSITIVE_OPS = new Set(["MatMulNBits", "MatMulBnb4", "MatMulFpQ4", "MatMulInteger", "MatMulIntegerToFloat", "DynamicQuantizeMatMul", "QGemm", "Gemm"]);


export interface GraphChoices {
  /** Also a one-token graph for decode steps (small models; only where the attention is split). */
  oneToken?: boolean;
  /**
   * Step outputs for a shared-buffer graph (the engine writes each run's new positions into its
   * cache); false leaves GroupQueryAttention to write them into the buffer bound as past and
   * present. Default true.
   */
  stepOutputs?: boolean;
  /**
   * Rewrite GroupQueryAttention as attention around the cache (split-attention.ts) where it can
   * be; false keeps the exported attention (step outputs then gathered from its presents).
   * Default true.
   */
  split?: boolean;
  /** Replace the attention mask by per-row lengths where the graph only reduces it to them. */
  lengthsInput?: boolean;
  /** The attention mask's input name, for lengthsInput. */
  mask?: string;
  /**
   * The attention rewritten as canonical-attention.ts builds it (float16 caches too), so that a
   * position's result does not depend on the run it is computed in (`serve --batch-invariant`).
   */
  invariant?: boolean;
}

/**
 * `sharedBuffer`: the graph's past and present share one buffer (GroupQueryAttention), so the
 * engine keeps the cache and takes each run's new positions from step outputs (or, without them,
 * lets the attention write them in place).
 */
export function prepareDecoderGraph(onnxPath: string, logits: string, sharedBuffer: boolean, choices: GraphChoices = {}): PreparedGraph {
  const file = readFileSync(onnxPath);
  const model = onnx.ModelProto.decode(file);
  const mask = choices.mask ?? "attention_mask";
  // The general graph also serves verification runs, which read several positions' logits.
  const trimmed = trimLogitsToLastPosition(model, logits, true);
  const lengthsInput = sharedBuffer && choices.lengthsInput === true && takeLengthsAsInputs(model, mask);
  const split = choices.split !== false;
  const invariant = choices.invariant === true;
  const step = sharedBuffer && choices.stepOutputs !== false ? ((split || invariant ? splitAttention(model, false, invariant) : null) ?? addStepKvOutputs(model)) : null;
  const halfProducts = invariant && step?.kind === "split" ? float16ProductsInFloat32(model) : 0;
  const rowSensitive = (model.graph?.node ?? []).some((n) => ROW_SENSITIVE_OPS.has(n.opType ?? ""));
  let oneTokenBytes: Uint8Array | null = null;
  if (choices.oneToken && step?.kind === "split") {
    const decode = onnx.ModelProto.decode(file);
    trimLogitsToLastPosition(decode, logits);
    if (lengthsInput) takeLengthsAsInputs(decode, mask);
    splitAttention(decode, true, invariant);
    if (halfProducts) float16ProductsInFloat32(decode);
    oneTokenBytes = onnx.ModelProto.encode(decode).finish();
  }
  // Encoding a model with inline weights copies them all: only when something changed.
  const changed = trimmed || step !== null || lengthsInput || halfProducts > 0;
  return {
    bytes: changed ? onnx.ModelProto.encode(model).finish() : null,
    step,
    oneTokenBytes,
    trimmedLogits: trimmed,
    lengthsInput,
    invariant: invariant && step?.kind === "split",
    rowSensitive,
    halfProducts,
  };
}
