// Chat completions on synthetic models (random weights, real tokenizers and templates) through
// the real server: streaming, sampling parameters, n, logprobs, stops, limits, cancellation.
import { describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { TextTokenizer } from "../../../src/engine/text/tokenizer.ts";
import { unlimitedAccountKey } from "../../helpers/accounts.ts";
import { linkCachedModel } from "../../helpers/models.ts";
import { serverFixture } from "../../helpers/server.ts";

const QWEN = "synthetic/tiny-qwen3";
const BYTES = "synthetic/tiny-bytes";

const fx = serverFixture(async (dir) => {
  await linkCachedModel(dir, "qwen", { preset: "tiny-qwen3", seed: 7, id: QWEN });
  await linkCachedModel(dir, "bytes-small-ctx", { preset: "tiny-bytes", seed: 8, id: BYTES, shape: { contextLength: 64 } });
});

async function collect(stream: AsyncIterable<OpenAI.ChatCompletionChunk>) {
  const texts: string[] = [];
  let usage: OpenAI.CompletionUsage | null = null;
  const finish: (string | null)[] = [];
  let roleChunks = 0;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      texts[c.index] = (texts[c.index] ?? "") + (c.delta.content ?? "");
      if (c.delta.role) roleChunks++;
      if (c.finish_reason) finish[c.index] = c.finish_reason;
    }
  }
  return { texts, usage, finish, roleChunks };
}

