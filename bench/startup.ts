// Binary size and the time from start to /ready of the compiled binary (make build first):
//   bun bench/startup.ts [path/to/sluice] [--runs N]
// Each start runs in a fresh data directory with PATH=/usr/bin:/bin; the first start of a build
// also unpacks the native libraries into an empty cache, later starts reuse it. Writes the
// `## Binary` section of docs/BENCHMARKS.md.
import { existsSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { machine, median, percentile, table, writeSection } from "./report.ts";

const { values, positionals } = parseArgs({ args: process.argv.slice(2), options: { runs: { type: "string", default: "10" } }, allowPositionals: true });
const binary = resolve(positionals[0] ?? join(import.meta.dir, "..", "dist", "sluice"));
const runs = Number(values.runs);
if (!existsSync(binary)) throw new Error(`no binary at ${binary}: run make build`);

async function freePort(): Promise<number> {
  const s = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = s.port;
  s.stop(true);
  return port;
}

/** Milliseconds from spawn to the first 200 from /ready; the server is then stopped. */
async function startToReady(home: string, cache: string, extra: string[]): Promise<number> {
  const work = mkdtempSync(join(home, "run-"));
  const port = await freePort();
  const t0 = performance.now();
  const proc = Bun.spawn([binary, "serve", "--port", String(port), "--cache-dir", cache, "--log-level", "warn", ...extra], {
    cwd: work,
    env: { PATH: "/usr/bin:/bin", HOME: home },
    stdout: "ignore",
    stderr: "ignore",
  });
  try {
    for (;;) {
      if (proc.exitCode !== null) throw new Error(`serve exited with ${proc.exitCode}`);
      try {
        const r = await fetch(`http://127.0.0.1:${port}/ready`);
        if (r.status === 200) return performance.now() - t0;
      } catch {
        // not listening yet
      }
      await Bun.sleep(2);
      if (performance.now() - t0 > 60_000) throw new Error("not ready within 60 s");
    }
  } finally {
    proc.kill("SIGTERM");
    await proc.exited;
    rmSync(work, { recursive: true, force: true });
  }
}

function timeCommand(args: string[], home: string): number {
  const t0 = performance.now();
  const r = Bun.spawnSync([binary, ...args], { env: { PATH: "/usr/bin:/bin", HOME: home }, stdout: "ignore", stderr: "ignore" });
  if (r.exitCode !== 0) throw new Error(`${args.join(" ")} exited with ${r.exitCode}`);
  return performance.now() - t0;
}

const home = mkdtempSync(join(tmpdir(), "sluice-startup-"));
try {
  const cache = join(home, "cache");
  const first = await startToReady(home, cache, ["--no-demo"]);
  const warm: number[] = [];
  for (let i = 0; i < runs; i++) warm.push(await startToReady(home, cache, ["--no-demo"]));
  const demo: number[] = [];
  for (let i = 0; i < Math.max(3, Math.floor(runs / 2)); i++) demo.push(await startToReady(home, cache, []));
  const version: number[] = [];
  for (let i = 0; i < runs; i++) version.push(timeCommand(["--version"], home));

  const ms = (x: number) => x.toFixed(0);
  const rows = [
    ["`sluice --version`", runs, ms(median(version)), ms(percentile(version, 90))],
    ["serve → /ready, no models, first start (unpacks ~51 MB)", 1, ms(first), ms(first)],
    ["serve → /ready, no models (cache already unpacked)", runs, ms(median(warm)), ms(percentile(warm, 90))],
    ["serve → /ready, demo model generated and loaded", demo.length, ms(median(demo)), ms(percentile(demo, 90))],
  ];
  const size = statSync(binary).size;
  const body = [
    `${new Date().toISOString().slice(0, 10)} on ${machine()}. Written by bench/startup.ts.`,
    "",
    `\`dist/sluice\` (linux-x64, \`make build\`): **${(size / 1e6).toFixed(1)} MB** (${size.toLocaleString("en")} bytes), of which ONNX Runtime's library ~45.8 MB, the tokenizers addon ~4.9 MB, the Bun runtime most of the rest.`,
    "",
    "Each start is a new process in a new data directory with PATH=/usr/bin:/bin, timed from spawn to the first 200 from `/ready` (polled every 2 ms). Target: under one second without models, excluding the first unpacking.",
    "",
    table(["command", "runs", "median ms", "p90 ms"], rows),
  ].join("\n");
  console.log(body);
  writeSection("Binary", body);
} finally {
  rmSync(home, { recursive: true, force: true });
}
