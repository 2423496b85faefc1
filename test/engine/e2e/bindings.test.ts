// The two ways of calling ONNX Runtime give the same tokens, through the real server. The C API
// binding (--ort-binding capi: the KV cache in the provider's memory, bound in place) against the
// JS binding (node: the cache in JavaScript arrays handed to every run), on stories260K and the
// synthetic families (fused fp32 with split attention, fused fp16 with gathered step outputs, the
// standard contract): 16 concurrent requests, greedy and seeded, with speculation on and off, on
// a prefix-cache hit, and after preemption. The reference is each request alone on the JS binding
// without speculation.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import OpenAI from "openai";
import type { OrtBinding } from "../../../src/engine/ort-binding.ts";
import { unlimitedAccountKey } from "../../helpers/accounts.ts";
import { importStories, syntheticModel } from "../../helpers/models.ts";
import { hasStories, STORIES_DIR, tempDir } from "../../helpers/paths.ts";
import { startTestServer, type TestServer } from "../../helpers/server.ts";

if (!hasStories) console.warn(`skipping the stories260K models of the binding comparison: ${STORIES_DIR} is absent`);

const SYNTH = ["synth-fused", "synth-fp16", "synth-standard"];
const MODELS = [...(hasStories ? ["stories-fused", "stories-standard"] : []), ...SYNTH];

let models: ReturnType<typeof tempDir>;
const servers = new Map<string, TestServer>();

const key = (binding: OrtBinding, speculate: "ngram" | "off") => `${binding}-${speculate}`;

beforeAll(async () => {
  models = tempDir("sluice-bindings-");
  if (hasStories) for (const v of ["fused", "standard"] as const) importStories(models.path, `stories-${v}`, v);
  await syntheticModel(models.path, "synth-fused", { preset: "tiny-bytes", id: "synth-fused", variant: "fused", seed: 11 });
  await syntheticModel(models.path, "synth-fp16", { preset: "tiny-bytes", id: "synth-fp16", variant: "fused", dtype: "float16", seed: 11 });
  await syntheticModel(models.path, "synth-standard", { preset: "tiny-bytes", id: "synth-standard", variant: "standard", seed: 11 });
  for (const binding of ["node", "capi"] as const) {
    for (const speculate of ["ngram", "off"] as const) {
      servers.set(key(binding, speculate), await startTestServer({ modelsDir: models.path, engine: { binding, speculate } }));
    }
  }
}, 300_000);

afterAll(async () => {
  for (const s of servers.values()) await s.cleanup();
  models?.remove();
});

const client = (s: TestServer, apiKey = s.key) => new OpenAI({ apiKey, baseURL: `${s.url}/v1`, maxRetries: 0 });

/** A system turn long enough (over the prefix cache's 16 tokens) that a repeated prompt can hit it. */
const SYSTEM = "You tell short stories to children. Every story is kind, simple and happy, with a cat, a dog and a little girl.";
const OPENINGS = ["Once upon a time", "The cat", "A little girl named Lily", "One day", "Tom and his dog", "The sun was", "In the park", "Mom said"];

/** Sixteen requests of different lengths; odd ones sampled with a seed, even ones greedy. */
function requests(model: string) {
  return Array.from({ length: 16 }, (_, i) => ({
    model,
    messages: [
      { role: "system" as const, content: SYSTEM },
      { role: "user" as const, content: `${OPENINGS[i % OPENINGS.length]}${i >= 8 ? " and then" : ""}` },
    ],
    max_tokens: 6 + ((i * 7) % 40),
    ...(i % 2 === 0 ? { temperature: 0 } : { temperature: 0.9, seed: 100 + i }),
    logprobs: true,
  }));
}

type Req = ReturnType<typeof requests>[number];

/**
 * The completion's tokens (as the API names them, streamed), and how many prompt tokens came from
 * the cache. `progress` counts the chunks that carried tokens.
 */
async function tokens(c: OpenAI, req: Req, progress?: { chunks: number }): Promise<{ tokens: string[]; cached: number }> {
  const stream = await c.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  const out: string[] = [];
  let cached = 0;
  for await (const chunk of stream) {
    const content = chunk.choices[0]?.logprobs?.content ?? [];
    for (const t of content) out.push(t.token);
    if (content.length > 0 && progress) progress.chunks++;
    if (chunk.usage) cached = chunk.usage.prompt_tokens_details?.cached_tokens ?? 0;
  }
  return { tokens: out, cached };
}

