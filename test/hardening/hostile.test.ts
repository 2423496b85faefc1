// Hundreds of hostile requests (test/hardening/hostile-cases.ts: every class of issue 19 and more)
// against one real `serve` process with four kinds of model: none gets a 5xx, no worker crashes, and
// after every batch a normal request on each model answers. How long refusals take is measured by
// bench/hostile-refusals.ts (docs/BENCHMARKS.md), not here: a busy machine stretches wall time, and
// what bounds it (the compile thread's CPU budget, --max-schema-seconds) is counted, not timed.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { existsSync, symlinkSync } from "node:fs";
import { availableParallelism } from "node:os";
import { join } from "node:path";
import { TextTokenizer } from "../../src/engine/text/tokenizer.ts";
import { buildSyntheticVlm, importLlama2c } from "../../src/modelkit/index.ts";
import { linkCachedModel, tinyModelsRoot } from "../helpers/models.ts";
import { hasStories, STORIES_DIR, tempDir } from "../helpers/paths.ts";
import { spawnServe, type ServeProcess } from "../helpers/serve-process.ts";
import { hostileCases, type HostileCase, type HostileModels } from "./hostile-cases.ts";

const TEXT = "hostile/tiny";
const TOOLS = "hostile/qwen";
const VISION = "hostile/vlm";
const STORIES = "hostile/stories260k";
/** Cases sent at once; then every model is probed. */
const BATCH = 8;

if (!hasStories) console.warn(`hostile requests: stories260K is absent (${STORIES_DIR}); running without it`);

let server: ServeProcess;
let headers: Record<string, string>;
let models: HostileModels;
let cases: HostileCase[];
const modelsDir = tempDir("sluice-hostile-models-");
const dataDir = tempDir("sluice-hostile-data-");

beforeAll(async () => {
  const root = tinyModelsRoot();
  const tiny = await linkCachedModel(modelsDir.path, "hostile-tiny", { preset: "tiny-bytes", seed: 5, id: TEXT });
  const qwen = await linkCachedModel(modelsDir.path, "hostile-qwen", { preset: "tiny-qwen3", seed: 7, id: TOOLS });
  const vlm = join(modelsDir.path, "vlm");
  buildSyntheticVlm(vlm, { id: VISION });
  let stories: string | null = null;
  if (hasStories) {
    stories = join(root, "hostile-stories260k");
    if (!existsSync(join(stories, "sluice.json"))) await importLlama2c(join(STORIES_DIR, "stories260K.bin"), join(STORIES_DIR, "tok512.bin"), { id: STORIES, outDir: stories });
    symlinkSync(stories, join(modelsDir.path, "stories"));
  }
  // A real serve process: the client's work (building 15 MB bodies) is not the server's thread's.
  // Compile limits tighter than the defaults, so a queue of them stays short (see the README's limits).
  // Every model loaded at start and kept (--preload all, --keep-alive -1): the probes time answers, not loads.
  server = await spawnServe(["--data", dataDir.path, "--models", modelsDir.path, "--no-demo", "--device", "cpu", "--max-schema-seconds", "0.5", "--max-schema-states", "20000", "--preload", "all", "--keep-alive", "-1"]);
  headers = { authorization: `Bearer ${server.key}`, "content-type": "application/json" };
  const tinyTok = TextTokenizer.load(tiny);
  models = {
    text: TEXT,
    tools: TOOLS,
    vision: VISION,
    stories: stories ? STORIES : null,
    vocab: {
      [TEXT]: tinyTok.vocabSize,
      [TOOLS]: TextTokenizer.load(qwen).vocabSize,
      [VISION]: TextTokenizer.load(vlm).vocabSize,
      ...(stories ? { [STORIES]: TextTokenizer.load(stories).vocabSize } : {}),
    },
    xToken: tinyTok.tokenToId("x")!,
  };
  const listed = (await (await fetch(`${server.url}/v1/models`, { headers })).json()) as { data: { id: string }[] };
  expect(listed.data.map((m) => m.id).sort()).toEqual(Object.keys(models.vocab).sort());
  cases = await hostileCases(models);
}, 180_000);

afterAll(async () => {
  await server?.stop();
  modelsDir.remove();
  dataDir.remove();
});

/**
 * Batches of up to BATCH cases, with at most one schema per model in each: a model compiles one
 * schema at a time, and one account's concurrent schemas wait for each other (its own doing).
 */
function batches(all: HostileCase[]): HostileCase[][] {
  const compiles = (c: HostileCase) => typeof c.body !== "string" && ("response_format" in c.body || "tools" in c.body);
  const left = [...all];
  const out: HostileCase[][] = [];
  while (left.length > 0) {
    const batch: HostileCase[] = [];
    const compiling = new Set<string>();
    for (let i = 0; i < left.length && batch.length < BATCH; ) {
      const c = left[i]!;
      if (compiles(c) && compiling.has(c.model)) {
        i++;
        continue;
      }
      if (compiles(c)) compiling.add(c.model);
      batch.push(c);
      left.splice(i, 1);
    }
    out.push(batch);
  }
  return out;
}

interface Outcome {
  name: string;
  status: number;
  ms: number;
  /** The refusal's OpenAI error (a 4xx body, or a stream's final error event). */
  error: { type: string; code: string | null; message: string } | null;
}

