// Schemas compile off the model's decode loop: while another account keeps the model's compile
// thread busy, a stream on the same model keeps at least half its tokens per second. Two kinds of
// load, each schema new (never cached), in rounds of their own: patterns that run into the time
// limit, and schemas that compile quickly but whose token budget tables (the fewest tokens that
// finish a document, on Qwen3's 151k-token vocabulary) take about a second; those
// requests ask for fewer tokens than the shortest document, so they are refused once the tables
// say so. Measured in the same test, alone and under load in turns (so a machine busy with other
// work slows both alike); the medians are compared.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { join } from "node:path";
import { TextTokenizer } from "../../src/engine/text/tokenizer.ts";
import { openSqliteStore } from "../../src/store/index.ts";
import { unlimitedAccountKey } from "../helpers/accounts.ts";
import { linkCachedModel } from "../helpers/models.ts";
import { tempDir } from "../helpers/paths.ts";
import { spawnServe, type ServeProcess } from "../helpers/serve-process.ts";

const MODEL = "isolation/qwen";
const TOKENS = 200;
/** Rounds per kind of load. */
const ROUNDS = 3;
let server: ServeProcess;
let victim: Record<string, string>;
let hostile: Record<string, string>;
let noEos: Record<number, number>;
const models = tempDir("sluice-isolation-models-");
const data = tempDir("sluice-isolation-data-");

beforeAll(async () => {
  const dir = await linkCachedModel(models.path, "isolation-qwen", { preset: "tiny-qwen3", seed: 3, id: MODEL, reasoning: false });
  noEos = Object.fromEntries(TextTokenizer.load(dir).eosTokenIds.map((id) => [id, -100]));
  server = await spawnServe(["--data", data.path, "--models", models.path, "--no-demo", "--device", "cpu", "--max-schema-seconds", "3"]);
  victim = { authorization: `Bearer ${server.key}`, "content-type": "application/json" };
  // Another account, as an operator would create it (the server sees it at its next lookup).
  const store = openSqliteStore(join(data.path, "sluice.db"));
  hostile = { authorization: `Bearer ${await unlimitedAccountKey(store, "mallory")}`, "content-type": "application/json" };
  await store.close();
}, 60_000);

afterAll(async () => {
  await server?.stop();
  models.remove();
  data.remove();
});

/** Tokens per second of one stream, from its first content to its end. */
async function victimRate(): Promise<number> {
  const res = await fetch(`${server.url}/v1/chat/completions`, {
    method: "POST",
    headers: victim,
    body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "go on" }], max_tokens: TOKENS, logit_bias: noEos, stream: true, stream_options: { include_usage: true } }),
  });
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = "";
  let first = 0;
  for (let c = await reader.read(); !c.done; c = await reader.read()) {
    text += decoder.decode(c.value, { stream: true });
    if (!first && /"content":"[^"]/.test(text)) first = performance.now();
  }
  const seconds = (performance.now() - first) / 1000;
  const usage = /"completion_tokens":(\d+)/.exec(text);
  if (!usage) throw new Error(`the stream ended without usage (${res.status}): ${text.slice(-300)}`);
  expect(usage[1]).toBe(String(TOKENS));
  return (TOKENS - 1) / seconds;
}

let n = 0;
/** A pattern that runs the compile thread into its time limit. */
const slowCompile = () => ({ type: "string", pattern: `${"a".repeat(3500)}${n++}` });
/** 250 required properties: compiled in a moment, but its budget tables take about a second. */
const slowBudget = () => {
  const names = Array.from({ length: 250 }, (_, i) => `p${i}_${n}`);
  n++;
  return { type: "object", properties: Object.fromEntries(names.map((k) => [k, { type: "integer" }])), required: names, additionalProperties: false };
};

/** Refusals by error code. */
type Refusals = Record<string, number>;

function hostileLoad(kind: "compile" | "budget"): { stop: () => Promise<Refusals> } {
  let running = true;
  const refused: Refusals = {};
  const loop = async (schema: () => object) => {
    while (running) {
      const res = await fetch(`${server.url}/v1/chat/completions`, {
        method: "POST",
        headers: hostile,
        body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "x" }], max_tokens: 4, response_format: { type: "json_schema", json_schema: { name: "s", schema: schema() } } }),
      });
      // Both kinds end in a 400: over the time limit, or max_tokens below the shortest document.
      const body = (await res.json()) as { error?: { code: string } };
      if (res.status === 400) refused[body.error!.code] = (refused[body.error!.code] ?? 0) + 1;
    }
  };
  const loops = kind === "compile" ? [loop(slowCompile), loop(slowCompile)] : [loop(slowBudget), loop(slowBudget), loop(slowBudget), loop(slowBudget)];
  return {
    stop: async () => {
      running = false;
      await Promise.all(loops);
      return refused;
    },
  };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

test("a stream keeps at least half its tokens/s while another account's schemas compile on the same model", async () => {
  await victimRate(); // warm up
  const alone: number[] = [];
  const loaded = { compile: [] as number[], budget: [] as number[] };
  const refused: Record<"compile" | "budget", Refusals> = { compile: {}, budget: {} };
  for (let round = 0; round < ROUNDS; round++) {
    for (const kind of ["compile", "budget"] as const) {
      alone.push(await victimRate());
      const load = hostileLoad(kind);
      // Let the compile thread get busy first.
      await Bun.sleep(300);
      loaded[kind].push(await victimRate());
      for (const [code, count] of Object.entries(await load.stop())) refused[kind][code] = (refused[kind][code] ?? 0) + count;
    }
  }
  const ratio = (kind: "compile" | "budget") => median(loaded[kind]) / median(alone);
  console.log(
    `victim stream: ${median(alone).toFixed(0)} tokens/s alone; ${median(loaded.compile).toFixed(0)} (${ratio("compile").toFixed(2)}×) while schemas ran into the time limit ` +
      `(refused: ${JSON.stringify(refused.compile)}), ${median(loaded.budget).toFixed(0)} (${ratio("budget").toFixed(2)}×) while budget tables were computed (refused: ${JSON.stringify(refused.budget)})`,
  );
  // The load was real: schemas were compiling and refused throughout; the budget tables were
  // computed and used (the refusal that names the shortest document comes from them).
  expect(refused.compile.schema_too_complex ?? 0).toBeGreaterThanOrEqual(ROUNDS);
  expect(refused.budget.max_tokens_too_small ?? 0).toBeGreaterThanOrEqual(ROUNDS);
  const metrics = await (await fetch(`${server.url}/metrics`)).text();
  expect(Number(new RegExp(`sluice_schemas_refused_total\\{model="${MODEL}"\\} (\\d+)`).exec(metrics)?.[1])).toBeGreaterThan(0);
  expect(ratio("compile")).toBeGreaterThanOrEqual(0.5);
  expect(ratio("budget")).toBeGreaterThanOrEqual(0.5);
}, 180_000);
