// serve --batch-invariant (issue 42): why a request's greedy output depended on what else was
// served, and what making it the request's own costs.
//   1. The mechanism (bench/invariance-mechanism.ts): one product at a time, each row against the
//      same row alone and in a run of 64 (MatMulNBits at accuracy levels 0 and 4, float MatMul,
//      float32 and float16 activations, 1 and 2 threads); the operations the canonical attention
//      is built from and those it avoids; and whole decoders driven through the KV cache's runs
//      (batches, prompt chunks, verification, prefix restores, recomputes), without the option and
//      with it. These are counts of bits, the same on any load.
//   2. The cost: decode speed through the HTTP API at 1 and 16 streams and the time to the first
//      token of a long prompt, each model served twice side by side (today's default and
//      --batch-invariant), measured in turn, the order rotating every round; medians.
//
//   bun bench/batch-invariance.ts [--part mechanism|cost|all] [--rounds 5] [--tokens 128] [--quick]
import ortPkg from "onnxruntime-node/package.json";
import { existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import OpenAI from "openai";
import { keepOrtTelemetryOff } from "../src/engine/runtime/ort-telemetry.ts";
import { buildSyntheticModel, type HfImportDType, importHfCheckpoint, importLlama2c, type SyntheticSpec } from "../src/modelkit/index.ts";
import { importedSyntheticModel, syntheticModel } from "../test/helpers/models.ts";
import { writeStoriesHfCheckpoint } from "../test/modelkit/hf-fixtures.ts";
import { attentionBlocks, engineRows, PRODUCT_MS, productRows } from "./invariance-mechanism.ts";
import { machine, median, rotated, table, writeSection } from "./report.ts";
import { freshClients, startServerProcess, type ServerProcess } from "./server-process.ts";
import { streamChat, tpot } from "./stream-chat.ts";

keepOrtTelemetryOff();
const { values } = parseArgs({
  options: {
    part: { type: "string", default: "all" },
    rounds: { type: "string", default: "5" },
    tokens: { type: "string", default: "128" },
    quick: { type: "boolean" },
  },
});
const ROUNDS = values.quick ? 1 : Number(values.rounds);
const TOKENS = values.quick ? 32 : Number(values.tokens);
const STREAMS = 16;
const ROOT = resolve(import.meta.dir, "../.cache/bench-invariance");
const STORIES = resolve(import.meta.dir, "../../shared/models/stories260k");
const hasStories = existsSync(join(STORIES, "stories260K.bin"));
const today = () => new Date().toISOString().slice(0, 10);
const fmt = (n: number, digits = 0) => n.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits });

interface Model {
  label: string;
  dir: string;
  id: string;
}

/** stories260K imported as an operator would: fused fp32 by the llama2.c importer, the others from its HF checkpoint. */
async function stories(dtype: "fp32" | HfImportDType): Promise<Model> {
  const id = `bench/stories260k-${dtype}`;
  const dir = join(ROOT, `stories260k-${dtype}`);
  if (!existsSync(join(dir, "sluice.json"))) {
    if (dtype === "fp32") await importLlama2c(join(STORIES, "stories260K.bin"), join(STORIES, "tok512.bin"), { id, outDir: dir, variant: "fused" });
    else {
      const ckpt = mkdtempSync(join(tmpdir(), "sluice-bench-stories-"));
      try {
        writeStoriesHfCheckpoint(STORIES, ckpt);
        await importHfCheckpoint({ dir: ckpt, out: dir, id, dtype });
      } finally {
        rmSync(ckpt, { recursive: true, force: true });
      }
    }
  }
  return { label: `stories260K ${dtype}`, dir, id };
}

/** A synthetic preset, fused: built in float, or imported from its checkpoint in 4 bits (test/helpers/models.ts). */
async function synthetic(preset: "tiny-bytes" | "bench-50m", label: string, dtype: HfImportDType): Promise<Model> {
  const id = `bench/${preset}-${dtype}`;
  const spec: SyntheticSpec = { preset, id, seed: 1, variant: "fused" };
  const links = join(ROOT, "links");
  mkdirSync(links, { recursive: true });
  rmSync(join(links, id.replace("/", "-")), { force: true });
  const dir =
    dtype === "q4" || dtype === "q4f16"
      ? await importedSyntheticModel(links, id.replace("/", "-"), spec, dtype)
      : await syntheticModel(ROOT, `${preset}-${dtype}`, { ...spec, dtype: dtype === "fp16" ? "float16" : "float32" });
  return { label: `${label} ${dtype}`, dir, id };
}