describe("synthetic Qwen3-tokenizer model", () => {
  const messages: OpenAI.ChatCompletionMessageParam[] = [
    { role: "system", content: "You are terse." },
    { role: "user", content: "Name three rivers, 你好 👋" },
  ];

  test("answers whole and streamed with identical text under a seed", async () => {
    const req = { model: QWEN, messages, max_tokens: 24, temperature: 0.8, seed: 11 };
    const whole = await fx.client.chat.completions.create(req);
    expect(whole.object).toBe("chat.completion");
    expect(whole.id).toMatch(/^chatcmpl-/);
    expect(whole.system_fingerprint).toBeTruthy();
    const text = whole.choices[0]!.message.content!;
    expect(text.length).toBeGreaterThan(0);
    const streamed = await collect(await fx.client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } }));
    expect(streamed.texts[0]).toBe(text);
    expect(streamed.roleChunks).toBe(1);
    // The same prompt again is served by the prefix cache, all but its last token (whose logits are needed).
    const cached = whole.usage!.prompt_tokens - 1;
    expect(streamed.usage).toEqual({ ...whole.usage!, prompt_tokens_details: { cached_tokens: cached } });
    expect(whole.usage!.prompt_tokens).toBeGreaterThan(10);
  });

  test("the prefix cache serves an account only its own prompts (cached_tokens tells no account what another sent)", async () => {
    const b = new OpenAI({ apiKey: await unlimitedAccountKey(fx.server.store, "prefix-other"), baseURL: `${fx.server.url}/v1`, maxRetries: 0 });
    const req = { model: QWEN, messages: [{ role: "user" as const, content: "A document only the first account has sent: the quarterly figures, in full." }], max_tokens: 2 };
    const cached = async (client: OpenAI) => (await client.chat.completions.create(req)).usage!.prompt_tokens_details!.cached_tokens;
    expect(await cached(fx.client)).toBe(0);
    const hit = await cached(fx.client);
    expect(hit).toBeGreaterThan(10);
    expect(await cached(b)).toBe(0);
    expect(await cached(b)).toBe(hit);
  });

  test("the same seed reproduces, another seed differs, greedy ignores the seed", async () => {
    const run = async (seed: number, temperature = 1) =>
      (await fx.client.chat.completions.create({ model: QWEN, messages, max_tokens: 16, temperature, seed })).choices[0]!.message.content;
    const a = await run(1);
    expect(await run(1)).toBe(a);
    const others = await Promise.all([run(2), run(3), run(4)]);
    expect(others.some((o) => o !== a)).toBe(true);
    expect(await run(5, 0)).toBe(await run(6, 0));
  });

  test("n > 1 gives n choices, distinct under sampling, counted in usage", async () => {
    const r = await fx.client.chat.completions.create({ model: QWEN, messages, max_tokens: 12, temperature: 1, seed: 3, n: 3 });
    expect(r.choices.map((c) => c.index)).toEqual([0, 1, 2]);
    expect(new Set(r.choices.map((c) => c.message.content)).size).toBeGreaterThan(1);
    expect(r.usage!.completion_tokens).toBe(36);
    const s = await collect(await fx.client.chat.completions.create({ model: QWEN, messages, max_tokens: 12, temperature: 1, seed: 3, n: 3, stream: true }));
    expect(s.texts).toEqual(r.choices.map((c) => c.message.content!));
    expect(s.roleChunks).toBe(3);
  });

  test("logprobs and top_logprobs in the OpenAI shape, whole and streamed", async () => {
    const req = { model: QWEN, messages, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 3 };
    const r = await fx.client.chat.completions.create(req);
    const lp = r.choices[0]!.logprobs!.content!;
    expect(lp.length).toBeGreaterThan(0);
    for (const t of lp) {
      expect(t.logprob).toBeLessThanOrEqual(0);
      expect(t.top_logprobs).toHaveLength(3);
      // Greedy: the chosen token is the most likely one.
      expect(t.logprob).toBeCloseTo(t.top_logprobs[0]!.logprob, 6);
      expect(t.top_logprobs[0]!.logprob).toBeGreaterThanOrEqual(t.top_logprobs[1]!.logprob);
      expect(Array.isArray(t.bytes)).toBe(true);
    }
    expect(lp.map((t) => t.token).join("")).toBe(r.choices[0]!.message.content!);
    const stream = await fx.client.chat.completions.create({ ...req, stream: true });
    const streamed: OpenAI.ChatCompletionTokenLogprob[] = [];
    for await (const chunk of stream) streamed.push(...(chunk.choices[0]?.logprobs?.content ?? []));
    expect(streamed.map((t) => t.token)).toEqual(lp.map((t) => t.token));
  });

  test("logit_bias +100 forces a token; -100 bans the greedy choice", async () => {
    const base = { model: QWEN, messages, max_tokens: 6, temperature: 0 };
    const tokenId = 33; // "B" in the Qwen3 vocabulary
    const forced = await fx.client.chat.completions.create({ ...base, logit_bias: { [tokenId]: 100 } });
    expect(forced.choices[0]!.message.content).toBe("BBBBBB");
    const greedy = await fx.client.chat.completions.create({ ...base, max_tokens: 1, logprobs: true, top_logprobs: 2 });
    const first = greedy.choices[0]!.logprobs!.content![0]!;
    const tokenizer = TextTokenizer.load(`${fx.modelsDir}/qwen`);
    const ids = await tokenizer.encode(first.token);
    expect(ids).toHaveLength(1);
    const banned = await fx.client.chat.completions.create({ ...base, max_tokens: 1, logprobs: true, logit_bias: { [ids[0]!]: -100 } });
    const next = banned.choices[0]!.logprobs!.content![0]!;
    expect(next.token).not.toBe(first.token);
    expect(next.token).toBe(first.top_logprobs[1]!.token);
  });

  test("a stop string ends the text and is never emitted, also when streamed", async () => {
    const r = await fx.client.chat.completions.create({ model: QWEN, messages, max_tokens: 40, temperature: 0 });
    const text = r.choices[0]!.message.content!;
    expect(text.length).toBeGreaterThan(6);
    // A stop taken from the middle of the greedy text, so it spans whatever tokens made it.
    const stop = text.slice(3, 6);
    const cut = text.slice(0, text.indexOf(stop));
    const stopped = await fx.client.chat.completions.create({ model: QWEN, messages, max_tokens: 40, temperature: 0, stop: [stop, "\u0000never"] });
    expect(stopped.choices[0]!.message.content).toBe(cut);
    expect(stopped.choices[0]!.finish_reason).toBe("stop");
    const s = await collect(await fx.client.chat.completions.create({ model: QWEN, messages, max_tokens: 40, temperature: 0, stop, stream: true }));
    expect(s.texts[0]).toBe(cut);
    expect(s.finish[0]).toBe("stop");
  });
});

