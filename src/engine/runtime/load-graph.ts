// The decoder graph as the engine runs it: the directory's ONNX file with load-time rewrites that
// change no result, only what is computed and copied (see each module).
import { readFileSync } from "node:fs";
import { onnx } from "onnx-proto";
import { trimLogitsToLastPosition } from "./last-logits.ts";
import { splitAttention } from "./split-attention.ts";
import { addStepKvOutputs, type StepKvOutputs } from "./step-kv-outputs.ts";

export interface PreparedGraph {
  /** The rewritten model; null when no rewrite applied (the file is loaded as it is). */
  bytes: Uint8Array | null;
  /** Step outputs of a shared-buffer decoder; null for the standard contract. */
  step: StepKvOutputs | null;
  /**
   * The same decoder for runs of one token per row (see splitAttention's `oneToken`), with the
   * same inputs and outputs; null when not asked for or when the attention was not split.
   */
  oneTokenBytes: Uint8Array | null;
  /** The general graph's logits are trimmed, with LOGITS_START_INPUT to ask for more positions. */
  trimmedLogits: boolean;
}

/**
 * `sharedBuffer`: the graph's past and present share one buffer (GroupQueryAttention), so the
 * engine keeps the cache and takes each run's new positions from step outputs.
 */
export function prepareDecoderGraph(onnxPath: string, logits: string, sharedBuffer: boolean, oneToken = false): PreparedGraph {
  const file = readFileSync(onnxPath);
  const model = onnx.ModelProto.decode(file);
  // The general graph also serves verification runs, which read several positions' logits.
  const trimmed = trimLogitsToLastPosition(model, logits, true);
  const step = sharedBuffer ? (splitAttention(model) ?? addStepKvOutputs(model)) : null;
  let oneTokenBytes: Uint8Array | null = null;
  if (oneToken && step?.kind === "split") {
    const decode = onnx.ModelProto.decode(file);
    trimLogitsToLastPosition(decode, logits);
    splitAttention(decode, true);
    oneTokenBytes = onnx.ModelProto.encode(decode).finish();
  }
  // Encoding a model with inline weights copies them all: only when something changed.
  return { bytes: trimmed || step ? onnx.ModelProto.encode(model).finish() : null, step, oneTokenBytes, trimmedLogits: trimmed };
}
