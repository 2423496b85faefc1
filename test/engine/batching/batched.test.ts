// Continuous batching through the real server: a greedy request gives the same text alone and
// among 15 concurrent requests of different lengths, cancelling one stream leaves the others
// unchanged, a reused prefix gives the same text as a cold run, and a full queue is a 429.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { importStories, syntheticModel } from "../../helpers/models.ts";
import { hasStories, STORIES_DIR, tempDir } from "../../helpers/paths.ts";
import { startTestServer, type TestServer } from "../../helpers/server.ts";

if (!hasStories) console.warn(`skipping stories260K batching tests: ${STORIES_DIR} is absent`);

const STORY_MODELS = hasStories ? ["stories-fused", "stories-standard"] : [];
const SYNTH_MODELS = ["synth-fused", "synth-standard"];
/** onnxruntime-genai's CPU layout: one q/k/v MatMul feeding GroupQueryAttention as its query. */
const PACKED_MODEL = "synth-packed";

async function buildModels(dir: string) {
  if (hasStories) for (const v of ["fused", "standard"] as const) importStories(dir, `stories-${v}`, v);
  for (const variant of ["fused", "standard"] as const) {
    await syntheticModel(dir, `synth-${variant}`, { preset: "tiny-qwen3", id: `synth-${variant}`, variant, seed: 7 });
  }
  await syntheticModel(dir, PACKED_MODEL, { preset: "tiny-bytes", id: PACKED_MODEL, variant: "fused", packedQkv: true, seed: 7 });
}

/** Sixteen different requests: prompts and lengths vary so rows join and leave the batch at different steps. */
function requests(model: string) {
  const words = ["Once upon a time", "The cat", "A little girl named Lily", "One day", "Tom and his dog", "The sun was", "In the park", "Mom said"];
  return Array.from({ length: 16 }, (_, i) => ({
    model,
    messages: [{ role: "user" as const, content: `${words[i % words.length]}${i >= 8 ? " and then" : ""}` }],
    temperature: 0,
    max_tokens: 6 + ((i * 7) % 40),
  }));
}

type Req = ReturnType<typeof requests>[number];

async function streamText(client: OpenAI, req: Req, opts: { abortAfter?: number } = {}): Promise<{ text: string; tokens: number }> {
  const controller = new AbortController();
  const stream = await client.chat.completions.create(
    { ...req, stream: true, stream_options: { include_usage: true } },
    { signal: controller.signal },
  );
  let text = "";
  let tokens = 0;
  let chunks = 0;
  try {
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? "";
      if (chunk.usage) tokens = chunk.usage.completion_tokens;
      if (opts.abortAfter !== undefined && ++chunks >= opts.abortAfter) {
        controller.abort();
        break;
      }
    }
  } catch (e) {
    if (!controller.signal.aborted) throw e;
  }
  return { text, tokens };
}

async function metric(server: TestServer, name: string, model: string): Promise<number> {
  const body = await (await fetch(`${server.url}/metrics`)).text();
  const line = body.split("\n").find((l) => l.startsWith(`${name}{model="${model}"}`));
  return line ? Number(line.split(" ")[1]) : NaN;
}

/** Stats reach the host a little after the work; wait until the model is idle again. */
async function settledMetric(server: TestServer, name: string, model: string): Promise<number> {
  for (let i = 0; i < 50; i++) {
    if ((await metric(server, "sluice_running_requests", model)) === 0) break;
    await Bun.sleep(20);
  }
  await Bun.sleep(300);
  return metric(server, name, model);
}