describe("limits", () => {
  test("a prompt longer than the context is a 400 saying by how much", async () => {
    const res = await fetch(`${fx.server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${fx.server.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: BYTES, messages: [{ role: "user", content: "word ".repeat(200) }] }),
    });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("context_length_exceeded");
    expect(body.error.message).toMatch(/maximum context length is 64 tokens.*resulted in \d+ tokens, \d+ more/);
  });

  test("generation stops with finish_reason length at the context limit", async () => {
    const r = await fx.client.chat.completions.create({ model: BYTES, messages: [{ role: "user", content: "hi" }], max_tokens: 1000, temperature: 0, logit_bias: {} });
    const u = r.usage!;
    if (r.choices[0]!.finish_reason === "length") expect(u.prompt_tokens + u.completion_tokens).toBe(64);
    else expect(u.prompt_tokens + u.completion_tokens).toBeLessThanOrEqual(64);
  });

  test("max_tokens and max_completion_tokens bound the completion", async () => {
    const a = await fx.client.chat.completions.create({ model: QWEN, messages: [{ role: "user", content: "x" }], max_tokens: 3, temperature: 0, logit_bias: { 33: 100 } });
    expect(a.usage!.completion_tokens).toBe(3);
    expect(a.choices[0]!.finish_reason).toBe("length");
    const b = await fx.client.chat.completions.create({ model: QWEN, messages: [{ role: "user", content: "x" }], max_completion_tokens: 5, temperature: 0, logit_bias: { 33: 100 } });
    expect(b.usage!.completion_tokens).toBe(5);
  });

  test("logit_bias beyond the vocabulary is refused", async () => {
    const res = await fetch(`${fx.server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${fx.server.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: QWEN, messages: [{ role: "user", content: "x" }], logit_bias: { "999999": 5 } }),
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { param: string } }).error.param).toBe("logit_bias");
  });
});

describe("concurrency and cancellation", () => {
  test("eight concurrent streams complete while /v1/models keeps answering", async () => {
    let modelCalls = 0;
    let done = false;
    const poll = (async () => {
      while (!done) {
        const r = await fx.client.models.list();
        expect(r.data.length).toBe(2);
        modelCalls++;
        await Bun.sleep(5);
      }
    })();
    const streams = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        fx.client.chat.completions
          .create({ model: QWEN, messages: [{ role: "user", content: `story ${i}` }], max_tokens: 40, temperature: 0.9, seed: i, stream: true, logit_bias: { 151645: -100, 151643: -100 } })
          .then(collect),
      ),
    );
    done = true;
    await poll;
    for (const s of streams) {
      expect(s.finish[0]).toBe("length");
      expect(s.texts[0]!.length).toBeGreaterThan(0);
    }
    expect(modelCalls).toBeGreaterThan(2);
  });

  test("a client that disconnects stops its generation and gets a usage row", async () => {
    const controller = new AbortController();
    const res = await fetch(`${fx.server.url}/v1/chat/completions`, {
      method: "POST",
      signal: controller.signal,
      headers: { authorization: `Bearer ${fx.server.key}`, "content-type": "application/json", "x-request-id": "cut-off-1" },
      body: JSON.stringify({ model: QWEN, messages: [{ role: "user", content: "go" }], max_tokens: 5000, stream: true, logit_bias: { 151645: -100, 151643: -100 } }),
    });
    const reader = res.body!.getReader();
    let seen = 0;
    while (seen < 5) {
      const { done, value } = await reader.read();
      if (done) break;
      seen += new TextDecoder().decode(value).split("data: ").length - 1;
    }
    controller.abort();
    const account = (await fx.server.store.accounts.get("local"))!.id;
    let row;
    for (let i = 0; i < 200 && !row; i++) {
      row = (await fx.server.store.usage.list(account)).find((r) => r.requestId === "cut-off-1");
      if (!row) await Bun.sleep(10);
    }
    expect(row).toBeDefined();
    expect(row!.status).toBe("cancelled");
    expect(row!.completionTokens).toBeGreaterThan(0);
    expect(row!.completionTokens).toBeLessThan(400);
    // The model is free again: a new request completes promptly.
    const r = await fx.client.chat.completions.create({ model: QWEN, messages: [{ role: "user", content: "x" }], max_tokens: 2 });
    expect(r.choices[0]!.finish_reason).toBeDefined();
  });
});
