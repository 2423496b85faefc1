// serve --batch-invariant through the real server: a request's greedy and seeded tokens are a
// function of the request alone. On stories260K and the synthetic tiny-bytes model, each imported
// or built in fp32, fp16, q4 and q4f16, one request (the target) is sent alone with speculation
// off: the reference. Then, token for token and logprob for logprob, the same request gives it
//   - against 7 other concurrent requests, and against 15 (other accounts, other lengths);
//   - with speculation off, twice, and on, twice (the second drafted from the account's first answer);
//   - after a forced preemption (a higher priority takes its memory; it is recomputed and resumed),
//     on the JS binding;
//   - on a prefix-cache hit: a conversation that continues it, against the same conversation sent
//     cold.
// Without the option a 4-bit model's answers differ in these cells (issue 42; the mechanisms are
// measured in test/engine/batching/invariance.test.ts and docs/BENCHMARKS.md).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import type { HfImportDType } from "../../../src/modelkit/index.ts";
import { unlimitedAccountKey } from "../../helpers/accounts.ts";
import { importedSyntheticModel, importStoriesHf, syntheticModel } from "../../helpers/models.ts";
import { hasStories, STORIES_DIR, tempDir } from "../../helpers/paths.ts";
import { spawnServe } from "../../helpers/serve-process.ts";
import { startTestServer, type TestServer } from "../../helpers/server.ts";

if (!hasStories) console.warn(`skipping the stories260K models of the batch-invariance matrix: ${STORIES_DIR} is absent`);

const DTYPES: HfImportDType[] = ["fp32", "fp16", "q4", "q4f16"];
const MODELS = [...(hasStories ? DTYPES.map((d) => `stories-${d}`) : []), ...DTYPES.map((d) => `tiny-${d}`)];
const TOKENS = 64;
/** The target's cache capacity (a prompt of about 50 tokens and TOKENS: the class of 160). */
const TARGET_CAPACITY = 160;
/** Over the prefix cache's 16 tokens, so that a conversation continuing the target can hit it. */
const SYSTEM = "You tell short stories to children. Every story is kind, simple and happy, with a cat, a dog and a little girl.";
const OTHERS = ["Once upon a time", "The cat", "A little girl named Lily", "One day", "Tom and his dog", "The sun was", "In the park", "Mom said"];
const MODES = { greedy: { temperature: 0 }, seeded: { temperature: 0.9, seed: 4242 } } as const;
type Mode = keyof typeof MODES;

let models: ReturnType<typeof tempDir>;
/** Speculation off (the reference and most cells), on, and a small KV budget on the JS binding. */
const servers = {} as Record<"off" | "on" | "small", TestServer>;
const eos = new Map<string, number[]>();
/** Bytes one cached position of the model takes (its KV budget is sized from it). */
const perPosition = new Map<string, number>();

beforeAll(async () => {
  models = tempDir("sluice-invariant-");
  for (const dtype of DTYPES) {
    if (hasStories) importStoriesHf(models.path, `stories-${dtype}`, dtype);
    const spec = { preset: "tiny-bytes" as const, id: `tiny-${dtype}`, seed: 23 };
    if (dtype === "fp32" || dtype === "fp16") await syntheticModel(models.path, `tiny-${dtype}`, { ...spec, variant: "fused", dtype: dtype === "fp16" ? "float16" : "float32" });
    else await importedSyntheticModel(models.path, `tiny-${dtype}`, spec, dtype);
  }
  for (const model of MODELS) {
    const generation = (await Bun.file(join(models.path, model, "generation_config.json")).json()) as { eos_token_id: number | number[] };
    eos.set(model, [generation.eos_token_id].flat());
    const card = (await Bun.file(join(models.path, model, "sluice.json")).json()) as { graph: { kv_head_dim: number; kv_cache_dtype: string } };
    const config = (await Bun.file(join(models.path, model, "config.json")).json()) as { num_hidden_layers: number; num_key_value_heads: number };
    perPosition.set(model, config.num_hidden_layers * 2 * config.num_key_value_heads * card.graph.kv_head_dim * (card.graph.kv_cache_dtype === "float16" ? 2 : 4));
  }
  const engine = { batchInvariant: true, maxQueue: 128 };
  servers.off = await startTestServer({ modelsDir: models.path, engine: { ...engine, speculate: "off" } });
  servers.on = await startTestServer({ modelsDir: models.path, engine: { ...engine, speculate: "ngram" } });
  servers.small = await startTestServer({ modelsDir: models.path, engine: { ...engine, speculate: "off", binding: "node", kvBudgetBytes: smallBudget(), streamIntervalMs: 1 } });
}, 300_000);

