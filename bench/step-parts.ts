// One decode step of a 4-bit import taken apart, against its fp32 import's step, in one process:
// the graphs the engine runs (prepared as the engine prepares them), the q4 graph's MatMulNBits
// nodes alone, and the q4 graph with those nodes replaced by a row of zeros (everything else:
// attention, norms, rotary, the embedding). Every graph runs one decode step of one row from the
// same feeds, through ONNX Runtime's own InferenceSession with its default threads, in rounds
// whose order rotates; medians of every run.
//
// The two parts alone are each as cheap as they can be (their data hot, nothing between them),
// so their sum bounds from below what a q4 step of this graph costs with these kernels, before
// the engine, the sampler and HTTP add anything: fp32 step / (sum) is the most a q4 step can be
// faster than the fp32 one here.
import { readFileSync } from "node:fs";
import { dirname } from "node:path";
import * as ort from "onnxruntime-node";
import { onnx } from "onnx-proto";
import { NodeDecoder } from "../src/engine/runtime/node-decoder.ts";
import { declaresSharedBuffer, locateModelFiles } from "../src/engine/runtime/decoder-spec.ts";
import { LOGITS_START_INPUT } from "../src/engine/runtime/last-logits.ts";
import { prepareDecoderGraph } from "../src/engine/runtime/load-graph.ts";
import { median, percentile, rotated } from "./report.ts";
import { decodeFeeds } from "./stories.ts";

const attr = (n: onnx.INodeProto, k: string) => Number(n.attribute!.find((a) => a.name === k)!.i);
const info = (name: string, dims: number[]) =>
  onnx.ValueInfoProto.create({ name, type: { tensorType: { elemType: onnx.TensorProto.DataType.FLOAT, shape: { dim: dims.map((d) => ({ dimValue: d })) } } } });

/** The graph's MatMulNBits nodes alone: the same weights and attributes, each fed a row of its K. */
function matMulNBitsOnly(model: onnx.ModelProto): { model: onnx.ModelProto; nodes: number; bytes: number; inputs: number[] } {
  const g = model.graph!;
  const nb = g.node!.filter((n) => n.opType === "MatMulNBits");
  const ks = [...new Set(nb.map((n) => attr(n, "K")))];
  const used = new Set(nb.flatMap((n) => n.input!.slice(1)));
  const graph = onnx.GraphProto.create({
    name: "matmulnbits_only",
    node: nb.map((n, i) => onnx.NodeProto.create({ ...n, input: [`x${attr(n, "K")}`, ...n.input!.slice(1)], output: [`y${i}`] })),
    initializer: g.initializer!.filter((t) => used.has(t.name!)),
    input: ks.map((k) => info(`x${k}`, [1, 1, k])),
    output: nb.map((n, i) => info(`y${i}`, [1, 1, attr(n, "N")])),
  });
  const bytes = graph.initializer!.reduce((n, t) => n + Number(t.externalData?.find((e) => e.key === "length")?.value ?? t.rawData?.length ?? 0), 0);
  return { model: onnx.ModelProto.create({ ...model, graph }), nodes: nb.length, bytes, inputs: ks };
}

/**
 * The graph with each MatMulNBits node replaced by its input's first column times a row of N
 * zeros: the same shapes downstream (and finite values), none of the 4-bit products.
 */
function withoutMatMulNBits(bytes: Uint8Array): Uint8Array {
  const model = onnx.ModelProto.decode(bytes);
  const g = model.graph!;
  const i64 = (name: string, v: number) => onnx.TensorProto.create({ name, dataType: onnx.TensorProto.DataType.INT64, dims: [1], int64Data: [v] });
  const extra = [i64("parts_start", 0), i64("parts_end", 1), i64("parts_axis", -1)];
  const zeros = new Set<number>();
  g.node = g.node!.flatMap((n) => {
    if (n.opType !== "MatMulNBits") return [n];
    const N = attr(n, "N");
    if (!zeros.has(N)) {
      zeros.add(N);
      extra.push(onnx.TensorProto.create({ name: `parts_zeros_${N}`, dataType: onnx.TensorProto.DataType.FLOAT, dims: [N], rawData: new Uint8Array(4 * N) }));
    }
    const column = `${n.output![0]}_parts_column`;
    return [
      onnx.NodeProto.create({ opType: "Slice", input: [n.input![0]!, "parts_start", "parts_end", "parts_axis"], output: [column] }),
      onnx.NodeProto.create({ opType: "Mul", input: [column, `parts_zeros_${N}`], output: [n.output![0]!] }),
    ];
  });
  g.initializer = [...g.initializer!, ...extra];
  return onnx.ModelProto.encode(model).finish();
}

export interface StepParts {
  capacity: number;
  positions: number;
  /** Rounds, and each graph's runs per round (untimed, then timed). */
  rounds: number;
  warmRuns: number;
  timedRuns: number;
  /** Median ms of one run of each graph. */
  ms: {
    fp32: number;
    q4: number;
    q4OneToken: number;
    matMulNBits: number;
    rest: number;
    restOneToken: number;
  };
  /** The middle half of each graph's runs, ms: how far its time moved within the measurement. */
  quartiles: Record<keyof StepParts["ms"], [number, number]>;
  matMulNBitsNodes: number;
  /** Bytes of the MatMulNBits nodes' weights, scales and zero points as stored. */
  matMulNBitsBytes: number;
}

