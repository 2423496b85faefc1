// Loading a decoder, the same whichever binding runs it: which files, how many threads, the
// load-time graph rewrites (and running the graph as exported when they fail), and what the
// loaded graph's inputs and outputs say.
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { onnxFileName } from "../../onnx-dtypes.ts";
import { declaresSharedBuffer, decoderSpec, locateModelFiles, type DecoderSpec, type ModelFiles, type TensorInfo } from "./decoder-spec.ts";
import { intraOpThreads, isSmallModel, type BatchInvariance, type SessionOptions, type StepKvLayout } from "./decoder.ts";
import { prepareDecoderGraph, type GraphChoices } from "./load-graph.ts";
import type { StepBlocks, StepKvOutputs } from "./step-kv-outputs.ts";

export interface DecoderFiles {
  files: ModelFiles;
  /** Small enough for one thread and a one-token graph (see isSmallModel). */
  small: boolean;
  threads: number;
  logits: string;
  /** Where a graph loaded from memory finds its external weights. */
  weightsDir: string;
}

export function decoderFiles(dir: string, opts: SessionOptions): DecoderFiles {
  const files = locateModelFiles(dir);
  const small = isSmallModel(files.onnxPath);
  return {
    files,
    small,
    threads: intraOpThreads(opts.threads, small),
    logits: files.genai?.model?.decoder?.outputs?.logits ?? "logits",
    weightsDir: dirname(files.onnxPath),
  };
}

export interface LoadedSessions<S> {
  session: S;
  /** The one-token graph's session, when made. */
  oneToken: S | null;
  step: StepKvOutputs | null;
  trimmedLogits: boolean;
  notes: string[];
  /** What the loaded graph needs to keep a request's output its own (see Decoder.invariance); null when not asked or not possible. */
  invariance: BatchInvariance | null;
}

/** The notes for `serve --batch-invariant` on a graph the canonical attention does not take, or a decoder writing its cache in place. */
const NOT_IN_PLACE =
  "--batch-invariant needs the attention rewritten around the cache, as the CPU provider runs it; this decoder lets GroupQueryAttention write its cache in place (CUDA): its output may depend on the requests batched with it";
const NOT_INVARIANT =
  "--batch-invariant does not apply to this graph (its attention is not GroupQueryAttention the engine can rewrite): its output may depend on the requests batched with it";

/**
 * Opens the decoder's sessions with `choices` of rewrites. `open` loads a model's bytes (with its
 * external weights in `weightsDir`) or, given a path, the file as it is.
 */
export async function loadSessions<S>(
  d: DecoderFiles,
  choices: GraphChoices,
  open: (model: string | Uint8Array) => Promise<S>,
  release: (s: S) => Promise<void> | void,
): Promise<LoadedSessions<S>> {
  const notes: string[] = [];
  let oneToken: S | null = null;
  try {
    const graph = prepareDecoderGraph(d.files.onnxPath, d.logits, declaresSharedBuffer(d.files), { oneToken: d.small, ...choices });
    const session = await open(graph.bytes ?? d.files.onnxPath);
    if (graph.oneTokenBytes) oneToken = await open(graph.oneTokenBytes);
    if (oneToken) notes.push("decode steps run a one-token graph (attention reshaped, not transposed: fewer nodes)");
    const dims = graph.step?.headDims;
    if (dims) notes.push(`heads of ${dims.used} dimensions, not the ${dims.exported} they were padded to for GroupQueryAttention's kernel (the padding's weights are zero)`);
    let invariance: BatchInvariance | null = null;
    if (graph.invariant) {
      invariance = { pairRows: graph.rowSensitive };
      notes.push(`batch-invariant: canonical attention${graph.rowSensitive ? ", and every run computes two rows or more of its 4-bit products" : ""}${graph.halfProducts ? `, and its ${graph.halfProducts} float16 weight products in float32` : ""}`);
    } else if (choices.invariant) notes.push(choices.stepOutputs === false ? NOT_IN_PLACE : NOT_INVARIANT);
    return { session, oneToken, step: graph.step, trimmedLogits: graph.trimmedLogits, notes, invariance };
  } catch (e) {
    // The rewrites only save work; an export they do not fit still runs as it is.
    notes.push(`the load-time graph rewrites failed (${(e as Error).message.split("\n")[0]}); running the graph as exported`);
    if (choices.invariant) notes.push(NOT_INVARIANT);
    if (oneToken) await release(oneToken);
    return { session: await open(d.files.onnxPath), oneToken: null, step: null, trimmedLogits: false, notes, invariance: null };
  }
}

/** The spec of the loaded graph, and where its step outputs are (null unless every layer has them). */
export function describeDecoder(files: ModelFiles, inputs: TensorInfo[], outputs: TensorInfo[], step: StepKvOutputs | null): { spec: DecoderSpec; stepKv: StepKvLayout | null } {
  const spec = decoderSpec(files, inputs, outputs, step ? new Set(step.blocks.keys()) : undefined);
  const blocks = step ? spec.layers.map((l) => step.blocks.get(l.pastKey)) : [];
  const stepKv = step && blocks.every((b) => b !== undefined) ? { output: step.packed, blocks: blocks as StepBlocks[], valueBlock: step.valueBlock ?? null } : null;
  return { spec, stepKv };
}

/** The embed_tokens graph of a split (vision-language) export, for a decoder that takes inputs_embeds; null otherwise. */
export function embedderPath(dir: string, d: DecoderFiles, spec: DecoderSpec): string | null {
  if (!spec.inputsEmbeds) return null;
  const path = join(d.weightsDir, onnxFileName("embed_tokens", d.files.dtype));
  if (!existsSync(path)) throw new Error(`the decoder takes ${spec.inputsEmbeds} but there is no ${path.slice(dir.length + 1)}`);
  return path;
}
