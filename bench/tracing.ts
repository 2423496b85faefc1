// What tracing costs a request: four `sluice serve` processes alike but for tracing (off; on, to
// a collector that takes everything; on, to a collector that is down: connection refused; on, to
// one that takes connections and never answers), side by side in one run. A small model at its
// fastest, so that the span work is as large a share of a request as it can be. Sequential
// streamed chats (latency per request) and 8 concurrent streams (requests per second), in rounds
// whose order rotates; medians. The spans each server exported and dropped, from its /metrics.
//   bun bench/tracing.ts [rounds]
import { mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { syntheticModel, tinyModelsRoot } from "../test/helpers/models.ts";
import { machine, median, percentile, rotated, table, writeSection } from "./report.ts";
import { serverCpuUs, startServerProcess, sumCpu, type ServerProcess } from "./server-process.ts";
import { streamChat } from "./stream-chat.ts";
import { closedPort } from "../test/helpers/otlp-receiver.ts";

const MODEL = "bench/tracing";
const ROUNDS = Number(process.argv[2] ?? 6);
/** Sequential requests per server per round, and the concurrent phase's length and clients. */
const SEQUENTIAL = 30;
const CONCURRENT_SECONDS = 2;
const CLIENTS = 8;
const TOKENS = 16;

interface Runner {
  label: string;
  server: ServerProcess;
  client: OpenAI;
  latency: number[];
  rps: number[];
  /** Requests timed, and the server's CPU (µs) at the start of timing: its HTTP thread's and all its threads'. */
  requests: number;
  cpu0: { http: number; all: number };
}


async function spanCounts(url: string): Promise<{ exported: number; dropped: number }> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const sum = (prefix: string) =>
    text
      .split("\n")
      .filter((l) => l.startsWith(prefix))
      .reduce((n, l) => n + Number(l.split(" ").at(-1)), 0);
  return { exported: sum("sluice_trace_spans_exported_total"), dropped: sum("sluice_trace_spans_dropped_total") };
}