interface Part {
  /** A new session of the part's graph (one is alive at a time: see stepParts). */
  open(): Promise<ort.InferenceSession>;
  feeds: Record<string, ort.Tensor>;
  fetches: string[] | undefined;
}

function sessionOptions(onnxPath: string): ort.InferenceSession.SessionOptions {
  return {
    graphOptimizationLevel: "all",
    interOpNumThreads: 1,
    extra: { session: { model_external_initializers_file_folder_path: dirname(onnxPath) } },
  };
}

/** One decode step's graphs of a directory as the engine prepares them, with their feeds. */
async function decodeGraphs(dir: string, capacity: number, positions: number) {
  const decoder = await NodeDecoder.create(dir, { providers: ["cpu"], threads: 0 });
  try {
    const files = locateModelFiles(dir);
    const feeds = await decodeFeeds(decoder, 1, capacity, positions);
    const prepared = prepareDecoderGraph(files.onnxPath, decoder.spec.logits, declaresSharedBuffer(files), { oneToken: true });
    if (!prepared.bytes || !prepared.oneTokenBytes || !decoder.stepKv) throw new Error(`${dir}: not a graph the engine rewrites for its own KV cache`);
    const fetches = [decoder.spec.logits, decoder.stepKv.output];
    const part = (bytes: Uint8Array): Part => {
      const own = { ...feeds };
      // The engine's graphs compute the logits of the positions it asks for (last-logits.ts).
      own[LOGITS_START_INPUT] = new ort.Tensor("int64", BigInt64Array.from([-1n]), [1]);
      return {
        open: async () => {
          const session = await ort.InferenceSession.create(bytes, sessionOptions(files.onnxPath));
          if (!session.inputNames.includes(LOGITS_START_INPUT)) delete own[LOGITS_START_INPUT];
          return session;
        },
        feeds: own,
        fetches,
      };
    };
    return { files, prepared, part };
  } finally {
    await decoder.release();
  }
}

const WARM_RUNS = 10;
const TIMED_RUNS = 30;

/**
 * Each part in turn, in an order that rotates each round: a session of it is made, run
 * WARM_RUNS times untimed and TIMED_RUNS timed, and released before the next. Only one session lives at a time because
 * each has its own thread pool, whose thread spins for a while after a run: with several alive,
 * a session ran at times with a core taken by another's spinning (the fp32 step read 18.9 ms in
 * such a run, against 8.2 ms in the engine).
 */
export async function stepParts(q4Dir: string, fp32Dir: string, capacity = 128, positions = 100, rounds = 10): Promise<StepParts> {
  const q4 = await decodeGraphs(q4Dir, capacity, positions);
  const fp32 = await decodeGraphs(fp32Dir, capacity, positions);
  const only = matMulNBitsOnly(onnx.ModelProto.decode(readFileSync(q4.files.onnxPath)));
  const onlyBytes = onnx.ModelProto.encode(only.model).finish();
  const parts: Record<keyof StepParts["ms"], Part> = {
    fp32: fp32.part(fp32.prepared.bytes!),
    q4: q4.part(q4.prepared.bytes!),
    q4OneToken: q4.part(q4.prepared.oneTokenBytes!),
    matMulNBits: {
      open: () => ort.InferenceSession.create(onlyBytes, sessionOptions(q4.files.onnxPath)),
      feeds: Object.fromEntries(only.inputs.map((k) => [`x${k}`, new ort.Tensor("float32", new Float32Array(k).fill(0.1), [1, 1, k])])),
      fetches: undefined,
    },
    rest: q4.part(withoutMatMulNBits(q4.prepared.bytes!)),
    restOneToken: q4.part(withoutMatMulNBits(q4.prepared.oneTokenBytes!)),
  };
  const names = Object.keys(parts) as (keyof StepParts["ms"])[];
  const times = Object.fromEntries(names.map((n) => [n, [] as number[]])) as Record<keyof StepParts["ms"], number[]>;
  for (let round = 0; round < rounds; round++) {
    for (const n of rotated(names, round)) {
      const part = parts[n];
      const session = await part.open();
      try {
        const run = () => (part.fetches ? session.run(part.feeds, part.fetches) : session.run(part.feeds));
        for (let i = 0; i < WARM_RUNS; i++) await run();
        for (let i = 0; i < TIMED_RUNS; i++) {
          const t = performance.now();
          await run();
          times[n].push(performance.now() - t);
        }
      } finally {
        await session.release();
      }
    }
  }
  return {
    capacity,
    positions,
    rounds,
    warmRuns: WARM_RUNS,
    timedRuns: TIMED_RUNS,
    ms: Object.fromEntries(names.map((n) => [n, median(times[n])])) as StepParts["ms"],
    quartiles: Object.fromEntries(names.map((n) => [n, [percentile(times[n], 25), percentile(times[n], 75)]])) as StepParts["quartiles"],
    matMulNBitsNodes: only.nodes,
    matMulNBitsBytes: only.bytes,
  };
}