describe("continuous batching through the API", () => {
  let models: ReturnType<typeof tempDir>;
  let server: TestServer;
  let client: OpenAI;

  beforeAll(async () => {
    models = tempDir("sluice-batching-");
    await buildModels(models.path);
    server = await startTestServer({ modelsDir: models.path });
    client = new OpenAI({ apiKey: server.key, baseURL: `${server.url}/v1`, maxRetries: 0 });
  }, 120_000);

  afterAll(async () => {
    await server?.cleanup();
    models?.remove();
  });

  for (const model of [...STORY_MODELS, ...SYNTH_MODELS, PACKED_MODEL]) {
    test(`${model}: each greedy request gives the same text alone and among 15 concurrent others`, async () => {
      const reqs = requests(model);
      const alone: { text: string; tokens: number }[] = [];
      for (const r of reqs) alone.push(await streamText(client, r));
      const stepsBefore = await settledMetric(server, "sluice_decode_steps_total", model);
      const tokensBefore = await metric(server, "sluice_generated_tokens_total", model);
      const together = await Promise.all(reqs.map((r) => streamText(client, r)));
      expect(together).toEqual(alone);
      expect(alone.some((a) => a.tokens > 10)).toBe(true);
      // Batching happened: far fewer forward passes than tokens generated.
      const steps = (await settledMetric(server, "sluice_decode_steps_total", model)) - stepsBefore;
      const generated = (await metric(server, "sluice_generated_tokens_total", model)) - tokensBefore;
      expect(generated).toBe(together.reduce((n, t) => n + t.tokens, 0));
      expect(steps).toBeLessThan(generated / 3);
    }, 60_000);
  }

  for (const model of [...STORY_MODELS.slice(0, 1), ...SYNTH_MODELS]) {
    test(`${model}: cancelling one stream of a batch leaves the others' text unchanged`, async () => {
      const reqs = requests(model).slice(0, 6).map((r) => ({ ...r, max_tokens: 30 }));
      const alone: string[] = [];
      for (const r of reqs) alone.push((await streamText(client, r)).text);
      const results = await Promise.all(reqs.map((r, i) => streamText(client, r, i === 2 ? { abortAfter: 3 } : {})));
      results.forEach((r, i) => {
        if (i === 2) expect(alone[2]!.startsWith(r.text)).toBe(true);
        else expect(r.text).toBe(alone[i]!);
      });
      expect(await settledMetric(server, "sluice_running_sequences", model)).toBe(0);
    }, 60_000);
  }

  for (const model of [...STORY_MODELS, ...SYNTH_MODELS]) {
    test(`${model}: a request reusing a cached prefix gives the text of its cold run`, async () => {
      const system = "Tell a short story about a cat, a dog and a big red ball that rolled down the hill. ".repeat(4);
      const ask = (content: string): Req => ({
        model,
        messages: [{ role: "system" as never, content: system }, { role: "user", content }] as never,
        temperature: 0,
        max_tokens: 12,
      });
      const hitsBefore = await settledMetric(server, "sluice_prefix_cache_hits_total", model);
      const coldB = await streamText(client, ask("The dog"));
      await streamText(client, ask("The cat")); // shares the long system prompt
      const warmB = await streamText(client, ask("The dog")); // the whole prompt is cached
      expect(warmB).toEqual(coldB);
      const hits = (await settledMetric(server, "sluice_prefix_cache_hits_total", model)) - hitsBefore;
      expect(hits).toBeGreaterThanOrEqual(2);
      expect(await metric(server, "sluice_prefix_cache_reused_tokens_total", model)).toBeGreaterThan(40);
    }, 60_000);
  }

  test("/metrics is a Prometheus text exposition with per-model gauges", async () => {
    const r = await fetch(`${server.url}/metrics`);
    expect(r.status).toBe(200);
    expect(r.headers.get("content-type")).toContain("text/plain");
    const body = await r.text();
    expect(body).toContain("# TYPE sluice_kv_used_bytes gauge");
    expect(body).toContain("# TYPE sluice_queued_requests gauge");
    expect(body).toMatch(/^sluice_kv_budget_bytes\{model="synth-fused"\} [1-9]\d*$/m);
  });
});

describe("KV budget and the bounded queue", () => {
  let models: ReturnType<typeof tempDir>;
  let server: TestServer;

  beforeAll(async () => {
    models = tempDir("sluice-busy-");
    await syntheticModel(models.path, "synth-fused", { preset: "tiny-qwen3", id: "synth-fused", variant: "fused", seed: 7 });
    // Read by the engine when it spawns the model's worker.
    const saved = { budget: process.env.SLUICE_KV_BUDGET_MB, queue: process.env.SLUICE_MAX_QUEUE };
    process.env.SLUICE_KV_BUDGET_MB = "0.25";
    process.env.SLUICE_MAX_QUEUE = "2";
    try {
      server = await startTestServer({ modelsDir: models.path });
    } finally {
      for (const [k, v] of [["SLUICE_KV_BUDGET_MB", saved.budget], ["SLUICE_MAX_QUEUE", saved.queue]] as const) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
  }, 120_000);

  afterAll(async () => {
    await server?.cleanup();
    models?.remove();
  });

  const post = (body: unknown) =>
    fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${server.key}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });

  test("requests beyond memory wait, beyond the queue get 429 with Retry-After, and the rest are unchanged", async () => {
    const body = { model: "synth-fused", messages: [{ role: "user", content: "hello there" }], temperature: 0, max_tokens: 60 };
    const alone = await (await post(body)).json();
    const responses = await Promise.all(Array.from({ length: 10 }, () => post(body)));
    const busy = responses.filter((r) => r.status === 429);
    const ok = responses.filter((r) => r.status === 200);
    expect(busy.length).toBeGreaterThan(0);
    expect(ok.length).toBeGreaterThan(0);
    expect(busy.length + ok.length).toBe(10);
    for (const r of busy) {
      expect(Number(r.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
      expect((await r.json()).error.type).toBeDefined();
    }
    for (const r of ok) expect((await r.json()).choices[0].message.content).toBe(alone.choices[0].message.content);
    const used = await settledMetric(server, "sluice_kv_used_bytes", "synth-fused");
    expect(used).toBeLessThanOrEqual(await metric(server, "sluice_kv_budget_bytes", "synth-fused"));
  }, 60_000);

  test("a request that could never fit the budget is a 400, not a wait", async () => {
    // Without max_tokens a sequence reserves the whole 4,096-token context: 2 MiB here.
    const r = await post({ model: "synth-fused", messages: [{ role: "user", content: "hi" }] });
    expect(r.status).toBe(400);
    expect((await r.json()).error.code).toBe("kv_cache_exceeded");
  });
});
