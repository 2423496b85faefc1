// Float16 weight products computed in float32, for `serve --batch-invariant` on the CPU. Under ONNX
// Runtime 1.29.0 a float16 decoder's products, as its graph optimiser leaves them, give a row other
// bits by how many rows run with it: a tiny fp16 model's greedy logits differed from step 16 at
// row 2 of a batch of four, and in a verification run of two rows of three, and a second row in
// every run did not help. (A bare float16 MatMul measured row-invariant: docs/BENCHMARKS.md, "Batch
// invariance: the mechanism"; it is what the optimiser makes of them in the decoder that is not.)
// The float32 products are row-invariant in the decoder too. So each MatMul of a float16 weight
// becomes Cast(A) × Cast(W) in float32, cast back to float16: the float16 activation and weight
// are exact in float32, and the product is rounded to float16 once, per row. ONNX Runtime folds
// Cast(W) of an initializer into a float32 initializer when the session is optimised, so the
// weights are cast once at load (twice their float16 memory), not at every run.
import type { onnx } from "onnx-proto";
import { FLOAT, node } from "./graph-edit.ts";

const FLOAT16 = 10;

/** Rewrites the graph's MatMuls of float16 initializers in place; returns how many. */
export function float16ProductsInFloat32(model: onnx.IModelProto): number {
  const graph = model.graph;
  if (!graph?.node) return 0;
  const half = new Set((graph.initializer ?? []).filter((t) => t.dataType === FLOAT16).map((t) => t.name!));
  const out: onnx.INodeProto[] = [];
  let count = 0;
  for (const n of graph.node) {
    const inputs = n.input ?? [];
    if (n.opType !== "MatMul" || (n.domain ?? "") !== "" || inputs.length !== 2 || !inputs.some((x) => half.has(x))) {
      out.push(n);
      continue;
    }
    const p = `${n.name || n.output![0]}_f32`;
    const [a, b] = inputs as [string, string];
    out.push(
      node("Cast", [a], [`${p}_a`], { to: FLOAT }),
      node("Cast", [b], [`${p}_b`], { to: FLOAT }),
      node("MatMul", [`${p}_a`, `${p}_b`], [`${p}_y`]),
      node("Cast", [`${p}_y`], [n.output![0]!], { to: FLOAT16 }),
    );
    count++;
  }
  graph.node = out;
  return count;
}