async function main() {
  const load = loadavg()[0]!.toFixed(1);
  const models = mkdtempSync(join(tmpdir(), "sluice-bench-tracing-"));
  symlinkSync(await syntheticModel(tinyModelsRoot(), "bench-tracing", { preset: "tiny-bytes", seed: 9, id: MODEL }), join(models, "tiny"));
  // A collector that takes every export (reads it, answers 200 with an empty response).
  let received = 0;
  const live = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(req) {
      received += (await req.arrayBuffer()).byteLength;
      return new Response(new Uint8Array(0), { headers: { "content-type": "application/x-protobuf" } });
    },
  });
  const silent = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const setups: [string, string[]][] = [
    ["off", []],
    ["collector up", ["--otlp-endpoint", `http://127.0.0.1:${live.port}`]],
    ["collector down (refused)", ["--otlp-endpoint", `http://127.0.0.1:${closedPort()}`]],
    ["collector hanging", ["--otlp-endpoint", `http://127.0.0.1:${silent.port}`]],
  ];
  const runners: Runner[] = [];
  try {
    for (const [label, args] of setups) {
      const server = await startServerProcess(models, ["--preload", "all", ...args]);
      runners.push({ label, server, client: new OpenAI({ apiKey: server.key, baseURL: `${server.url}/v1`, maxRetries: 0 }), latency: [], rps: [], requests: 0, cpu0: { http: 0, all: 0 } });
    }
    // Untimed: every code path warm.
    for (const r of runners) for (let i = 0; i < 10; i++) await streamChat(r.client, MODEL, `warm ${i}`, TOKENS);
    const cpu = (r: Runner) => {
      const c = serverCpuUs(r.server.pid);
      return { http: c["HTTP thread"], all: sumCpu(c) };
    };
    for (const r of runners) r.cpu0 = cpu(r);
    for (let round = 0; round < ROUNDS; round++) {
      for (const r of rotated(runners, round)) {
        for (let i = 0; i < SEQUENTIAL; i++) {
          const t0 = performance.now();
          await streamChat(r.client, MODEL, `round ${round} request ${i}`, TOKENS);
          r.latency.push(performance.now() - t0);
        }
        r.requests += SEQUENTIAL;
        const until = performance.now() + CONCURRENT_SECONDS * 1000;
        let done = 0;
        await Promise.all(
          Array.from({ length: CLIENTS }, async (_, c) => {
            for (let i = 0; performance.now() < until; i++) {
              await streamChat(r.client, MODEL, `round ${round} client ${c} request ${i}`, TOKENS);
              done++;
            }
          }),
        );
        r.rps.push(done / CONCURRENT_SECONDS);
        r.requests += done;
      }
      console.log(`round ${round + 1}/${ROUNDS}: ${runners.map((r) => `${r.label} ${median(r.latency).toFixed(1)} ms, ${median(r.rps).toFixed(0)} req/s`).join("; ")}`);
    }
    // CPU over the whole timed run (exports run on the batch's timer, whenever), per request.
    const perRequest = new Map(
      runners.map((r) => {
        const c = cpu(r);
        return [r, { http: (c.http - r.cpu0.http) / r.requests, all: (c.all - r.cpu0.all) / r.requests }];
      }),
    );
    const base = runners[0]!;
    // A collector that is away, against one that is there: what its absence itself costs.
    const up = runners[1]!;
    const rows: (string | number)[][] = [];
    for (const r of runners) {
      const spans = r.label === "off" ? null : await spanCounts(r.server.url);
      rows.push([
        r.label,
        median(r.latency).toFixed(2),
        percentile(r.latency, 90).toFixed(2),
        `${(median(r.latency) / median(base.latency)).toFixed(3)}×`,
        median(r.rps).toFixed(1),
        `${(median(r.rps) / median(base.rps)).toFixed(3)}×`,
        r === base ? "–" : `${(median(r.latency) / median(up.latency)).toFixed(3)}× / ${(median(r.rps) / median(up.rps)).toFixed(3)}×`,
        perRequest.get(r)!.http.toFixed(0),
        perRequest.get(r)!.all.toFixed(0),
        spans ? String(spans.exported) : "–",
        spans ? String(spans.dropped) : "–",
      ]);
    }
    const body =
      `${new Date().toISOString().slice(0, 10)} on ${machine()}; 1-minute load average ${load} at the start, ${loadavg()[0]!.toFixed(1)} at the end (${cpus().length} cores). ` +
      `Four \`sluice serve\` processes alike (a tiny-bytes synthetic model, \`--preload all\`, the batch processor's defaults: a 5 s schedule, a queue of 2048) but for tracing: off; to a collector that takes every export; to a port where nothing listens (connection refused); to one that accepts connections and never answers. ` +
      `Per round and server, in an order that rotates each round: ${SEQUENTIAL} sequential streamed chats of ${TOKENS} tokens (latency per request, from the openai client), then ${CLIENTS} concurrent streams for ${CONCURRENT_SECONDS} s (requests per second); ${ROUNDS} rounds after 10 untimed requests each; medians over all requests and rounds. ` +
      `CPU: each server's HTTP thread and all its threads over the whole timed run (from /proc's schedstat), over the requests it answered: unlike the rates, not moved by what else runs on the machine. ` +
      `Spans: each server's sluice_trace_spans_exported_total and sluice_trace_spans_dropped_total at the end (a request makes 9 spans). ` +
      `The collector that was up received ${(received / 2 ** 20).toFixed(1)} MiB of OTLP protobuf.\n\n` +
      table(["tracing", "latency ms (median)", "p90 ms", "latency vs off", "req/s at 8 streams (median)", "req/s vs off", "latency / req/s vs collector up", "HTTP thread CPU µs/request", "server CPU µs/request", "spans exported", "spans dropped"], rows);
    console.log("\n" + body);
    writeSection("Tracing (bench/tracing.ts)", body);
  } finally {
    for (const r of runners) await r.server.stop();
    live.stop(true);
    silent.stop(true);
    rmSync(models, { recursive: true, force: true });
  }
}

await main();
