// Concurrency through HTTP with the openai client: 1, 4, 16 and 64 concurrent streams against
// the ~50M synthetic model (fused) and stories260K; aggregate tokens/s, time to first token and
// inter-token latency; decode time per token at context 100 vs 2,000; time to first token of a
// request sharing a 1,000-token prefix with an earlier one. Writes `## Concurrency` of
// docs/BENCHMARKS.md.  Run: bun bench/concurrency.ts [--threads N] [--quick]
import { existsSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import { buildSyntheticModel, importLlama2c } from "../src/modelkit/index.ts";
import { RunnerProcess } from "./runner-process.ts";
import { prose, streamChat, tpot, type StreamResult } from "./stream-chat.ts";
import { freshClients, startServerProcess, threadsCpu } from "./server-process.ts";
import { machine, median, percentile, table, writeSection } from "./report.ts";

const REPO = join(import.meta.dir, "..");
const ROOT = join(REPO, ".cache", "bench-concurrency");
const STORIES = join(REPO, "..", "shared", "models", "stories260k");
const args = process.argv.slice(2);
const threads = Number(args[args.indexOf("--threads") + 1] ?? 0) || 0;
const quick = args.includes("--quick");
const LEVELS = quick ? [1, 4, 16] : [1, 4, 16, 64];
const CONTEXT_ROUNDS = quick ? 2 : 5;
/**
 * Rounds per level: a round of one stream is over in a fraction of a second, and its median is
 * the denominator of every ratio, so the small levels run more rounds.
 */
const levelRounds = (streams: number) => (quick ? 1 : streams === 1 ? 9 : streams === 64 ? 3 : 5);

/** The models measured: their ids and directories, built or imported when absent. */
async function models(): Promise<{ id: string; dir: string }[]> {
  const ids: { id: string; dir: string }[] = [];
  const big = join(ROOT, "models", "bench-50m");
  if (!existsSync(join(big, "sluice.json"))) await buildSyntheticModel(big, { preset: "bench-50m", variant: "fused", id: "bench/50m" });
  ids.push({ id: "bench/50m", dir: big });
  if (existsSync(join(STORIES, "stories260K.bin"))) {
    const dir = join(ROOT, "models", "stories260k");
    if (!existsSync(join(dir, "sluice.json"))) {
      await importLlama2c(join(STORIES, "stories260K.bin"), join(STORIES, "tok512.bin"), { id: "stories260k", outDir: dir, variant: "fused", dtype: "float32" });
    }
    ids.push({ id: "stories260k", dir });
  } else console.warn("stories260K is absent; measuring the synthetic model only");
  return ids;
}

/** CPU nanoseconds per thread group of the server process (from /proc's schedstat), and the client's. */
interface CpuSample {
  worker: number;
  http: number;
  other: number;
  client: number;
}

function cpuSample(pid: number): CpuSample {
  const s: CpuSample = { worker: 0, http: 0, other: 0, client: 0 };
  for (const t of threadsCpu(pid)) {
    // Model workers are Bun Worker threads; ONNX Runtime's pool threads start from them and keep the name.
    if (t.tid === pid) s.http += t.cpuNs;
    else if (t.name === "Worker") s.worker += t.cpuNs;
    else s.other += t.cpuNs;
  }
  const c = process.cpuUsage();
  s.client = (c.user + c.system) * 1000;
  return s;
}

const cpuPerToken = (a: CpuSample, b: CpuSample, tokens: number) => ({
  worker: (b.worker - a.worker) / 1000 / tokens,
  http: (b.http - a.http) / 1000 / tokens,
  other: (b.other - a.other) / 1000 / tokens,
  client: (b.client - a.client) / 1000 / tokens,
});


async function main() {
  const ids = await models();
  // The load comes from many accounts (below), each request from one of its own; with
  // --account-queue-share 1 a model's whole queue would still be open to a single account.
  const server = await startServerProcess(join(ROOT, "models"), ["--account-queue-share", "1", ...(threads > 0 ? ["--threads", String(threads)] : [])]);
  const client = new OpenAI({ apiKey: server.key, baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 600_000 });
  // The load's requests each from a new account: the prompts repeat (across warm-up, rounds and
  // levels), and one account's repeat would be drafted from its own earlier answer.
  const fresh = freshClients(server, "load");
  const rows: (string | number)[][] = [];
  const cpuRows: (string | number)[][] = [];
  const ceilings: string[] = [];
  const speedup: string[] = [];
  const alone: (string | number)[][] = [];
  const bounds: string[] = [];
  try {
    for (const { id: model, dir } of ids) {
      const maxTokens = model === "stories260k" ? 128 : 48;
      // Warm up first: JavaScriptCore keeps compiling the server's per-token code into its
      // optimising tiers for some 30,000 tokens (its compiler threads' CPU time shows it), and a
      // cold first level would flatter the ratios of the later ones. The small model gets about
      // that many; the ~50M model's tokens are each 40 times dearer and its time is ONNX Runtime's.
      const long = model === "stories260k" && !quick;
      for (let w = 0; w < (quick ? 1 : long ? 16 : 3); w++) await Promise.all(Array.from({ length: 16 }, async (_, i) => streamChat(await fresh(), model, prose(8 + (i % 5), i), maxTokens)));
      for (let w = 0; w < (quick ? 2 : long ? 60 : 8); w++) await streamChat(await fresh(), model, prose(8, w), maxTokens);
      let single = 0;
      for (const n of LEVELS) {
        // A few rounds per level, the median round's throughput: one round moves a lot on 2 cores.
        const rounds: { tps: number; results: StreamResult[] }[] = [];
        const cpuBefore = cpuSample(server.pid);
        const levelRoundCount = levelRounds(n);
        for (let round = 0; round < levelRoundCount; round++) {
          const clients = await Promise.all(Array.from({ length: n }, () => fresh()));
          const t0 = performance.now();
          const results = await Promise.all(clients.map((c, i) => streamChat(c, model, prose(8 + (i % 5), i + round), maxTokens)));
          const wall = (performance.now() - t0) / 1000;
          rounds.push({ tps: results.reduce((s, r) => s + r.tokens, 0) / wall, results });
        }
        const tps = median(rounds.map((r) => r.tps));
        const results = rounds.flatMap((r) => r.results);
        const cpu = cpuPerToken(cpuBefore, cpuSample(server.pid), results.reduce((s, r) => s + r.tokens, 0));
        cpuRows.push([model, n, cpu.worker.toFixed(0), cpu.http.toFixed(0), cpu.other.toFixed(0), cpu.client.toFixed(0), (cpu.worker + cpu.http + cpu.other + cpu.client).toFixed(0)]);
        if (n === 16) {
          const total = cpu.worker + cpu.http + cpu.other + cpu.client;
          ceilings.push(
            `${model}: 6× one stream is ${(6 * single).toFixed(0)} tok/s. At 16 streams a token cost ${total.toFixed(0)} µs of CPU in all ` +
              `(${cpu.worker.toFixed(0)} in the model worker, ${(cpu.http + cpu.other).toFixed(0)} in the server's other threads, ${cpu.client.toFixed(0)} in the client), ` +
              `so ${navigator.hardwareConcurrency} cores allow at most ${((navigator.hardwareConcurrency * 1e6) / total).toFixed(0)} tok/s at that cost; ` +
              `at 6× the model worker's threads alone would need ${((6 * single * cpu.worker) / 1e6).toFixed(2)} cores`,
          );
        }
        const tokens = results.reduce((s, r) => s + r.tokens, 0) / levelRoundCount;
        if (n === 1) single = tps;
        const ttfts = results.map((r) => r.ttft);
        const gaps = results.flatMap((r) => r.gaps);
        const tpots = results.map(tpot);
        rows.push([model, n, tokens, tps.toFixed(1), (tps / single).toFixed(2) + "×", median(ttfts).toFixed(0), percentile(ttfts, 99).toFixed(0), median(tpots).toFixed(1), percentile(tpots, 99).toFixed(1), median(gaps).toFixed(1), percentile(gaps, 99).toFixed(1)]);
        console.log(rows.at(-1)!.join("\t"));
        if (n === 16) speedup.push(`${model}: 16 streams give ${(tps / single).toFixed(2)}× the aggregate tokens/s of one`);
      }
      // The same requests to the model worker's own code in a process of its own (no HTTP thread,
      // no messages between threads, no client parsing): what the engine alone reaches here. Not
      // in this process, where the client runs: see runner-process.ts.
      const engine = await RunnerProcess.start({ kind: "engine", dir, id: model, prompt: "", eos: [], tokens: maxTokens });
      for (let w = 0; w < (quick ? 1 : long ? 16 : 3); w++) await engine.generate(Array.from({ length: 16 }, (_, i) => prose(8 + (i % 5), i)), maxTokens);
      let aloneSingle = 0;
      for (const n of [1, 16]) {
        const rates: number[] = [];
        let tokens = 0;
        let onnxMs = 0;
        for (let round = 0; round < levelRounds(n); round++) {
          const made = await engine.generate(Array.from({ length: n }, (_, i) => prose(8 + (i % 5), i + round)), maxTokens);
          rates.push(made.tokens / (made.ms / 1000));
          tokens += made.tokens;
          onnxMs += made.onnxMs;
        }
        const tps = median(rates);
        if (n === 1) aloneSingle = tps;
        const onnxUs = (onnxMs * 1000) / tokens;
        alone.push([model, n, tps.toFixed(1), `${(tps / aloneSingle).toFixed(2)}×`, `${(tps / single).toFixed(2)}×`, (1e6 / tps).toFixed(1), onnxUs.toFixed(1)]);
        if (n === 16) {
          // The model worker runs a model's steps one after another on one thread: 6× one stream
          // needs all of its work per token within this, ONNX Runtime's runs included.
          const budget = 1e6 / (6 * single);
          bounds.push(
            `${model}: 6× one stream through HTTP leaves ${budget.toFixed(1)} µs of the model worker's time per token at 16 streams; ` +
              `the engine alone spent ${onnxUs.toFixed(1)} µs of each token inside ONNX Runtime's runs, reading the prompts and decoding (${((100 * onnxUs) / budget).toFixed(0)}% of that), ` +
              `and ${(1e6 / tps - onnxUs).toFixed(1)} µs on everything else it does`,
          );
        }
        console.log("in-process", alone.at(-1)!.join("\t"));
      }
      await engine.close();
    }

    // Decode time per token at short and long context (one stream, the synthetic model). One
    // request of 32 tokens is too short a measure on a 2-core machine: the two contexts alternate
    // for a few rounds (different prompts, so no prefix is reused), a time per token each.
    const ctxRows: (string | number)[][] = [];
    const perToken: Record<number, number> = {};
    const pooled: Record<number, StreamResult[]> = { 100: [], 2000: [] };
    // The synthetic tokenizer makes about 1.85 tokens of this prose per word.
    for (let round = 0; round < CONTEXT_ROUNDS; round++) {
      for (const [target, words] of [[100, 50], [2000, 1060]] as const) pooled[target]!.push(await streamChat(await fresh(), "bench/50m", prose(words, 1 + round), 32));
    }
    for (const target of [100, 2000] as const) {
      const rs = pooled[target]!;
      const tpots = rs.map(tpot);
      perToken[target] = median(tpots);
      ctxRows.push([median(rs.map((r) => r.promptTokens)), rs.length, median(tpots).toFixed(1), percentile(tpots, 99).toFixed(1), median(rs.map((r) => r.ttft)).toFixed(0)]);
      console.log("context", ctxRows.at(-1)!.join("\t"));
    }

    // A 1,000-token shared prefix: the second request's time to first token.
    const system = prose(540, 2);
    const first = await streamChat(client, "bench/50m", "first question", 8, { system });
    const second = await streamChat(client, "bench/50m", "another question", 8, { system });
    console.log("prefix", first.promptTokens, first.ttft.toFixed(0), second.ttft.toFixed(0));

    const date = new Date().toISOString().slice(0, 10);
    const body = [
      `Written by \`bun bench/concurrency.ts\` on ${date}. Machine: ${machine()} (nproc ${navigator.hardwareConcurrency}). ` +
        `ONNX Runtime intra-op threads: ${threads || "chosen by the server (one for a model under 16 MiB of weights, as stories260K; ONNX Runtime's default for bench/50m)"}. The server in its own process (\`--account-queue-share 1\`), through HTTP with the openai client, greedy, streamed, each request from an account of its own (the prompts repeat across rounds and levels, and one account's repeated prompt would be drafted from its own earlier answer); ` +
        `\`bench/50m\` is \`buildSyntheticModel(dir, {preset: "bench-50m", variant: "fused"})\` (random weights), ` +
        `\`stories260k\` is llama2.c's stories260K imported with the fused graph. Each model is warmed up first (stories260k: 16 rounds of 16 streams and 60 single requests, some 40,000 tokens, as JavaScriptCore keeps compiling the server's code that long; bench/50m: three rounds of 16 streams, eight single requests). Each level runs ${quick ? "1 round" : "9 rounds (1 stream), 5 (4 and 16) or 3 (64)"}: the median round's throughput; TTFT, TPOT (time per output token after the first, per request: its stream's span over its tokens after the first) and the gaps between content chunks pooled over the rounds. A chunk holds the tokens the server made within its stream interval (\`serve --stream-interval-ms\`, 10 by default), so a fast model's gaps are about 10 ms and its TPOT much less. Times in ms. ` +
        `On a 2-core machine shared with other work these ratios move a lot from run to run; rerun before trusting one.`,
      "",
      table(["model", "streams", "tokens per round", "aggregate tok/s (median round)", "vs 1 stream", "TTFT median", "TTFT p99", "TPOT median", "TPOT p99", "chunk gap median", "chunk gap p99"], rows),
      "",
      ...speedup.map((s) => `- ${s}.`),
      "",
      "CPU time per generated token over each level's rounds, in µs: the server's model worker threads (with ONNX Runtime's), its HTTP thread, its other threads (JIT, GC), and the benchmark's own process (the openai client parsing every chunk), all on the same cores (from /proc's schedstat):",
      "",
      table(["model", "streams", "model worker", "HTTP thread", "other server threads", "client", "total"], cpuRows),
      "",
      ...ceilings.map((s) => `- ${s}.`),
      "",
      "The engine alone: the same requests (rounds and medians as above) to the model worker's own code (scheduler, KV cache, sampler, detokeniser) in a process of its own (bench/runner-process.ts), without the HTTP thread, the messages between threads and the client's parsing:",
      "",
      table(["model", "streams", "aggregate tok/s in-process (median round)", "vs 1 stream in-process", "vs 1 stream through HTTP", "µs per token", "of which in ONNX Runtime's runs (prompts and steps)"], alone),
      "",
      ...bounds.map((s) => `- ${s}.`),
      "",
      `Decode time per token by context (bench/50m, one stream; ${CONTEXT_ROUNDS} alternating rounds; TPOT per request):`,
      "",
      table(["prompt tokens", "requests of 32 tokens", "TPOT median", "TPOT p99", "TTFT median"], ctxRows),
      "",
      `- Per-token decode at context ~2,000 is ${(perToken[2000]! / perToken[100]!).toFixed(2)}× that at ~100 (target ≤ 1.5×).`,
      `- Shared ${first.promptTokens}-token prompt prefix: first request's TTFT ${first.ttft.toFixed(0)} ms, second's ${second.ttft.toFixed(0)} ms ` +
        `(${(second.ttft / first.ttft).toFixed(2)} of the first; target < 0.25).`,
    ].join("\n");
    console.log("\n" + body);
    writeSection("Concurrency", body);
  } finally {
    await server.stop();
  }
}

await main();
