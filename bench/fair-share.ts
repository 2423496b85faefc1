// One account floods a model, another sends one request: the second's time to first token with
// fair sharing (serve --scheduling fair) and with plain first-come order (--scheduling fifo), side
// by side in one run, through the real server with the openai client. The model's KV budget holds
// 8 of the flood's sequences at once, so the rest of the flood waits in the queue. Also the flood's
// own aggregate tokens/s in both orders (what fairness costs it: the preempted sequences are
// recomputed). Writes `## Fair sharing` of docs/BENCHMARKS.md.
// Run: bun bench/fair-share.ts [--quick]
import { mkdtempSync, rmSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { existsSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import { buildSyntheticModel } from "../src/modelkit/index.ts";
import { spawnServe } from "../test/helpers/serve-process.ts";
import { BUN, REPO } from "../test/helpers/paths.ts";
import { machine, median, table, writeSection } from "./report.ts";
import { streamChat } from "./stream-chat.ts";

const ROOT = join(REPO, ".cache", "bench-fair-share");
const quick = process.argv.includes("--quick");
const FLOOD = 64;
const FLOOD_TOKENS = quick ? 24 : 48;
const B_TOKENS = 8;
const ROUNDS = quick ? 1 : 3;
const MODEL = "bench/50m";
/** Room for 8 of the flood's sequences (about 2.3 MiB each at capacity 128 on this model). */
const KV_BUDGET_MB = "20";

const words = "the cat sat on a mat and looked at the big red ball that rolled down the green hill".split(" ");
const prose = (n: number, seed: number) => Array.from({ length: n }, (_, i) => words[(i * 7 + seed * 3) % words.length]).join(" ");

function cli(data: string, ...args: string[]): string {
  const r = Bun.spawnSync([BUN, join(REPO, "src/cli/main.ts"), ...args, "--data", data], { cwd: REPO });
  if (r.exitCode !== 0) throw new Error(`sluice ${args.join(" ")}: ${r.stderr.toString()}`);
  return r.stdout.toString().trim();
}

interface Round {
  bTtft: number;
  floodTps: number;
  preemptions: number;
}

async function measure(order: "fair" | "fifo", modelsDir: string): Promise<Round[]> {
  const data = mkdtempSync(join(tmpdir(), "sluice-bench-fair-"));
  // The queue must take the whole flood: one account may hold 3/4 of it waiting.
  const server = await spawnServe(
    ["--data", data, "--models", modelsDir, "--no-demo", "--device", "cpu", "--log-level", "error", "--scheduling", order, "--kv-budget-mb", KV_BUDGET_MB, "--max-queue", "128", "--preload", "all"],
    { stderr: "inherit" },
  );
  try {
    cli(data, "accounts", "create", "b");
    cli(data, "billing", "plan", "b", "unlimited");
    const bKey = cli(data, "keys", "create", "--account", "b");
    const a = new OpenAI({ apiKey: server.key!, baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 600_000 });
    const b = new OpenAI({ apiKey: bKey, baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 600_000 });
    // Warm-up: the model's first requests (JIT, ONNX Runtime's first runs).
    await Promise.all(Array.from({ length: 8 }, (_, i) => streamChat(a, MODEL, prose(8, i), 16)));
    const rounds: Round[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      const before = await preemptions(server.url);
      const t0 = performance.now();
      const flood = Promise.all(Array.from({ length: FLOOD }, (_, i) => streamChat(a, MODEL, prose(10, i + r * FLOOD), FLOOD_TOKENS)));
      // B arrives once the flood holds the model: its first tokens are out.
      await Bun.sleep(1500);
      const bResult = await streamChat(b, MODEL, prose(6, 999 + r), B_TOKENS);
      const results = await flood;
      const wall = (performance.now() - t0) / 1000;
      rounds.push({ bTtft: bResult.ttft, floodTps: results.reduce((s, x) => s + x.tokens, 0) / wall, preemptions: (await preemptions(server.url)) - before });
      console.log(order, r, rounds.at(-1));
    }
    return rounds;
  } finally {
    await server.stop();
    rmSync(data, { recursive: true, force: true });
  }
}

async function preemptions(url: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return Number(/^sluice_preemptions_total\{model="bench\/50m"\} (\d+)/m.exec(text)?.[1] ?? 0);
}

async function main() {
  const modelsDir = join(ROOT, "models");
  const dir = join(modelsDir, "bench-50m");
  if (!existsSync(join(dir, "sluice.json"))) await buildSyntheticModel(dir, { preset: "bench-50m", variant: "fused", id: MODEL });
  const loadStart = loadavg()[0]!;
  const fair = await measure("fair", modelsDir);
  const fifo = await measure("fifo", modelsDir);
  const row = (name: string, rs: Round[]) => [
    name,
    median(rs.map((r) => r.bTtft)).toFixed(0),
    Math.max(...rs.map((r) => r.bTtft)).toFixed(0),
    median(rs.map((r) => r.floodTps)).toFixed(1),
    median(rs.map((r) => r.preemptions)),
  ];
  const ratio = median(fifo.map((r) => r.bTtft)) / median(fair.map((r) => r.bTtft));
  const cost = median(fair.map((r) => r.floodTps)) / median(fifo.map((r) => r.floodTps));
  const body = [
    `Written by \`bun bench/fair-share.ts${quick ? " --quick" : ""}\` on ${new Date().toISOString().slice(0, 10)}. Machine: ${machine()}; 1-minute load average ${loadStart.toFixed(1)} at the start, ${loadavg()[0]!.toFixed(1)} at the end. ` +
      `\`${MODEL}\` (synthetic, fused, random weights) in a serve process with \`--kv-budget-mb ${KV_BUDGET_MB}\` (8 of the flood's sequences at once) and \`--max-queue 128\`; ` +
      `account A opens ${FLOOD} streams of ${FLOOD_TOKENS} tokens, account B sends one stream of ${B_TOKENS} tokens 1.5 s later. ${ROUNDS} round(s) per order, greedy, the openai client; times in ms.`,
    "",
    table(["order (serve --scheduling)", "B's TTFT median", "B's TTFT max", "A's aggregate tok/s (median)", "preemptions per round"], [row("fair", fair), row("fifo (first come, first served)", fifo)]),
    "",
    `- B's first token comes ${ratio.toFixed(1)}× sooner with fair sharing: it is admitted at the next round, preempting one of A's sequences (equal priorities: A holds 8 sequences, B none), instead of after the ${FLOOD - 8} requests of A queued before it.`,
    `- A's aggregate throughput with fair sharing is ${(cost * 100).toFixed(0)}% of first-come order's (the preempted sequence is recomputed when it resumes).`,
    `- A timed bound is not asserted here: test/engine/worker/fair-share.test.ts counts it in batch rounds (B's first token within 3 decode steps of its arrival, against over 300 in first-come order).`,
  ].join("\n");
  console.log(body);
  writeSection("Fair sharing", body);
}

await main();
