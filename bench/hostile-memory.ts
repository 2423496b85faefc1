// The server's memory under hostile traffic: RSS of a `serve` process (four models: tiny-bytes,
// tiny-qwen3 with Qwen3's 151k tokenizer, the synthetic vision model, stories260K when present)
// at the start, after N hostile requests (test/hardening/hostile-cases.ts, reseeded every round
// so schemas keep changing and caches keep filling), and after the caches settle (an idle pause,
// then normal requests). Also the caches /metrics reports. Target: back within 1.5× of the start.
//
//   bun bench/hostile-memory.ts [--requests 5000] [--concurrency 8] [--only REGEX] [--write]
import { readFileSync, rmSync } from "node:fs";
import { parseArgs } from "node:util";
import { hostileCases, type HostileCase } from "../test/hardening/hostile-cases.ts";
import { hostileModels } from "./hostile-models.ts";
import { startServerProcess } from "./server-process.ts";
import { machine, table, writeSection } from "./report.ts";

const { values } = parseArgs({ options: { requests: { type: "string", default: "5000" }, concurrency: { type: "string", default: "8" }, only: { type: "string" }, write: { type: "boolean" } } });
/** Only the cases whose name matches (to find which class of request grows what). */
const ONLY = values.only ? new RegExp(values.only) : null;
const REQUESTS = Number(values.requests);
const CONCURRENCY = Number(values.concurrency);

const { modelsDir, models } = await hostileModels();
const server = await startServerProcess(modelsDir);
const headers = { authorization: `Bearer ${server.key}`, "content-type": "application/json" };
const rssMiB = () => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${server.pid}/status`, "utf8"))![1]) / 1024;

async function normal(rounds: number) {
  for (let i = 0; i < rounds; i++) {
    await Promise.all(
      Object.keys(models.vocab).map(async (model) => {
        const res = await fetch(`${server.url}/v1/chat/completions`, { method: "POST", headers, body: JSON.stringify({ model, messages: [{ role: "user", content: `hello ${i}` }], max_tokens: 8 }) });
        await res.text();
      }),
    );
  }
}

async function send(c: HostileCase): Promise<number> {
  const body = typeof c.body === "string" ? c.body : JSON.stringify({ model: c.model, messages: [{ role: "user", content: "hi" }], ...c.body });
  const res = await fetch(`${server.url}/v1/chat/completions`, { method: "POST", headers, body });
  await res.arrayBuffer();
  return res.status;
}

function metric(text: string, name: string): number {
  let sum = 0;
  for (const m of text.matchAll(new RegExp(`^${name}(\\{[^}]*\\})? (\\d+)`, "gm"))) sum += Number(m[2]);
  return sum;
}

await normal(20);
const start = rssMiB();
const metricsStart = await (await fetch(`${server.url}/metrics`)).text();
console.log(`RSS at the start: ${start.toFixed(0)} MiB`);
const statuses: Record<string, number> = {};
let sent = 0;
let round = 0;
const t0 = performance.now();
let peak = start;
while (sent < REQUESTS) {
  const cases = (await hostileCases(models, 19 + round++)).filter((c) => !ONLY || ONLY.test(c.name));
  for (let i = 0; i < cases.length && sent < REQUESTS; i += CONCURRENCY) {
    const batch = cases.slice(i, Math.min(i + CONCURRENCY, i + REQUESTS - sent));
    for (const s of await Promise.all(batch.map(send))) statuses[s] = (statuses[s] ?? 0) + 1;
    sent += batch.length;
    peak = Math.max(peak, rssMiB());
  }
  console.log(`${sent} hostile requests, RSS ${rssMiB().toFixed(0)} MiB (peak ${peak.toFixed(0)})`);
}
const seconds = (performance.now() - t0) / 1000;
const after = rssMiB();
const metricsAfter = await (await fetch(`${server.url}/metrics`)).text();
// Settle: an idle pause (the allocator returns freed pages), then ordinary traffic again.
await Bun.sleep(15_000);
await normal(20);
await Bun.sleep(5_000);
const settled = rssMiB();
const metrics = await (await fetch(`${server.url}/metrics`)).text();
await server.stop();
rmSync(modelsDir, { recursive: true, force: true });

const mib = (b: number) => `${(b / 2 ** 20).toFixed(1)} MiB`;
const rows = [
  ["start (after 20 rounds of normal requests)", `${start.toFixed(0)} MiB`, "1.00×"],
  [`after ${sent} hostile requests`, `${after.toFixed(0)} MiB`, `${(after / start).toFixed(2)}×`],
  ["peak during them", `${peak.toFixed(0)} MiB`, `${(peak / start).toFixed(2)}×`],
  ["after the caches settle (20 s idle, normal requests)", `${settled.toFixed(0)} MiB`, `${(settled / start).toFixed(2)}×`],
];
const caches = [
  ...(
    [
      ["compiled grammars (all models)", "sluice_grammar_cache_bytes"],
      ["prefix cache KV (all models)", "sluice_prefix_cache_bytes"],
      ["model worker JS heaps", "sluice_worker_heap_bytes"],
      ["compile thread JS heaps", "sluice_compile_heap_bytes"],
      ["HTTP thread JS heap", "sluice_process_heap_bytes"],
    ] as const
  ).map(([what, name]) => [what, mib(metric(metricsStart, name)), mib(metric(metricsAfter, name)), mib(metric(metrics, name))]),
  ["schemas compiled / refused", "", `${metric(metricsAfter, "sluice_schemas_compiled_total")} / ${metric(metricsAfter, "sluice_schemas_refused_total")}`, ""],
];
const perModel = (text: string) =>
  [...text.matchAll(/^sluice_worker_heap_bytes\{model="([^"]+)"\} (\d+)/gm)].map((m) => `${m[1]} ${mib(Number(m[2]))}`).join(", ");
console.log(`model worker heaps at the start: ${perModel(metricsStart)}; settled: ${perModel(metrics)}`);
const out = [
  table(["server RSS", "MiB", "vs start"], rows),
  "",
  table(["memory", "start", "after the hostile requests", "settled"], caches),
  "",
  `${sent} requests in ${seconds.toFixed(0)} s at ${CONCURRENCY} at a time; answers: ${Object.entries(statuses).map(([s, n]) => `${n}× ${s}`).join(", ")}.`,
].join("\n");
console.log(out);
if (values.write) {
  writeSection(
    "Memory under hostile requests",
    `Written by \`bench/hostile-memory.ts\` on ${machine()}, ${new Date().toISOString().slice(0, 10)}: RSS of one \`serve\` process with ${Object.keys(models.vocab).join(", ")}, hostile requests from test/hardening/hostile-cases.ts (reseeded each round of ${548}-odd cases). Target: settled within 1.5× of the start.\n\n${out}`,
  );
}
