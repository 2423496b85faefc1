// What holding a stream's tokens for the stream interval buys: two servers alike but for
// `--stream-interval-ms` (the default 10, and 1, what it was before the interval became a setting),
// both with `--speculate off`, streamed to the openai client in a process of its own, runs
// interleaved. Per server: decode rate, time to first token, and the CPU per generated token of
// the server's threads and of the client, on this machine's shared cores.
// Writes `## Stream interval` of docs/BENCHMARKS.md.
//
//   bun bench/stream-interval.ts [--quick]
import { cpus, loadavg } from "node:os";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { TextTokenizer } from "../src/engine/text/tokenizer.ts";
import { copyTask, hasStories, STORIES, storiesDir } from "./bench-models.ts";
import { machine, median, table, writeSection } from "./report.ts";
import { RunnerProcess } from "./runner-process.ts";
import { serverCpuUs, startServerProcess, threadsCpu, type ServerProcess } from "./server-process.ts";

const quick = process.argv.includes("--quick");
const RUNS = quick ? 3 : 21;
const TOKENS = 200;
const INTERVALS = [10, 1] as const;

interface Model {
  name: string;
  id: string;
  dir: string;
  prompt: string;
}

const cpuUs = (pid: number) => threadsCpu(pid).reduce((a, t) => a + t.cpuNs, 0) / 1000;

async function main(): Promise<void> {
  const load = loadavg()[0]!.toFixed(1);
  const models: Model[] = [];
  if (hasStories) models.push({ name: "stories260K", id: "stories260k", dir: await storiesDir(), prompt: "Once upon a time" });
  else console.warn(`stories260K absent at ${STORIES}: only the ~50M-shape model is measured`);
  const copy = await copyTask();
  models.push({ name: "~50M shape (scripted, fp32)", id: copy.id, dir: copy.dir, prompt: copy.prompt });
  const root = mkdtempSync(join(tmpdir(), "sluice-interval-"));
  mkdirSync(join(root, "models"));
  for (const m of models) symlinkSync(m.dir, join(root, "models", m.id.replace("/", "-")));
  const servers: { ms: number; server: ServerProcess }[] = [];
  const rows: (string | number)[][] = [];
  try {
    for (const ms of INTERVALS) {
      servers.push({ ms, server: await startServerProcess(join(root, "models"), ["--speculate", "off", "--preload", "all", "--stream-interval-ms", String(ms)]) });
    }
    for (const m of models) {
      const eos = [...TextTokenizer.load(m.dir).eosTokenIds];
      const runners = await Promise.all(
        servers.map(async ({ ms, server }) => ({
          ms,
          server,
          runner: await RunnerProcess.start({ kind: "http", baseURL: `${server.url}/v1`, key: server.key, model: m.id, prompt: m.prompt, eos, tokens: TOKENS }),
        })),
      );
      for (const r of runners) for (let w = 0; w < (quick ? 1 : 10); w++) await r.runner.run();
      const got = new Map<number, { tps: number; ttft: number; http: number; worker: number; other: number; client: number }[]>(INTERVALS.map((ms) => [ms, []]));
      for (let i = 0; i < RUNS; i++) {
        for (const r of i % 2 ? [...runners].reverse() : runners) {
          const [s0, c0] = [serverCpuUs(r.server.pid), cpuUs(r.runner.pid)];
          const measure = await r.runner.run();
          const [s1, c1] = [serverCpuUs(r.server.pid), cpuUs(r.runner.pid)];
          const per = (a: number, b: number) => (b - a) / TOKENS;
          got.get(r.ms)!.push({
            tps: measure.tokPerS,
            ttft: measure.ttftMs,
            http: per(s0["HTTP thread"], s1["HTTP thread"]),
            worker: per(s0["model worker threads"], s1["model worker threads"]),
            other: per(s0["JIT compiler threads"] + s0["other threads"], s1["JIT compiler threads"] + s1["other threads"]),
            client: per(c0, c1),
          });
        }
      }
      for (const r of runners) await r.runner.close();
      const base = median(got.get(1)!.map((x) => x.tps));
      for (const ms of INTERVALS) {
        const xs = got.get(ms)!;
        const med = (f: (x: (typeof xs)[number]) => number) => median(xs.map(f));
        rows.push([m.name, ms, med((x) => x.tps).toFixed(0), `${(med((x) => x.tps) / base).toFixed(2)}×`, med((x) => x.ttft).toFixed(1), med((x) => x.http).toFixed(1), med((x) => x.client).toFixed(1), med((x) => x.worker).toFixed(0), med((x) => x.other).toFixed(1)]);
        console.log(rows.at(-1)!.join("\t"));
      }
    }
  } finally {
    for (const s of servers) await s.server.stop();
    rmSync(root, { recursive: true, force: true });
  }
  const body =
    `${new Date().toISOString().slice(0, 10)} on ${machine()}; 1-minute load average ${load} at the start, ${loadavg()[0]!.toFixed(1)} at the end (${cpus().length} cores). ` +
    `Two servers alike but for \`--stream-interval-ms\` (10, the default, and 1), both \`--speculate off --preload all\`; one stream, greedy, ${TOKENS} tokens with the end token banned, through the openai client in a process of its own; ${RUNS} runs per server, interleaved (which goes first alternating), after untimed ones; medians. ` +
    `CPU per generated token, from /proc's schedstat: the server's HTTP thread, the client's process, the model worker's threads (with ONNX Runtime's), and the server's other threads (JIT, GC). ` +
    `Each post of the model worker wakes the HTTP thread, and each chunk the client; the interval decides how many tokens share them. stories260K makes a token in well under a millisecond, so at 1 ms a few tokens already share a post; the ~50M-shape model takes several, so at 1 ms each token is a post of its own.\n\n` +
    table(["model", "stream interval ms", "decode tok/s (median)", "vs 1 ms", "TTFT ms", "HTTP thread µs/token", "client µs/token", "model worker µs/token", "other server threads µs/token"], rows);
  console.log("\n" + body);
  writeSection("Stream interval (bench/stream-interval.ts)", body);
}

await main();
