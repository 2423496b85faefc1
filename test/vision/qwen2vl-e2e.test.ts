// Qwen2-VL image input end to end: the synthetic Qwen2-VL export behind the real server, driven
// with the openai client. Its image tokens take 3-D rotary positions and every sequence decodes
// with its own rope delta, so batching image prompts of different grids with text prompts must
// still give what each gives alone.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import { createEngine } from "../../src/engine/index.ts";
import { silentLogger } from "../../src/log.ts";
import { buildSyntheticModel, buildSyntheticQwen2VL } from "../../src/modelkit/index.ts";
import { tempDir } from "../helpers/paths.ts";
import { startTestServer, type TestServer } from "../helpers/server.ts";
import { dataUrl, makeImage } from "./images.ts";
import { streamed } from "./support.ts";

const QWEN = "synthetic/tiny-qwen2vl";
const TEXT = "synthetic/tiny-bytes-noimg";
const models = tempDir("sluice-qwen2vl-");
let server: TestServer;
let client: OpenAI;
let pngA: Uint8Array<ArrayBuffer>;
let jpgB: Uint8Array<ArrayBuffer>;
let bigPng: Uint8Array<ArrayBuffer>;

beforeAll(async () => {
  // max_pixels of 512 merged patches, so detail "low" (256) has something to cap.
  buildSyntheticQwen2VL(join(models.path, "qwen2vl"), { id: QWEN, maxPixels: 28 * 28 * 512 });
  await buildSyntheticModel(join(models.path, "text"), { preset: "tiny-bytes", id: TEXT, shape: { contextLength: 256 } });
  pngA = await makeImage("png", 90, 60, 11);
  jpgB = await makeImage("jpeg", 50, 100, 12);
  bigPng = await makeImage("png", 700, 600, 13);
  server = await startTestServer({ modelsDir: models.path });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: server.key, maxRetries: 0 });
}, 60_000);

afterAll(async () => {
  await server?.cleanup();
  models.remove();
});

type Part = OpenAI.ChatCompletionContentPart;
const image = (bytes: Uint8Array, mime: string, detail?: "low" | "high" | "auto"): Part => ({
  type: "image_url",
  image_url: detail ? { url: dataUrl(bytes, mime), detail } : { url: dataUrl(bytes, mime) },
});
const ask = (parts: Part[], maxTokens = 12) => ({ model: QWEN, messages: [{ role: "user" as const, content: parts }], max_tokens: maxTokens, temperature: 0 });

async function whole(parts: Part[], maxTokens = 12) {
  const r = await client.chat.completions.create(ask(parts, maxTokens));
  return { text: r.choices[0]!.message.content ?? "", usage: r.usage! };
}