async function mechanism(): Promise<string> {
  const products = await productRows(512, 512);
  const productTable = table(
    ["activations", "product", "threads", ...PRODUCT_MS.map((m) => `M = ${m}: rows ≠ alone`), ...PRODUCT_MS.filter((m) => m < 64).map((m) => `M = ${m}: rows ≠ in 64`)],
    products.map((r) => [r.activations, r.op, r.threads, ...PRODUCT_MS.map((m) => `${r.vsAlone.get(m)}/${m}`), ...PRODUCT_MS.filter((m) => m < 64).map((m) => `${r.vsMany.get(m)}/${m}`)]),
  );
  const blocks = await attentionBlocks();
  const blockTable = table(["operation", "the same bits?"], blocks.map((b) => [b.what, b.same ? "yes" : "**no**"]));
  const models = [
    await synthetic("tiny-bytes", "tiny-bytes", "fp32"),
    await synthetic("tiny-bytes", "tiny-bytes", "fp16"),
    await synthetic("tiny-bytes", "tiny-bytes", "q4"),
    await synthetic("tiny-bytes", "tiny-bytes", "q4f16"),
    ...(hasStories ? [await stories("q4")] : []),
    await synthetic("bench-50m", "synthetic ~50M", "q4"),
  ];
  const engine = await engineRows(models);
  const scenarios = Object.keys(engine[0]!.today);
  const engineTable = table(
    ["scenario (steps whose logits differ from the sequence alone)", ...engine.map((e) => e.label)],
    [
      ...scenarios.map((s) => [s, ...engine.map((e) => `${e.today[s]!.differing}/${e.today[s]!.steps}`)]),
      ["**with --batch-invariant**: any scenario, also over a 180-position prompt", ...engine.map((e) => `${e.invariant}`)],
    ],
  );
  return `Written by \`bun bench/batch-invariance.ts --part mechanism\` on ${today()}. Machine: ${machine()}, ONNX Runtime ${ortPkg.version} (onnxruntime-node). Counts of bits: the same on any load.

**One product.** x [M, 512] · W [512, 512], each of 64 rows of x computed in runs of M rows, against the same row computed alone (M = 1) and in a run of all 64; 4-bit weights in blocks of 32 (MatMulNBits; accuracy_level 4 quantises activations to int8 per block, the model kit's default for q4), the same weights in float (MatMul, prepacked by ONNX Runtime). MatMulNBits takes another kernel for one row: every row computed among others differs from itself alone (fp16 activations round part of it away), while all runs of two rows or more agree with each other whatever M and the threads. The float product gives every row the same bits for any M:

${productTable}

**The attention's operations.** The split attention the engine loads (runtime/split-attention.ts) computes a query's scores over the cache buffer and its run's new tokens, one Softmax over both, and two products with the values. Its result for a position depends on which of its keys are new in the run (a decode step has one, a verification run or a prompt chunk several: the sum is cut elsewhere), on the buffer's capacity (where the new keys land in the softmax's vector lanes) and on the products' shapes. The canonical attention (runtime/canonical-attention.ts) uses only what keeps a row's bits:

${blockTable}

**Whole decoders** (as serve loads them: the C API, the model's own threads; 4-bit models imported from a checkpoint by \`models import hf\`). One sequence decoded greedily alone, its prompt in one run, is the reference; the same tokens fed through the KV cache's other runs give logits that differ from the reference's, step by step, in these counts today: a 4-bit model's steps among other rows differ from its lone steps (the one-row kernel above), and the split attention's verification runs, prompt chunks and recomputes differ from single steps (the fp16 model is not split: it runs GroupQueryAttention as exported, whose own one-row product its float16 outputs round away at these sizes; a prefix-cache restore copies bits). With \`--batch-invariant\` no step differs, in any scenario:

${engineTable}
`;
}

interface Sample {
  /** One stream's decode rate, tokens/s. */
  single: number;
  /** 16 streams' tokens over the time from the first request to the last token. */
  batched: number;
  /** Time to the first token of a long prompt, ms. */
  ttft: number;
}

const LONG_PROMPT = Array.from({ length: 60 }, (_, i) => ["the", "little", "cat", "saw", "a", "big", "dog", "in", "the", "park"][i % 10]).join(" ");

async function measure(model: Model, next: () => Promise<OpenAI>, eos: number[]): Promise<Sample> {
  const logitBias = Object.fromEntries(eos.map((e) => [e, -100]));
  const one = await streamChat(await next(), model.id, "Once upon a time", TOKENS, { logitBias });
  const clients = await Promise.all(Array.from({ length: STREAMS }, () => next()));
  const t0 = performance.now();
  const many = await Promise.all(clients.map((c, i) => streamChat(c, model.id, `Once upon a time (${i})`, TOKENS, { logitBias })));
  const wall = performance.now() - t0;
  const long = await streamChat(await next(), model.id, LONG_PROMPT, 1, { logitBias });
  return { single: 1000 / tpot(one), batched: (many.reduce((n, r) => n + r.tokens, 0) / wall) * 1000, ttft: long.ttft };
}

