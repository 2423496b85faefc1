// Speculative decoding and the warm start, side by side in one run:
//  A. stories260K, greedy, one stream through HTTP: `serve` (speculation on, the default) against
//     `serve --speculate off` on the same prompts (their texts compared), and llama2.c's run.c
//     (-O3, one thread) built from ../shared/peers/llama2c with the machine's cc. Every prompt is
//     sent once: the server has the account's other stories as drafts, never the timed one's; a
//     second server with speculation gets each request from a new account (no history);
//  B. a copy-heavy request: a model that answers by repeating the prompt's passage with a few
//     words changed (a scripted model of the ~50M shape, so its runs cost what such a model's do),
//     each run from a new account (and, apart, one account asking again);
//  C. 16 concurrent streams of stories260K, with and without speculation, no prompt sent twice;
//  D. a freshly started server's first 1,000 tokens of single-stream traffic against its speed
//     once warmed, with the default warm-up at load and without one (fresh starts alternating), and
//     where the first tokens' extra CPU goes, thread by thread;
//  E. why A is what it is: the cost of a verification run of each width against a decode step
//     (ONNX Runtime through the engine's KV cache, in this process), and how many tokens the
//     drafter gets per run on stories260K's own greedy stories at each width, with and without
//     the account's earlier stories.
// Writes `## Speculative decoding and warm start` of docs/BENCHMARKS.md.
//
//   bun bench/speculation.ts [--quick] [--only A,B,C,D,E]
import { existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { FusedKvBackend } from "../src/engine/batching/fused-kv.ts";
import { NodeDecoder } from "../src/engine/runtime/node-decoder.ts";
import { NgramHistory, ownerSalt } from "../src/engine/speculation/history.ts";
import { NgramDrafter } from "../src/engine/speculation/ngram.ts";
import { renderChatPrompt } from "../src/engine/text/chat-template.ts";
import { TextTokenizer } from "../src/engine/text/tokenizer.ts";
import { copyTask, hasStories, ROOT, STORIES, storiesDir, type CopyTask } from "./bench-models.ts";
import { machine, median, rotated, table, writeSection } from "./report.ts";
import { RunnerProcess } from "./runner-process.ts";
import { serverCpuUs, startServerProcess, sumCpu, THREAD_GROUPS, threadsCpu, type ServerProcess, type ThreadGroup } from "./server-process.ts";
import { streamChat, tpot } from "./stream-chat.ts";

const args = process.argv.slice(2);
const quick = args.includes("--quick");
const only = args.includes("--only") ? new Set(args[args.indexOf("--only") + 1]!.split(",")) : new Set(["A", "B", "C", "D", "E"]);
const REPO = join(import.meta.dir, "..");

const PEER = join(REPO, "..", "shared", "peers", "llama2c", "run.c");

const STORY_PROMPTS = ["Once upon a time", "Lily and Tom", "One day, a little girl", "The dog was", "Tim had a red ball", "In the park", "Mom said", "The sun was hot"];
const RUNS = quick ? 2 : 9;

/**
 * Distinct story openings, none sent twice in a run: a server with speculation on remembers each
 * account's earlier answers as drafts (src/engine/speculation/history.ts), so a prompt it had seen
 * would be drafted from its own earlier answer to it. Every timed request here is new to it; what it
 * has learnt is the account's other stories.
 */
const SUBJECTS = ["Lily", "Tom", "Ben", "Sue", "Max", "Anna", "Tim", "Lucy", "Sam", "Mia", "Jack", "Kate", "The dog", "The cat", "A little girl", "A little boy", "Mom", "Dad", "The bird", "The frog", "Grandma", "The king", "A big bear", "The bunny"];
const PREDICATES = ["had a red ball", "went to the park", "found a big box", "saw a little bird", "wanted to play", "was very sad", "liked to run", "made a cake", "lost a toy", "was hungry", "met a new friend", "climbed a tree", "wanted a cookie", "saw the sun", "went to the shop", "had a big hat", "was very happy", "found a shiny stone", "heard a loud noise", "wanted to fly", "had a little car", "went to the sea", "was scared of the dark", "liked the rain"];
function storyPrompts(from: number, count: number): string[] {
  const out: string[] = [];
  for (let k = from; k < from + count; k++) {
    // Consecutive prompts differ in subject and predicate alike.
    const i = k % SUBJECTS.length;
    const j = (k * 7 + Math.floor(k / SUBJECTS.length)) % PREDICATES.length;
    if (Math.floor(k / SUBJECTS.length) >= PREDICATES.length) throw new Error(`only ${SUBJECTS.length * PREDICATES.length} story prompts`);
    out.push(`${SUBJECTS[i]} ${PREDICATES[j]}`);
  }
  return out;
}
const TOKENS = 200;

const sections: string[] = [];
const note = (s: string) => {
  console.log(s);
  sections.push(s);
};

// ---------------------------------------------------------------- llama2.c's run.c

/** run.c built with the machine's cc into a temporary directory; null (and why) without one. */
function buildPeer(): { bin: string; remove: () => void } | string {
  if (!existsSync(PEER)) return `${PEER} is absent`;
  const dir = mkdtempSync(join(tmpdir(), "sluice-runc-"));
  const bin = join(dir, "run");
  const r = Bun.spawnSync(["cc", "-O3", "-o", bin, PEER, "-lm"]);
  if (r.exitCode !== 0) {
    rmSync(dir, { recursive: true, force: true });
    return `cc failed: ${r.stderr.toString().trim().split("\n")[0]}`;
  }
  return { bin, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

/** run.c greedy on the prompt: its own "achieved tok/s" (forward passes after the first, prompt included). */
function runPeer(bin: string, prompt: string): number {
  const r = Bun.spawnSync([bin, join(STORIES, "stories260K.bin"), "-z", join(STORIES, "tok512.bin"), "-t", "0", "-n", "256", "-i", prompt]);
  const m = /achieved tok\/s: ([\d.]+)/.exec(r.stderr.toString());
  if (!m) throw new Error(`run.c printed no rate: ${r.stderr.toString().slice(0, 200)}`);
  return Number(m[1]);
}

// ---------------------------------------------------------------- helpers

async function metric(server: ServerProcess, name: string, model: string): Promise<number> {
  const body = await (await fetch(`${server.url}/metrics`)).text();
  const line = body.split("\n").find((l) => l.startsWith(`${name}{model="${model}"}`));
  return line ? Number(line.split(" ")[1]) : 0;
}

/** Waits for the server's stats to settle (they reach /metrics a little after the work). */
async function settled(server: ServerProcess, model: string): Promise<{ draft: number; accepted: number; generated: number; steps: number }> {
  await Bun.sleep(400);
  return {
    draft: await metric(server, "sluice_draft_tokens_total", model),
    accepted: await metric(server, "sluice_draft_accepted_tokens_total", model),
    generated: await metric(server, "sluice_generated_tokens_total", model),
    steps: await metric(server, "sluice_decode_steps_total", model),
  };
}

const client = (s: ServerProcess) => new OpenAI({ apiKey: s.key, baseURL: `${s.url}/v1`, maxRetries: 0, timeout: 600_000 });

async function greedyText(s: ServerProcess, model: string, content: string, maxTokens: number, eos: number[]): Promise<string> {
  const r = await client(s).chat.completions.create({
    model,
    messages: [{ role: "user", content }],
    temperature: 0,
    max_tokens: maxTokens,
    logit_bias: Object.fromEntries(eos.map((e) => [e, -100])),
  });
  return r.choices[0]!.message.content ?? "";
}

const ratio = (a: number, b: number) => `${(a / b).toFixed(2)}×`;

// ---------------------------------------------------------------- A. one stream of stories260K

async function singleStream(on: ServerProcess, off: ServerProcess, twin: ServerProcess, fresh: ServerProcess, storiesModel: string): Promise<void> {
  // llama2.c's stories end with BOS (1) as well as EOS (2).
  const eos = [1, 2];
  // Untimed runs first, then the timed ones: every runner takes the next prompt of the same list.
  const warm = quick ? 2 : 100;
  const timed = RUNS * STORY_PROMPTS.length;
  const prompts = storyPrompts(0, warm + timed);
  const spec = (s: ServerProcess) => ({ kind: "http" as const, baseURL: `${s.url}/v1`, key: s.key, model: "stories260k", prompt: prompts[0]!, prompts, eos, tokens: TOKENS });
  // The model worker's own code in a process of its own, without the HTTP thread, the messages to
  // it and the client: how much of the gap to run.c is the engine's and how much the way to the
  // client's.
  const engine = (speculate: "ngram" | "off") => ({ kind: "engine" as const, dir: storiesModel, id: "stories260k", prompt: prompts[0]!, prompts, eos, tokens: TOKENS, speculate, oneAccount: true });
  // What a new account gets: drafts from its request's own text only, nothing learnt before.
  const freshSpec = { ...spec(fresh), keys: await fresh.newAccountKeys("story", warm + timed) };
  const runners: [string, RunnerProcess][] = [
    ["sluice (speculation on, the default)", await RunnerProcess.start(spec(on))],
    ["sluice (speculation on), a new account each run", await RunnerProcess.start(freshSpec)],
    ["sluice --speculate off", await RunnerProcess.start(spec(off))],
    // A server set up as the one before: how far two alike differ in the same run (A/A).
    ["sluice --speculate off, its twin (A/A)", await RunnerProcess.start(spec(twin))],
    ["sluice's engine in-process, no HTTP (speculation on)", await RunnerProcess.start(engine("ngram"))],
    ["sluice's engine in-process, no HTTP (speculation off)", await RunnerProcess.start(engine("off"))],
  ];
  for (const [, r] of runners) for (let w = 0; w < warm; w++) await r.run();
  const peer = buildPeer();
  const before = await settled(on, "stories260k");
  const results: Record<string, number[]> = Object.fromEntries([...runners.map(([n]) => [n, []]), ["llama2.c run.c -O3"]].map((x) => [x[0], []]));
  // CPU per token of the two sides of an HTTP run (all threads of the server process, and of the
  // client's process), from /proc's schedstat: on two cores their sum bounds the rate.
  const servers = new Map<string, ServerProcess>([[runners[0]![0], on], [runners[1]![0], fresh], [runners[2]![0], off], [runners[3]![0], twin]]);
  // The in-process engine's runner: its process's CPU is the engine's, with no client.
  const cpu: Record<string, { server: number[]; client: number[] }> = Object.fromEntries(runners.map(([n]) => [n, { server: [], client: [] }]));
  const processCpuUs = (pid: number) => threadsCpu(pid).reduce((a, t) => a + t.cpuNs, 0) / 1000;
  for (let i = 0; i < timed; i++) {
    for (const [name, r] of rotated(runners, i)) {
      const server = servers.get(name);
      const [s0, c0] = [server ? processCpuUs(server.pid) : 0, processCpuUs(r.pid)];
      results[name]!.push((await r.run()).tokPerS);
      const client = (processCpuUs(r.pid) - c0) / TOKENS;
      if (server) {
        cpu[name]!.server.push((processCpuUs(server.pid) - s0) / TOKENS);
        cpu[name]!.client.push(client);
      } else cpu[name]!.server.push(client);
    }
    if (typeof peer !== "string") results["llama2.c run.c -O3"]!.push(runPeer(peer.bin, prompts[warm + i]!));
  }
  const after = await settled(on, "stories260k");
  for (const [, r] of runners) await r.close();
  if (typeof peer !== "string") peer.remove();
  // The same text, prompt by prompt: the timed prompts again (the server with speculation now has
  // its own answers to them as drafts), and as many it has never seen.
  let same = 0;
  const checked = [...prompts.slice(warm), ...storyPrompts(warm + timed, timed)];
  for (const p of checked) if ((await greedyText(on, "stories260k", p, TOKENS, eos)) === (await greedyText(off, "stories260k", p, TOKENS, eos))) same++;
  const offRate = median(results["sluice --speculate off"]!);
  const peerRate = typeof peer === "string" ? NaN : median(results["llama2.c run.c -O3"]!);
  const rows = Object.entries(results)
    .filter(([, v]) => v.length > 0)
    .map(([name, v]) => [name, median(v).toFixed(0), ratio(median(v), offRate), Number.isNaN(peerRate) ? "—" : ratio(median(v), peerRate)]);
  const drafted = after.draft - before.draft;
  const accepted = after.accepted - before.accepted;
  const generated = after.generated - before.generated;
  const steps = after.steps - before.steps;
  note(
    `**A. stories260K, greedy, one stream through HTTP** (the openai client streaming, in a process of its own; ${TOKENS} tokens each with the end token banned; ` +
      `${warm + timed} distinct story openings, each sent once to each runner (every runner takes the next of the same list): a server with speculation drafts from what the account's earlier answers went on with, ` +
      "so it has learnt the account's other stories but never the one timed; " +
      "a second `--speculate off` server set up alike (an A/A twin: how far two identical servers differ in the same run), " +
      "a second server with speculation whose every request comes from a new account (so drafts come from the request's own text only: what an account gets before it has history), " +
      "and, for comparison, the model worker's own code (scheduler, KV cache, sampler, detokeniser) driven in a process of its own without the HTTP thread, the messages to it and the client; " +
      `${timed} timed runs per runner, interleaved (each runner first in turn), after ${warm} untimed ones on top of the servers' own warm-up; medians). ` +
      `run.c runs the same prompts (greedy, -n 256: its rate counts every forward pass, prompt included, up to the end of the story)` +
      `${typeof peer === "string" ? ` — not run: ${peer}` : ""}. Same text with speculation on and off: ${same}/${checked.length} prompts (the ${timed} timed ones again, and ${timed} new).\n\n` +
      table(["runner", "decode tok/s (median)", "vs --speculate off (target ≥ 1.3×)", "vs run.c (target ≥ 1.0×)"], rows) +
      `\n\nOver the timed runs the server with speculation made ${generated} tokens in ${steps} model runs (${(generated / Math.max(1, steps)).toFixed(2)} per run); ` +
      `${drafted} draft tokens checked, ${accepted} accepted (${((100 * accepted) / Math.max(1, drafted)).toFixed(0)}%). ` +
      "The gain rests on stories260K's answers to one account repeating each other's phrasing (part E): requests from a new account, drafted from their own text only, run about as fast as without speculation, and so would an account whose answers share little.\n\n" +
      "Where an HTTP run's time goes on this machine's two cores: CPU per generated token of the server process (all its threads: the model worker, the HTTP thread, the JIT) and of the client's process " +
      "(the openai client parsing the stream), medians over the timed runs (each run's CPU over its tokens, the request's own work included). " +
      "Both run at once, so no rate above two cores' worth of their sum is possible, whatever the server does (the in-process engine's rows: its process's threads, the JIT compiler's included); run.c, one thread and no client, spends 1/rate per token:\n\n" +
      table(
        ["runner", "server (or engine) CPU µs/token", "client CPU µs/token", "together", "rate the cores could give at most", "vs run.c"],
        runners.map(([name]) => {
          const [server, client] = [median(cpu[name]!.server), servers.has(name) ? median(cpu[name]!.client) : 0];
          const bound = 2e6 / (server + client);
          return [name, server.toFixed(0), servers.has(name) ? client.toFixed(0) : "—", (server + client).toFixed(0), bound.toFixed(0), Number.isNaN(peerRate) ? "—" : ratio(bound, peerRate)];
        }),
      ),
  );
}

// ---------------------------------------------------------------- B. a copy-heavy request

async function copyHeavy(on: ServerProcess, off: ServerProcess, task: CopyTask): Promise<void> {
  const runs = quick ? 2 : 7;
  // Each measured request comes from an account of its own: the model answers every prompt with
  // the same text, and an account's earlier answer is a draft for its next (history.ts), so a
  // second request from one account is drafted from the whole answer. That case has a row of its
  // own, from one account that asks again and again.
  const keys = new Map([on, off].map((s) => [s, s.newAccountKeys("copy", runs + 3)] as const));
  const fresh = async (s: ServerProcess) => new OpenAI({ apiKey: (await keys.get(s)!).pop()!, baseURL: `${s.url}/v1`, maxRetries: 0, timeout: 600_000 });
  const measure = async (c: OpenAI) => 1000 / tpot(await streamChat(c, task.id, task.prompt, 400));
  const again = await fresh(on);
  for (const c of [await fresh(on), await fresh(off), again]) await measure(c);
  const rates: Record<"on" | "off" | "again", number[]> = { on: [], off: [], again: [] };
  let [drafted, accepted] = [0, 0];
  for (let i = 0; i < runs; i++) {
    const [a, b] = [await fresh(on), await fresh(off)];
    const before = await settled(on, task.id);
    rates.on.push(await measure(a));
    const after = await settled(on, task.id);
    drafted += after.draft - before.draft;
    accepted += after.accepted - before.accepted;
    rates.off.push(await measure(b));
    rates.again.push(await measure(again));
  }
  const greedy = async (c: OpenAI) => (await c.chat.completions.create({ model: task.id, messages: [{ role: "user", content: task.prompt }], temperature: 0, max_tokens: 400 })).choices[0]!.message.content ?? "";
  const [a, b, c] = [await greedy(await fresh(on)), await greedy(await fresh(off)), await greedy(again)];
  const offRate = median(rates.off);
  note(
    `**B. A copy-heavy request**: the prompt holds a 240-word passage and the model answers with it again, every 20th word changed (a scripted model of the ~50M shape: 9 layers, hidden 512, 32k vocabulary, fused graph, ` +
      `so its runs cost what such a model's do; its weights make it answer with exactly that text). Greedy, streamed, ${runs} runs each, interleaved, medians; ` +
      "each measured request from a new account, so that only the request's own text is drafted from. " +
      `Same text on and off: ${a === b && c === b ? "yes" : "NO"}; the scripted answer: ${a === task.answer ? "yes" : "no"}.\n\n` +
      table(
        ["server", "decode tok/s (median)", "vs --speculate off (target ≥ 2×)"],
        [
          ["speculation on (default), a new account each time", median(rates.on).toFixed(1), ratio(median(rates.on), offRate)],
          ["--speculate off", offRate.toFixed(1), "1.00×"],
          ["speculation on, one account asking again (drafted from its own earlier answer too; not the target's case)", median(rates.again).toFixed(1), ratio(median(rates.again), offRate)],
        ],
      ) +
      `\n\nIn the new accounts' timed runs ${drafted} draft tokens were checked, ${accepted} accepted (${((100 * accepted) / Math.max(1, drafted)).toFixed(0)}%).`,
  );
}

// ---------------------------------------------------------------- C. 16 streams

async function sixteenStreams(on: ServerProcess, off: ServerProcess, twin: ServerProcess): Promise<void> {
  const rounds = quick ? 1 : 15;
  // Wall time and the server process's CPU per token (all its threads, from /proc's schedstat):
  // on two busy cores a round's wall time varies by ±10% between two servers set up alike, what
  // the server spends per token much less.
  const round = async (s: ServerProcess, r: number) => {
    const [t0, c0] = [performance.now(), sumCpu(serverCpuUs(s.pid))];
    // Round r's 16 prompts, the same for every server, none sent before (see storyPrompts).
    const prompts = storyPrompts(16 * r, 16);
    const results = await Promise.all(prompts.map((p) => streamChat(client(s), "stories260k", p, 128)));
    const tokens = results.reduce((a, x) => a + x.tokens, 0);
    return { rate: tokens / ((performance.now() - t0) / 1000), cpuUs: (sumCpu(serverCpuUs(s.pid)) - c0) / tokens };
  };
  const servers = { on, off, twin };
  type Name = keyof typeof servers;
  const names = Object.keys(servers) as Name[];
  const warmRounds = quick ? 1 : 6;
  for (let w = 0; w < warmRounds; w++) for (const k of names) await round(servers[k], w);
  const before = await settled(on, "stories260k");
  const runs: Record<Name, { rate: number; cpuUs: number }[]> = { on: [], off: [], twin: [] };
  for (let r = 0; r < rounds; r++) {
    // Each server goes first, second and third in turn.
    for (const k of rotated(names, r)) runs[k].push(await round(servers[k], warmRounds + r));
  }
  const after = await settled(on, "stories260k");
  const [rate, cpu] = [(k: Name) => median(runs[k].map((x) => x.rate)), (k: Name) => median(runs[k].map((x) => x.cpuUs))];
  note(
    `**C. 16 concurrent streams of stories260K** (greedy, 128 tokens each; 16 distinct story openings per round, none sent twice; ${rounds} rounds per server, interleaved (each server first, second and third in turn), after untimed ones; the median round's aggregate tokens/s, and the server process's CPU per token over the round, all threads, from /proc's schedstat). ` +
      `A second \`--speculate off\` server, set up alike, measures how far two identical servers differ in the same run: a ratio within that spread says nothing either way:\n\n` +
      table(
        ["server", "aggregate tok/s (median round)", "vs --speculate off (target ≥ 1.0×)", "server CPU µs per token (median round)", "off's CPU per token vs this"],
        [
          ["speculation on (default)", rate("on").toFixed(0), ratio(rate("on"), rate("off")), cpu("on").toFixed(1), ratio(cpu("off"), cpu("on"))],
          ["--speculate off", rate("off").toFixed(0), "1.00×", cpu("off").toFixed(1), "1.00×"],
          ["--speculate off, its twin (A/A)", rate("twin").toFixed(0), ratio(rate("twin"), rate("off")), cpu("twin").toFixed(1), ratio(cpu("off"), cpu("twin"))],
        ],
      ) +
      `\n\nDraft tokens checked during the timed rounds: ${after.draft - before.draft}, accepted ${after.accepted - before.accepted} (the planner keeps plain decode steps where verification measured slower; it tries it again now and then, ends a trial that is clearly slower early, and skips every other trial its last measured costs predict to lose).`,
  );
}

// ---------------------------------------------------------------- D. warm start

async function warmStart(models: string): Promise<void> {
  const total = quick ? 4000 : 24_000;
  const zero = () => Object.fromEntries(THREAD_GROUPS.map((g) => [g, 0])) as Record<ThreadGroup, number>;
  const trial = async (warmupMs: number | null) => {
    const t0 = performance.now();
    // Loaded at start (a model loaded on demand skips the warm-up: its first request waits).
    const s = await startServerProcess(models, ["--preload", "all", "--speculate", "off", ...(warmupMs === null ? [] : ["--warmup-ms", String(warmupMs)])]);
    const startMs = performance.now() - t0;
    const c = client(s);
    let made = 0;
    const first = { tokens: 0, ms: 0, cpu: zero() };
    const late: number[] = [];
    const lateCpu = { tokens: 0, cpu: zero() };
    let cpu0 = serverCpuUs(s.pid);
    for (let i = 0; made < total; i++) {
      const r = await streamChat(c, "stories260k", STORY_PROMPTS[i % STORY_PROMPTS.length]!, 128, { logitBias: { 1: -100, 2: -100 } });
      const cpu = serverCpuUs(s.pid);
      const into = made < 1000 ? first.cpu : made >= total - 6000 ? lateCpu.cpu : null;
      if (into) for (const g of THREAD_GROUPS) into[g] += cpu[g] - cpu0[g];
      if (made < 1000) {
        first.tokens += r.tokens - 1;
        first.ms += r.span;
      } else if (made >= total - 6000) {
        late.push(1000 / tpot(r));
        lateCpu.tokens += r.tokens;
      }
      cpu0 = cpu;
      made += r.tokens;
    }
    await s.stop();
    const firstRate = first.tokens / (first.ms / 1000);
    const warmed = median(late);
    const perToken = (cpu: Record<ThreadGroup, number>, tokens: number) => Object.fromEntries(THREAD_GROUPS.map((g) => [g, cpu[g] / tokens])) as Record<ThreadGroup, number>;
    return { startMs, firstRate, warmed, firstCpu: perToken(first.cpu, first.tokens), warmedCpu: perToken(lateCpu.cpu, lateCpu.tokens) };
  };
  // Fresh starts alternate between the two settings (the load of a shared machine drifts); medians over them.
  const starts = quick ? 1 : 3;
  const settings = [["default warm-up (2 s per model at most)", null], ["--warmup-ms 0", 0]] as const;
  const trials = new Map<string, Awaited<ReturnType<typeof trial>>[]>(settings.map(([label]) => [label, []]));
  for (let k = 0; k < starts; k++) for (const [label, w] of settings) trials.get(label)!.push(await trial(w));
  const rows: (string | number)[][] = [];
  const cpuRows: (string | number)[][] = [];
  for (const [label] of settings) {
    const ts = trials.get(label)!;
    const med = (f: (t: (typeof ts)[number]) => number) => median(ts.map(f));
    rows.push([
      label,
      med((t) => t.startMs).toFixed(0),
      med((t) => t.firstRate).toFixed(0),
      med((t) => t.warmed).toFixed(0),
      `${med((t) => (100 * t.firstRate) / t.warmed).toFixed(0)}%`,
      `${med((t) => (100 * sumCpu(t.warmedCpu)) / sumCpu(t.firstCpu)).toFixed(0)}%`,
    ]);
    for (const g of THREAD_GROUPS) cpuRows.push([label, g, med((t) => t.firstCpu[g]).toFixed(0), med((t) => t.warmedCpu[g]).toFixed(0), med((t) => t.firstCpu[g] - t.warmedCpu[g]).toFixed(0)]);
  }
  note(
    `**D. A fresh server's first 1,000 tokens** (stories260K, one stream, greedy, 128-token requests with the end token banned, --speculate off so that only the warm-up differs; ` +
      `${starts} fresh starts per setting, alternating, medians over them): ` +
      `the rate over the first 1,000 tokens after start against the median rate of the requests after ${total - 6000} tokens of the same server; ` +
      `CPU is the server process's (all threads, from /proc's schedstat) per token over the same spans: speed as CPU allows, steadier than wall time on a busy machine.\n\n` +
      table(["start", "spawn → banner ms", "first 1,000 tokens tok/s", "warmed tok/s", "first 1,000 vs warmed (target ≥ 90%)", "by CPU per token"], rows) +
      `\n\nWhere the first 1,000 tokens' extra CPU goes (µs of CPU per token, by thread): the warm-up at load warms the model worker's code; what it does not reach is the HTTP thread's per-token path ` +
      `(the worker's messages, the SSE chunks, Bun's socket writes) and the JIT compiler threads, which keep compiling in the background while the first requests run.\n\n` +
      table(["start", "threads", "first 1,000 tokens µs/token", "warmed µs/token", "extra"], cpuRows),
  );
}

// ---------------------------------------------------------------- E. the economics on stories260K

async function economics(dir: string): Promise<void> {
  const decoder = await NodeDecoder.create(dir, { providers: ["cpu"], threads: 1 });
  const kv = new FusedKvBackend(decoder, 1 << 26);
  const tokenizer = TextTokenizer.load(dir);
  const argmax = (x: Float32Array) => {
    let b = 0;
    for (let i = 1; i < x.length; i++) if (x[i]! > x[b]!) b = i;
    return b;
  };
  // Greedy stories from part A's prompts (the end tokens banned), as part A generates them.
  const stories: { prompt: number[]; out: number[] }[] = [];
  for (const p of storyPrompts(0, quick ? 8 : 48)) {
    const prompt = await tokenizer.encode(renderChatPrompt(tokenizer, [{ role: "user", content: p }]), { addSpecialTokens: false });
    const seq = kv.open(512);
    let logits = await kv.prefill(seq, prompt);
    const out: number[] = [];
    for (let i = 0; i < TOKENS; i++) {
      logits[1] = logits[2] = -Infinity;
      out.push(argmax(logits));
      [logits] = (await kv.decode([seq], [out.at(-1)!])) as [Float32Array];
    }
    kv.close(seq);
    stories.push({ prompt, out });
  }
  // Tokens per run with drafts of up to w - 1 tokens, taken as they come (any match length): from
  // the request's own text alone, or with the account's earlier stories too (each story is learnt
  // after it is replayed, as the server learns a request's text when it ends).
  const perRun = (w: number, withHistory: boolean) => {
    let runs = 0;
    let made = 0;
    const history = withHistory ? { table: new NgramHistory(), salt: ownerSalt("bench") } : null;
    for (const { prompt, out } of stories) {
      const d = new NgramDrafter(prompt, [out[0]!], history);
      for (let i = 1; i < out.length; ) {
        const draft = d.propose(w - 1).tokens;
        let ok = 0;
        while (ok < draft.length && i + ok < out.length && draft[ok] === out[i + ok]) ok++;
        const n = Math.min(ok + 1, out.length - i);
        for (let j = 0; j < n; j++) d.push(out[i + j]!);
        i += n;
        made += n;
        runs++;
      }
      history?.table.learn(history.salt, prompt.concat(out), prompt.length);
    }
    return made / runs;
  };
  // Each width in blocks of runs of that width alone (a graph run after another graph's runs pays
  // for its cold caches: blocks measure each in its steady state), over 120 cached positions.
  const seq = kv.open(512);
  await kv.prefill(seq, stories[0]!.prompt.concat(stories[0]!.out).slice(0, 120));
  const widths = [0, 1, 2, 3, 4, 5, 6, 8, 9];
  const times = new Map<number, number[]>(widths.map((w) => [w, []]));
  for (let round = 0; round < (quick ? 2 : 6); round++) {
    for (const w of widths) {
      for (let i = 0; i < 120; i++) {
        const t0 = performance.now();
        if (w === 0) await kv.decode([seq], [5]);
        else await kv.verify([seq], [Array.from({ length: w }, (_, j) => 5 + j)]);
        if (i >= 20) times.get(w)!.push(performance.now() - t0);
        kv.truncate(seq, 120);
      }
    }
  }
  // Alternating the two graphs, as a round of verification among decode steps does.
  const mixed: number[] = [];
  for (let i = 0; i < (quick ? 60 : 600); i++) {
    const t0 = performance.now();
    if (i % 2) await kv.decode([seq], [5]);
    else await kv.verify([seq], [[5, 6, 7, 8]]);
    mixed.push(performance.now() - t0);
    kv.truncate(seq, 120);
  }
  kv.close(seq);
  await decoder.release();
  const step = median(times.get(0)!);
  const rows = widths.map((w) => {
    const ms = median(times.get(w)!);
    const [own, both] = w <= 1 ? [1, 1] : [perRun(w, false), perRun(w, true)];
    return [
      w === 0 ? "decode step (one-token graph)" : `verification, ${w} per row (general graph)`,
      (1000 * ms).toFixed(0),
      `${(ms / step).toFixed(2)}×`,
      own.toFixed(2),
      `${(own / (ms / step)).toFixed(2)}×`,
      both.toFixed(2),
      `${(both / (ms / step)).toFixed(2)}×`,
      `${((1.3 * ms) / step).toFixed(2)}`,
    ];
  });
  note(
    `**E. Why A is what it is** (stories260K's fused graph as the server loads it, one thread, 120 cached positions, ONNX Runtime through the engine's KV cache in this process; ` +
      `each kind of run in blocks of its own, medians). "Tokens per run" replays the server's drafter over stories260K's own greedy stories for the first ${stories.length} prompts of part A (drafts of up to w - 1 tokens): ` +
      "from the request's own text alone (prompt lookup), and with the account's earlier stories as well, each story learnt after it is replayed as the server does when a request ends (so the first story has none); " +
      `what verification at that width would yield if it ran every round; the gain bounds what speculation can do for the model's runs alone.\n\n` +
      table(
        ["run", "µs (median)", "vs a decode step", "tokens per run (prompt lookup)", "its tokens per decode step's time", "tokens per run (with earlier stories)", "its tokens per decode step's time", "tokens per run needed for 1.3×"],
        rows,
      ) +
      `\n\nA verification run of 4 alternating with decode steps (each graph's caches cold after the other's) took ${(1000 * median(mixed)).toFixed(0)} µs per run on average over both kinds, ` +
      `against ${(500 * (step + median(times.get(4)!))).toFixed(0)} µs for the same runs in blocks: so the planner compares whole regimes (every round verifying, on the general graph, or none) rather than single rounds.`,
  );
}

// ---------------------------------------------------------------- main

async function main() {
  mkdirSync(join(ROOT, "models"), { recursive: true });
  if (!hasStories && (only.has("A") || only.has("C") || only.has("D"))) console.warn(`stories260K absent at ${STORIES}: parts A, C and D skipped`);
  const dirs: string[] = [];
  if (hasStories) dirs.push(await storiesDir());
  const task = only.has("B") ? await copyTask() : null;
  if (task) dirs.push(task.dir);
  // Each server sees only the models of this run.
  const models = mkdtempSync(join(tmpdir(), "sluice-bench-spec-"));
  for (const d of dirs) symlinkSync(d, join(models, d.split("/").at(-1)!));
  const storiesOnly = mkdtempSync(join(tmpdir(), "sluice-bench-spec-stories-"));
  if (hasStories) symlinkSync(dirs[0]!, join(storiesOnly, "stories260k"));
  const load = loadavg()[0]!.toFixed(1);
  try {
    if (only.has("A") || only.has("B") || only.has("C")) {
      const on = await startServerProcess(models, ["--preload", "all"]);
      const off = await startServerProcess(models, ["--preload", "all", "--speculate", "off"]);
      // Set up as `off`: parts A and C read their ratios against how far two alike differ.
      const twin = await startServerProcess(models, ["--preload", "all", "--speculate", "off"]);
      // Set up as `on`, for part A's requests from a new account each (nothing learnt before).
      const fresh = hasStories && only.has("A") ? await startServerProcess(models, ["--preload", "all"]) : null;
      try {
        if (fresh) await singleStream(on, off, twin, fresh, dirs[0]!);
        if (task) await copyHeavy(on, off, task);
        if (hasStories && only.has("C")) await sixteenStreams(on, off, twin);
      } finally {
        await Promise.all([on.stop(), off.stop(), twin.stop(), fresh?.stop()]);
      }
    }
    if (hasStories && only.has("D")) await warmStart(storiesOnly);
    if (hasStories && only.has("E")) await economics(dirs[0]!);
  } finally {
    rmSync(models, { recursive: true, force: true });
    rmSync(storiesOnly, { recursive: true, force: true });
  }
  writeSection(
    "Speculative decoding and warm start (bench/speculation.ts)",
    `${new Date().toISOString().slice(0, 10)} on ${machine()}; 1-minute load average ${load} at the start, ${loadavg()[0]!.toFixed(1)} at the end (${cpus().length} cores). ` +
      "Two servers in processes of their own, one with speculation on (the default) and one with `--speculate off`, measured side by side in the same run; both loading their models at start (`--preload all`) and warming them up as `serve` then does by default." +
      `${quick ? " A --quick run: few runs, for checking the script only." : ""}\n\n${sections.join("\n\n")}\n`,
  );
}

await main();