describe("Qwen2-VL image input through the chat endpoint", () => {
  test("the catalog marks the Qwen2-VL model as taking images", async () => {
    const list = await fetch(`${server.url}/v1/models`, { headers: { authorization: `Bearer ${server.key}` } }).then((r) => r.json());
    const images = Object.fromEntries(list.data.map((m: { id: string; capabilities: { images: boolean } }) => [m.id, m.capabilities.images]));
    expect(images).toEqual({ [QWEN]: true, [TEXT]: false });
  });

  test("different images give different greedy output; the same image gives the same", async () => {
    const a = await whole([{ type: "text", text: "Describe" }, image(pngA, "image/png")]);
    const b = await whole([{ type: "text", text: "Describe" }, image(jpgB, "image/jpeg")]);
    const a2 = await whole([{ type: "text", text: "Describe" }, image(pngA, "image/png")]);
    expect(a.text.length).toBeGreaterThan(0);
    expect(b.text).not.toBe(a.text);
    expect(a2.text).toBe(a.text);
  });

  test("streamed and whole agree, and usage counts the image tokens", async () => {
    const parts: Part[] = [{ type: "text", text: "What is this?" }, image(pngA, "image/png")];
    const w = await whole(parts);
    const { text, usage } = await streamed(client, ask(parts));
    expect(text).toBe(w.text);
    // The same prompt again, image included, comes from the prefix cache but for its last token.
    expect(usage).toEqual({ ...w.usage, prompt_tokens_details: { cached_tokens: w.usage.prompt_tokens - 1 } });
    const textOnly = await whole([{ type: "text", text: "What is this?" }]);
    // 90x60 -> smart_resize 84x56 -> 6x4 patches of 14 -> 3x2 merged: 6 image tokens, plus
    // <|vision_start|> and <|vision_end|>.
    expect(w.usage.prompt_tokens - textOnly.usage.prompt_tokens).toBe(6 + 2);
    expect(w.usage.total_tokens).toBe(w.usage.prompt_tokens + w.usage.completion_tokens);
  });

  test("detail low caps the image at 256 tokens; high and auto use the processor's max_pixels", async () => {
    const low = await whole([image(bigPng, "image/png", "low")], 2);
    const high = await whole([image(bigPng, "image/png", "high")], 2);
    const auto = await whole([image(bigPng, "image/png", "auto")], 2);
    const bare = await whole([{ type: "text", text: "" }], 2);
    expect(high.usage.prompt_tokens).toBe(auto.usage.prompt_tokens);
    const lowTokens = low.usage.prompt_tokens - bare.usage.prompt_tokens - 2;
    const highTokens = high.usage.prompt_tokens - bare.usage.prompt_tokens - 2;
    expect(lowTokens).toBeLessThanOrEqual(256);
    expect(highTokens).toBeGreaterThan(256);
    expect(highTokens).toBeLessThanOrEqual(512);
  });

  test("n > 1 shares the image prefill and each choice decodes with the prompt's rope delta", async () => {
    const r = await client.chat.completions.create({ ...ask([image(jpgB, "image/jpeg")]), n: 2 });
    const single = await whole([image(jpgB, "image/jpeg")]);
    expect(r.choices.map((c) => c.message.content)).toEqual([single.text, single.text]);
  });

  test("image prompts of different grids and a text prompt batched together give what they give alone", async () => {
    const reqs = [
      ask([{ type: "text", text: "Describe" }, image(jpgB, "image/jpeg")], 16),
      ask([{ type: "text", text: "Tell me about rivers" }], 20),
      ask([image(pngA, "image/png"), { type: "text", text: "and" }, image(jpgB, "image/jpeg")], 14),
      ask([{ type: "text", text: "Describe" }, image(pngA, "image/png")], 18),
    ];
    const alone: (string | null)[] = [];
    for (const r of reqs) alone.push((await client.chat.completions.create(r)).choices[0]!.message.content);
    const together = await Promise.all(reqs.map((r) => client.chat.completions.create(r)));
    expect(together.map((r) => r.choices[0]!.message.content)).toEqual(alone);
    expect(new Set(alone).size).toBe(alone.length);
  });

  test("an image sent to a text-only model is still a 400", async () => {
    const err = (await client.chat.completions.create({ ...ask([image(pngA, "image/png")]), model: TEXT }).catch((e: unknown) => e)) as InstanceType<
      typeof OpenAI.BadRequestError
    >;
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect(err.message).toMatch(/does not accept image input/);
  });

  test("an image pad typed as text next to an image is refused, not misaligned", async () => {
    const err = (await client.chat.completions
      .create(ask([{ type: "text", text: "look: <|image_pad|>" }, image(pngA, "image/png")]))
      .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.BadRequestError>;
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect(err.message).toMatch(/placeholders/);
  });
});

test("a Qwen2-VL decoder declared with a shared KV buffer is refused at load, with the reason", async () => {
  const tmp = tempDir("sluice-qwen2vl-shared-");
  try {
    buildSyntheticQwen2VL(tmp.path, { id: "shared" });
    const card = JSON.parse(readFileSync(join(tmp.path, "sluice.json"), "utf8"));
    card.graph.past_present_share_buffer = true;
    writeFileSync(join(tmp.path, "sluice.json"), JSON.stringify(card));
    const engine = await createEngine({ log: silentLogger(), device: "cpu", threads: 1, preload: "all" });
    try {
      const [loaded] = await engine.load([{ id: "shared", dir: tmp.path }]);
      expect(loaded?.model).toBeFalsy();
      expect(loaded?.error).toMatch(/3-D \(multimodal rotary\) position_ids.*shared past\/present KV buffer/);
    } finally {
      await engine.close();
    }
  } finally {
    tmp.remove();
  }
}, 60_000);