const reference = new Map<string, string[][]>();

/** Each request alone on the JS binding without speculation. */
async function alone(model: string): Promise<string[][]> {
  let r = reference.get(model);
  if (!r) {
    const c = client(servers.get(key("node", "off"))!);
    r = [];
    for (const req of requests(model)) r.push((await tokens(c, req)).tokens);
    reference.set(model, r);
  }
  return r;
}

describe.each(MODELS)("%s: the C API binding gives the JS binding's tokens", (model) => {
  test("16 concurrent requests, greedy and seeded, speculation on and off, on both bindings", async () => {
    const expected = await alone(model);
    expect(expected.every((t) => t.length > 0)).toBe(true);
    for (const [name, server] of servers) {
      const got = await Promise.all(requests(model).map((req) => tokens(client(server), req)));
      expect({ server: name, tokens: got.map((g) => g.tokens) }).toEqual({ server: name, tokens: expected });
    }
  }, 180_000);

  test("a prefix-cache hit on the C API binding gives the cold run's tokens", async () => {
    const expected = await alone(model);
    const server = servers.get(key("capi", "ngram"))!;
    const c = client(server, await unlimitedAccountKey(server.store, `prefix-${model}`));
    const req = requests(model)[2]!;
    const cold = await tokens(c, req);
    const warm = await tokens(c, req);
    expect(cold.tokens).toEqual(expected[2]!);
    expect(warm.cached).toBeGreaterThan(0);
    expect(warm.tokens).toEqual(expected[2]!);
  }, 60_000);
});

describe("preemption on the C API binding", () => {
  let server: TestServer;
  const MODEL = "synth-fused";

  beforeAll(async () => {
    // Room for 4 sequences of the test's class (a prompt of about 40 tokens and 48 new: 96
    // positions): the fifth request waits, and a higher priority preempts.
    const config = (await Bun.file(join(models.path, MODEL, "config.json")).json()) as { num_hidden_layers: number; num_key_value_heads: number; head_dim: number };
    const perPosition = config.num_hidden_layers * 2 * config.num_key_value_heads * config.head_dim * 4;
    server = await startTestServer({ modelsDir: models.path, engine: { binding: "capi", speculate: "off", kvBudgetBytes: 4 * 96 * perPosition, maxQueue: 64, streamIntervalMs: 1 } });
  }, 60_000);

  afterAll(async () => {
    await server?.cleanup();
  });

  test("preempted and recomputed streams give the JS binding's tokens", async () => {
    const expected = await alone(MODEL);
    const reqs = requests(MODEL).map((r) => ({ ...r, max_tokens: 48 }));
    // The reference at that length, alone on the JS binding.
    const node = client(servers.get(key("node", "off"))!);
    const want = await Promise.all(reqs.map((r) => tokens(node, r)));
    for (const [i, w] of want.entries()) expect(w.tokens.slice(0, expected[i]!.length)).toEqual(expected[i]!);
    const low = client(server);
    const highKey = await unlimitedAccountKey(server.store, "high");
    const account = (await server.store.accounts.get("high"))!;
    await server.store.accounts.setPriority(account.id, 10);
    const high = client(server, highKey);
    const progress = reqs.slice(0, 8).map(() => ({ chunks: 0 }));
    const first = Promise.all(reqs.slice(0, 8).map((r, i) => tokens(low, r, progress[i])));
    // The higher priority arrives once four of the first eight run (the others wait for memory).
    while (progress.filter((p) => p.chunks >= 2).length < 4) await Bun.sleep(2);
    const second = Promise.all(reqs.slice(8).map((r) => tokens(high, r)));
    const got = [...(await first), ...(await second)];
    expect(got.map((g) => g.tokens)).toEqual(want.map((w) => w.tokens));
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    expect(Number(/^sluice_preemptions_total\{model="synth-fused"\} (\d+)/m.exec(metrics)?.[1] ?? 0)).toBeGreaterThan(0);
  }, 120_000);
});
