// Exports compute logits for every position of a run, [batch, tokens, vocab], but generation only
// ever reads each row's last position. For a prompt chunk of a few hundred tokens that is the
// largest matrix product of the run (tokens × hidden × vocab: gigaflops at a 151k vocabulary),
// and the binding then copies all of it into JavaScript. This rewrite takes the last position of
// the hidden states before the output projection, so the logits are [batch, 1, vocab].
//
// Right-padded batches put each row's last token at its own position, which is why only runs
// where every row ends at the last column may use this: a prompt chunk (one row), a decode step
// (one token per row), and left-padded standard batches.
//
// The projection is a MatMul by a constant, or ONNX Runtime's MatMulNBits (block-quantised
// weights, as onnxruntime-genai's int4 CPU exports have their lm_head): both act on each position
// alone.
//
// Verifying speculated tokens needs the logits of several trailing positions of a run: the
// general graph takes the slice's start as an input, [-1] for the last position. (An initializer
// that is also an input would make it optional, but ONNX Runtime warns about that at every load.)
import type { onnx } from "onnx-proto";
import { INT64, int64Constant, node } from "./graph-edit.ts";

/** The input of a trimmed general graph: [-n] returns the logits of the last n positions of each row. */
export const LOGITS_START_INPUT = "sluice_logits_start";

/** Operators between the projection and the logits output that act on each position alone. */
const PER_POSITION = new Set(["Identity", "Cast", "Tanh"]);
const PER_POSITION_WITH_CONSTANT = new Set(["Add", "Sub", "Mul", "Div"]);

/** A MatMul by a constant, or a MatMulNBits whose weights, scales and other inputs are constants. */
function isProjection(n: onnx.INodeProto, constant: (name: string) => boolean): boolean {
  const rest = (n.input ?? []).slice(1);
  if (n.opType === "MatMul" && (!n.domain || n.domain === "ai.onnx")) return rest.length === 1 && !!rest[0] && constant(rest[0]);
  if (n.opType === "MatMulNBits" && n.domain === "com.microsoft") return rest.length >= 2 && rest.every((x) => x === "" || constant(x));
  return false;
}

/**
 * Moves the logits' last-position selection before the output projection. Returns false (and
 * changes nothing) when the graph does not end in a recognisable projection.
 */
export function trimLogitsToLastPosition(model: onnx.IModelProto, logits: string, positionsInput = false): boolean {
  const graph = model.graph;
  if (!graph?.node) return false;
  const rank = graph.output?.find((o) => o.name === logits)?.type?.tensorType?.shape?.dim?.length;
  if (rank !== 3) return false;
  const producer = new Map<string, onnx.INodeProto>();
  for (const n of graph.node) for (const o of n.output ?? []) producer.set(o, n);
  const initializers = new Set((graph.initializer ?? []).map((t) => t.name ?? ""));
  const constant = (name: string, depth = 0): boolean => {
    if (initializers.has(name)) return true;
    const p = producer.get(name);
    if (!p || depth > 4) return false;
    return p.opType === "Constant" || (p.input ?? []).every((x) => x === "" || constant(x, depth + 1));
  };

  let current = producer.get(logits);
  while (current) {
    const op = current.opType ?? "";
    const inputs = current.input ?? [];
    if (PER_POSITION.has(op)) current = producer.get(inputs[0] ?? "");
    else if (PER_POSITION_WITH_CONSTANT.has(op) && inputs.length === 2 && constant(inputs[1]!)) current = producer.get(inputs[0]!);
    else break;
  }
  if (!current || !current.input?.[0] || !isProjection(current, constant)) return false;

  const hidden = current.input[0];
  const p = "sluice_last";
  const start = positionsInput ? LOGITS_START_INPUT : `${p}_start`;
  const added = [
    ...(positionsInput ? [] : [int64Constant(start, [-1], [1])]),
    int64Constant(`${p}_end`, [2 ** 62], [1]),
    int64Constant(`${p}_axis`, [1], [1]),
    node("Slice", [hidden, start, `${p}_end`, `${p}_axis`], [`${p}_hidden`]),
  ];
  if (positionsInput) graph.input = [...(graph.input ?? []), { name: start, type: { tensorType: { elemType: INT64, shape: { dim: [{ dimValue: 1 }] } } } }];
  current.input[0] = `${p}_hidden`;
  graph.node.splice(graph.node.indexOf(current), 0, ...added);
  return true;
}