async function send(c: HostileCase): Promise<Outcome> {
  const body = typeof c.body === "string" ? c.body : JSON.stringify({ model: c.model, messages: [{ role: "user", content: "hi" }], ...c.body });
  const t0 = performance.now();
  const res = await fetch(`${server.url}/v1/chat/completions`, { method: "POST", headers, body, signal: AbortSignal.timeout(60_000) });
  const text = await res.text();
  const ms = performance.now() - t0;
  let error: Outcome["error"] = null;
  if (res.status >= 400) error = (JSON.parse(text) as { error: NonNullable<Outcome["error"]> }).error;
  else if (res.headers.get("content-type")?.startsWith("text/event-stream")) {
    const last = text.trim().split("\n\n").at(-1)!;
    if (last !== "data: [DONE]") error = (JSON.parse(last.slice(6)) as { error: NonNullable<Outcome["error"]> }).error;
  }
  return { name: `${c.model} ${c.name}`, status: res.status, ms, error };
}

/** A normal request on every model, each answered. */
async function probe(): Promise<string[]> {
  const slow: string[] = [];
  await Promise.all(
    Object.keys(models.vocab).map(async (model) => {
      const res = await fetch(`${server.url}/v1/chat/completions`, { method: "POST", headers, body: JSON.stringify({ model, messages: [{ role: "user", content: "hello" }], max_tokens: 2 }) });
      const text = await res.text();
      if (res.status !== 200) slow.push(`${model}: ${res.status} ${text.slice(0, 200)}`);
    }),
  );
  return slow;
}

test("hostile requests: no 5xx, no worker crash, every model answers after every batch", async () => {
  expect(cases.length).toBeGreaterThanOrEqual(500);
  const problems: string[] = [];
  const outcomes: Outcome[] = [];
  const packed = batches(cases);
  for (let i = 0; i < packed.length; i++) {
    const batch = await Promise.all(packed[i]!.map(send));
    outcomes.push(...batch);
    if (process.env.HOSTILE_TRACE) for (const o of batch) console.log(`${o.status} ${Math.round(o.ms)}ms ${o.name} ${o.error?.code ?? ""} ${o.error?.message.slice(0, 120) ?? ""}`);
    for (const o of batch) {
      if (o.status >= 500) problems.push(`${o.name}: ${o.status} ${o.error?.message}`);
      if (o.error?.type === "server_error") problems.push(`${o.name}: ${o.error.message}`);
    }
    for (const p of await probe()) problems.push(`after batch ${i} (${packed[i]!.map((c) => c.name).join("; ")}): ${p}`);
  }
  const refused = outcomes.filter((o) => o.error);
  const byStatus = outcomes.reduce<Record<string, number>>((m, o) => ((m[o.status] = (m[o.status] ?? 0) + 1), m), {});
  const worst = Math.max(...refused.map((o) => o.ms));
  console.log(`${outcomes.length} hostile requests: ${JSON.stringify(byStatus)}; ${refused.length} refused, the slowest refusal in ${Math.round(worst)} ms`);
  expect(problems).toEqual([]);
  // Refusals name what was wrong: the schema limits say which one and where.
  const limits = refused.filter((o) => o.error!.code === "schema_too_complex");
  expect(limits.length).toBeGreaterThan(20);
  for (const o of limits) expect(o.error!.message).toMatch(/serve --max-schema-[a-z-]+/);
  const metrics = await (await fetch(`${server.url}/metrics`)).text();
  for (const model of Object.keys(models.vocab)) {
    expect(metrics).toContain(`sluice_model_worker_crashes_total{model="${model}"} 0`);
    expect(metrics).toContain(`sluice_model_available{model="${model}"} 1`);
  }
}, 600_000);

test("schemas refused by time at once on every model share the cores' limit: each refusal names its share", async () => {
  // The compile threads count themselves (one per model): with more of them at once than cores,
  // each may spend --max-schema-seconds × cores / compiling of CPU, so that a burst is refused in
  // about the limit's wall time, not the limit × compiling / cores (bench/hostile-refusals.ts).
  const cores = availableParallelism();
  const names = Object.keys(models.vocab);
  const outcomes = await Promise.all(
    names.map((model) =>
      send({ name: "a pattern of 4,000 characters", model, body: { response_format: { type: "json_schema", json_schema: { name: "s", schema: { type: "string", pattern: "a".repeat(4000), $comment: model } } }, max_tokens: 2 } }),
    ),
  );
  for (const o of outcomes) {
    expect(o.status).toBe(400);
    expect(o.error!.code).toBe("schema_too_complex");
    expect(o.error!.message).toMatch(/took more than [0-9.]+ s to compile.*serve --max-schema-seconds/);
  }
  const shared = outcomes.filter((o) => / s shared by [0-9]+ schemas compiling at once on [0-9]+ cores/.test(o.error!.message));
  // The first refused was refused while every other still compiled (all need far more than their limit).
  if (names.length > cores) expect(shared.length).toBeGreaterThan(0);
  else expect(shared).toEqual([]);
  for (const o of shared) {
    const [, n] = o.error!.message.match(new RegExp(`\\(0\\.5 s shared by ([0-9]+) schemas compiling at once on ${cores} cores\\)`))!;
    expect(Number(n)).toBeGreaterThan(cores);
  }
}, 120_000);