afterAll(async () => {
  for (const s of Object.values(servers)) await s?.cleanup();
  models?.remove();
});

/** Room for 4 targets of the model with the largest cache per position: the target and two companions fit. */
const smallBudget = () => 4 * TARGET_CAPACITY * Math.max(...perPosition.values());

const client = (s: TestServer, apiKey = s.key) => new OpenAI({ apiKey, baseURL: `${s.url}/v1`, maxRetries: 0 });

type Message = { role: "system" | "user" | "assistant"; content: string };

function request(model: string, mode: Mode, messages: Message[], maxTokens = TOKENS) {
  return {
    model,
    messages,
    max_tokens: maxTokens,
    ...MODES[mode],
    logprobs: true,
    // Every answer runs its full length.
    logit_bias: Object.fromEntries(eos.get(model)!.map((t) => [String(t), -100])),
  };
}

const target = (model: string, mode: Mode) => request(model, mode, [{ role: "system", content: SYSTEM }, { role: "user", content: "Tell me about the brave little cat" }]);

interface Answer {
  /** Each token and its logprob, as the API gives them. */
  tokens: [string, number][];
  text: string;
  cached: number;
}

/** A streamed completion; `progress` counts the chunks that carried tokens. */
async function answer(c: OpenAI, req: ReturnType<typeof request> & { n?: number }, progress?: { chunks: number }): Promise<Answer> {
  const stream = await c.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  const out: Answer = { tokens: [], text: "", cached: 0 };
  for await (const chunk of stream) {
    const content = chunk.choices[0]?.logprobs?.content ?? [];
    for (const t of content) out.tokens.push([t.token, t.logprob]);
    if (content.length > 0 && progress) progress.chunks++;
    out.text += chunk.choices[0]?.delta.content ?? "";
    if (chunk.usage) out.cached = chunk.usage.prompt_tokens_details?.cached_tokens ?? 0;
  }
  return out;
}

/** The other requests of a batch: different prompts and lengths, half greedy, half seeded. */
function others(model: string, count: number) {
  return Array.from({ length: count }, (_, i) =>
    request(model, i % 2 ? "seeded" : "greedy", [{ role: "user", content: `${OTHERS[i % OTHERS.length]}${i >= 8 ? " and then" : ""}` }], 8 + ((i * 11) % 48)),
  );
}

async function metric(server: TestServer, name: string, model: string): Promise<number> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(`${name}{model="${model}"}`));
  return line ? Number(line.split(" ")[1]) : 0;
}

/**
 * The target, preempted while it decodes: it runs with two longer companions from its account, and
 * once it has streamed a few tokens a higher-priority account sends more than the whole budget
 * (choices of 64 positions), which preempts all three; they resume when the flood is done. A
 * target that finished before the flood reached the model is not preempted: that is tried again.
 */
async function preempted(model: string, mode: Mode): Promise<Answer> {
  const small = servers.small;
  for (let attempt = 1; ; attempt++) {
    const name = `${model}-${mode}-${attempt}`;
    const low = client(small, await unlimitedAccountKey(small.store, `low-${name}`));
    const highKey = await unlimitedAccountKey(small.store, `high-${name}`);
    await small.store.accounts.setPriority((await small.store.accounts.get(`high-${name}`))!.id, 10);
    const before = await metric(small, "sluice_preemptions_total", model);
    const progress = { chunks: 0 };
    const companions = others(model, 2).map((r) => answer(low, { ...r, max_tokens: 200 }));
    const got = answer(low, target(model, mode), progress);
    while (progress.chunks < 3) await Bun.sleep(1);
    const choices = Math.ceil(smallBudget() / (64 * perPosition.get(model)!)) + 4;
    await Promise.all(others(model, Math.ceil(choices / 4)).map((r) => answer(client(small, highKey), { ...r, max_tokens: 24, n: 4 })));
    const [result] = await Promise.all([got, ...companions]);
    if ((await metric(small, "sluice_preemptions_total", model)) > before) return result!;
    if (attempt === 3) throw new Error(`the target of ${model} (${mode}) was never preempted`);
  }
}