const MODES = { today: [] as string[], invariant: ["--batch-invariant"] };
type Mode = keyof typeof MODES;

async function cost(): Promise<string> {
  const models = [
    ...(hasStories ? [await stories("fp32"), await stories("q4")] : []),
    await synthetic("bench-50m", "synthetic ~50M", "fp32"),
    await synthetic("bench-50m", "synthetic ~50M", "q4"),
  ];
  const rows: (string | number)[][] = [];
  const load: number[] = [];
  for (const model of models) {
    const dir = mkdtempSync(join(tmpdir(), "sluice-bench-invariance-"));
    symlinkSync(model.dir, join(dir, "model"));
    const servers = new Map<Mode, ServerProcess>();
    try {
      for (const mode of Object.keys(MODES) as Mode[]) servers.set(mode, await startServerProcess(dir, MODES[mode]));
      // Every request from an account of its own: an account's earlier answers would be drafts.
      const clients = new Map([...servers].map(([mode, s]) => [mode, freshClients(s, `bench-${mode}`)]));
      const eos = [((await Bun.file(join(model.dir, "generation_config.json")).json()) as { eos_token_id: number | number[] }).eos_token_id].flat();
      // Untimed: the models' first requests, and the JIT's tiering of each server's per-token code.
      for (const mode of servers.keys()) await measure(model, clients.get(mode)!, eos);
      const samples = new Map<Mode, Sample[]>([...servers.keys()].map((m) => [m, []]));
      for (let round = 0; round < ROUNDS; round++) {
        for (const mode of rotated([...servers.keys()], round)) {
          load.push(loadavg()[0]!);
          samples.get(mode)!.push(await measure(model, clients.get(mode)!, eos));
        }
        console.error(`${model.label}: round ${round + 1}/${ROUNDS}`);
      }
      const med = (mode: Mode, k: keyof Sample) => median(samples.get(mode)!.map((s) => s[k]));
      const ratio = (k: keyof Sample) => med("invariant", k) / med("today", k);
      rows.push([
        model.label,
        fmt(med("today", "single"), 1),
        fmt(med("invariant", "single"), 1),
        `${ratio("single").toFixed(2)}×`,
        fmt(med("today", "batched"), 1),
        fmt(med("invariant", "batched"), 1),
        `${ratio("batched").toFixed(2)}×`,
        fmt(med("today", "ttft"), 1),
        fmt(med("invariant", "ttft"), 1),
        `${ratio("ttft").toFixed(2)}×`,
      ]);
    } finally {
      for (const s of servers.values()) await s.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  }
  const header = [
    "model",
    "1 stream tok/s, today",
    "--batch-invariant",
    "ratio",
    `${STREAMS} streams tok/s, today`,
    "--batch-invariant",
    "ratio",
    "TTFT of a 60-word prompt, ms, today",
    "--batch-invariant",
    "ratio (time)",
  ];
  return `Written by \`bun bench/batch-invariance.ts --part cost\` (${ROUNDS} rounds of ${TOKENS} tokens per stream, medians) on ${today()}. Machine: ${machine()}; 1-minute load average during the runs: median ${fmt(median(load), 1)}, ${fmt(Math.min(...load), 1)} to ${fmt(Math.max(...load), 1)} (two cores shared with other work: compare the ratios of one round, not milliseconds across sections).

Each model served by two \`sluice serve\` processes side by side, the defaults (speculation on, the C API) and the same with \`--batch-invariant\`; greedy, the end of text banned, every request from an account of its own. Each round runs one stream, then ${STREAMS} at once, then one request with a 60-word prompt and one token (its time to the first token is mostly reading the prompt), on each server in turn, the order rotating. What the option costs: on a 4-bit model, a lone sequence's runs compute a second row (MatMulNBits' one-row kernel is also its fastest); on every model, the canonical attention's operations (about twice the split attention's nodes per layer, which a small model's step is mostly made of), and a model without the one-token decode graph (over 16 MiB of weights) decodes through the general graph's block gathering:

${table(header, rows)}
`;
}

const part = values.part;
if (part === "mechanism" || part === "all") {
  const body = await mechanism();
  console.log(body);
  if (!values.quick) writeSection("Batch invariance: the mechanism (bench/batch-invariance.ts)", body);
}
if (part === "cost" || part === "all") {
  const body = await cost();
  console.log(body);
  if (!values.quick) writeSection("Batch invariance: the cost (bench/batch-invariance.ts)", body);
}
// The models' ONNX Runtime sessions keep threads alive.
process.exit(0);
