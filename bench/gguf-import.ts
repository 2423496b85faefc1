// GGUF imports: the ~50M model's shape (bench-50m: 9 layers, hidden 512, vocab 32,000) with random
// weights, written as GGUF files the way llama.cpp's quantize types them (test/modelkit/
// gguf-fixtures.ts, with the tests' block packers): F16, Q8_0, a Q4_K_M-style mix (Q4_K, with
// attn_v and ffn_down in Q6_K) and Q4_0. Each is imported with `sluice models import gguf`
// (dtype auto, and q4 from F16) in a process of its own (bench/hf-import-child.ts, which reports
// its own peak RSS): wall time, peak resident set, and the bytes written. The import streams:
// a layer's matrices at a time, the embedding a block of rows at a time.
//
//   bun bench/gguf-import.ts
import { existsSync, mkdirSync, readdirSync, rmSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import type { LlamaConfig } from "../src/modelkit/llama/config.ts";
import { randomWeights } from "../src/modelkit/llama/random.ts";
import { T } from "../test/helpers/gguf-writer.ts";
import { spmTokenizer, writeGgufModel } from "../test/modelkit/gguf-fixtures.ts";
import { machine, table, writeSection } from "./report.ts";

const REPO = resolve(import.meta.dir, "..");
const ROOT = join(REPO, ".cache", "bench-gguf");
mkdirSync(ROOT, { recursive: true });

const config = (layers: number): LlamaConfig => ({
  modelType: "llama",
  hiddenSize: 512,
  intermediateSize: 2048,
  numLayers: layers,
  numHeads: 8,
  numKvHeads: 4,
  headDim: 64,
  vocabSize: 32000,
  maxPositionEmbeddings: 2048,
  rmsNormEps: 1e-5,
  ropeTheta: 10000,
  tieWordEmbeddings: true,
  qkNorm: false,
  bosTokenId: 1,
  eosTokenId: 2,
});

const FILES: { name: string; layers: number; typeOf: (n: string) => number }[] = [
  { name: "one-layer-F16", layers: 1, typeOf: () => T.F16 },
  { name: "bench-50m-F16", layers: 9, typeOf: () => T.F16 },
  { name: "eighteen-layer-F16", layers: 18, typeOf: () => T.F16 },
  { name: "bench-50m-Q8_0", layers: 9, typeOf: () => T.Q8_0 },
  { name: "bench-50m-Q4_K_M", layers: 9, typeOf: (n) => (/attn_v|ffn_down/.test(n) ? T.Q6_K : T.Q4_K) },
  { name: "bench-50m-Q4_0", layers: 9, typeOf: () => T.Q4_0 },
];

function fileOf(f: (typeof FILES)[number]): string {
  const path = join(ROOT, `${f.name}.gguf`);
  if (existsSync(path)) return path;
  const c = config(f.layers);
  console.error(`writing ${path}`);
  writeGgufModel(path, { arch: "llama", config: c, weights: randomWeights(c, 1), typeOf: f.typeOf, tokenizer: spmTokenizer(c.vocabSize) });
  return path;
}

function dirBytes(dir: string): number {
  let n = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) n += e.isDirectory() ? dirBytes(join(dir, e.name)) : statSync(join(dir, e.name)).size;
  return n;
}

async function cliImport(file: string, dtype: string): Promise<{ seconds: number; peakMiB: number; outMB: number; chose: string }> {
  const out = join(ROOT, "out");
  rmSync(out, { recursive: true, force: true });
  const t0 = performance.now();
  const p = Bun.spawn([process.execPath, join(import.meta.dir, "hf-import-child.ts"), "models", "import", "gguf", file, "--id", "bench/gguf", "--out", out, "--dtype", dtype, "--device", "cpu"], {
    cwd: REPO,
    stdout: "pipe",
    stderr: "pipe",
  });
  const [stdout, stderr] = [await new Response(p.stdout).text(), await new Response(p.stderr).text()];
  if ((await p.exited) !== 0) throw new Error(`import failed: ${stderr}`);
  const seconds = (performance.now() - t0) / 1000;
  const report = JSON.parse(stdout.trim().split("\n").at(-1)!) as { maxRssKiB: number };
  const chose = /writing (\w+)$/m.exec(stderr)?.[1] ?? dtype;
  const outMB = dirBytes(out) / 1e6;
  rmSync(out, { recursive: true, force: true });
  return { seconds, peakMiB: report.maxRssKiB / 1024, outMB, chose };
}

const rows: (string | number)[][] = [];
const byName = (n: string) => FILES.find((f) => f.name === n)!;
const runs: [string, string][] = [
  ["one-layer-F16", "auto"],
  ["bench-50m-F16", "auto"],
  ["eighteen-layer-F16", "auto"],
  ["bench-50m-F16", "q4"],
  ["bench-50m-Q8_0", "auto"],
  ["bench-50m-Q4_K_M", "auto"],
  ["bench-50m-Q4_0", "auto"],
];
for (const [name, dtype] of runs) {
  const f = byName(name);
  const path = fileOf(f);
  const r = await cliImport(path, dtype);
  rows.push([f.name, f.layers, (statSync(path).size / 1e6).toFixed(1), dtype === "auto" ? `auto: ${r.chose}` : r.chose, r.seconds.toFixed(2), r.peakMiB.toFixed(0), r.outMB.toFixed(1)]);
  console.error(rows.at(-1)!.join(" | "));
}

const body = `Written by \`bun bench/gguf-import.ts\` on ${new Date().toISOString().slice(0, 10)}, ${machine()}.

\`sluice models import gguf FILE\` on GGUF files of the ~50M model's shape (9 layers, hidden 512, intermediate 2048,
vocab 32,000, tied embedding; random weights written in each type by the tests' block packers), one
import per process, that process's own peak resident set (VmHWM). The same shape with 1, 9 and 18
layers shows what grows with the model: the wall time, not the peak, which stays near the
process's own footprint (Bun, ONNX Runtime's bindings, the 32,000-token tokenizer) plus a layer in
float32 (17 MB here) and a block of 2,048 embedding rows; the collector's timing moves it by some
MiB either way. Q4_0 and Q4_K blocks go to MatMulNBits as they are; Q6_K, Q8_0 and F16 are
dequantised to float32 a tensor at a time.

${table(["file", "layers", "file MB", "dtype", "wall s", "peak RSS MiB", "written MB"], rows)}
`;
console.log(body);
writeSection("GGUF import", body);