describe.each(MODELS)("%s with --batch-invariant", (model) => {
  for (const mode of Object.keys(MODES) as Mode[]) {
    test(`${mode}: alone, against 7 and 15 others, speculation off and on twice, preempted, on a prefix-cache hit: the same tokens`, async () => {
      const off = client(servers.off);
      const reference = await answer(off, target(model, mode));
      expect(reference.tokens.length).toBe(TOKENS);
      const cells: { cell: string; tokens: [string, number][] }[] = [];
      const cell = (name: string, a: Answer) => cells.push({ cell: name, tokens: a.tokens });

      const otherKey = await unlimitedAccountKey(servers.off.store, `others-${model}-${mode}`);
      for (const count of [7, 15]) {
        // The target among the others, neither first nor last.
        const batch = others(model, count).map((r) => answer(client(servers.off, otherKey), r));
        batch.splice(3, 0, answer(off, target(model, mode)));
        cell(`against ${count} others`, (await Promise.all(batch))[3]!);
      }
      for (const round of [1, 2]) cell(`speculation off, ${round}`, await answer(off, target(model, mode)));
      const onKey = await unlimitedAccountKey(servers.on.store, `speculation-${model}-${mode}`);
      for (const round of [1, 2]) cell(`speculation on, ${round}`, await answer(client(servers.on, onKey), target(model, mode)));

      cell("after a forced preemption", await preempted(model, mode));

      // A conversation continuing the target: cold for a new account, then after the target from another.
      const follow = (first: Answer) =>
        request(model, mode, [
          { role: "system", content: SYSTEM },
          { role: "user", content: "Tell me about the brave little cat" },
          { role: "assistant", content: first.text },
          { role: "user", content: "And then?" },
        ]);
      const cold = await answer(client(servers.off, await unlimitedAccountKey(servers.off.store, `cold-${model}-${mode}`)), follow(reference));
      const warmClient = client(servers.off, await unlimitedAccountKey(servers.off.store, `warm-${model}-${mode}`));
      const first = await answer(warmClient, target(model, mode));
      cell("the conversation's first turn", first);
      const warm = await answer(warmClient, follow(first));
      expect(warm.cached).toBeGreaterThan(0);
      expect(cold.cached).toBe(0);
      expect({ cell: "on a prefix-cache hit", tokens: warm.tokens }).toEqual({ cell: "on a prefix-cache hit", tokens: cold.tokens });

      const differing = cells.filter((c) => JSON.stringify(c.tokens) !== JSON.stringify(reference.tokens)).map((c) => c.cell);
      if (differing.length) console.log(`${model} ${mode}: cells differing from the reference: ${differing.join(", ")}`);
      for (const c of cells) {
        // The one exception the README names: a float16 model with speculation on has been seen
        // to give one logprob 2e-11 off (the tokens the same); its tokens must still be equal.
        if (model.endsWith("-fp16") && c.cell.startsWith("speculation on")) {
          expect({ cell: c.cell, tokens: c.tokens.map(([t]) => t) }).toEqual({ cell: c.cell, tokens: reference.tokens.map(([t]) => t) });
          c.tokens.forEach(([, lp], i) => expect(Math.abs(lp - reference.tokens[i]![1])).toBeLessThan(1e-9));
        } else expect(c).toEqual({ cell: c.cell, tokens: reference.tokens });
      }
    }, 240_000);
  }

  test("speculation verified drafts on it", async () => {
    expect(await metric(servers.on, "sluice_draft_tokens_total", model)).toBeGreaterThan(0);
  });
});

describe("serve --batch-invariant as an operator starts it", () => {
  test("each model's load says what holds: a GroupQueryAttention model is loaded batch-invariant, a standard-ops one as before; without the flag neither", async () => {
    const dir = tempDir("sluice-invariant-cli-");
    try {
      const modelsDir = join(dir.path, "models");
      mkdirSync(modelsDir);
      await importedSyntheticModel(modelsDir, "cli-q4", { preset: "tiny-bytes", id: "cli-q4", seed: 23 }, "q4");
      await syntheticModel(modelsDir, "cli-standard", { preset: "tiny-bytes", id: "cli-standard", variant: "standard", seed: 23 });
      const logs = async (flags: string[]) => {
        const serve = await spawnServe(["--data", join(dir.path, `data-${flags.length}`), "--models", modelsDir, "--no-demo", "--device", "cpu", "--preload", "all", ...flags], { stderr: "pipe" });
        await serve.stop();
        const lines = (await new Response(serve.proc.stderr as ReadableStream).text()).split("\n").filter((l) => l.startsWith("{"));
        return lines.map((l) => JSON.parse(l) as { msg: string; model?: string });
      };
      const on = await logs(["--batch-invariant"]);
      expect(on.some((l) => l.msg === "batch-invariant: canonical attention, and every run computes two rows or more of its 4-bit products")).toBe(true);
      expect(on.some((l) => l.msg.startsWith("--batch-invariant does not apply to this graph"))).toBe(true);
      const off = await logs([]);
      expect(off.some((l) => l.msg.includes("batch-invariant"))).toBe(false);
      expect(off.length).toBeGreaterThan(0);
    } finally {
      dir.remove();
    }
  }, 120_000);
});
