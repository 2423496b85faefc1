// Prompts with images use the prefix cache too: a repeated image prompt (or the next turn of a
// chat about an image) reuses its prefill, and every answer equals that of a twin model (the same
// weights under another id) that has seen nothing before. A different image must never match past
// the text before it. Synthetic Idefics3-style model (padded KV and fused float16 KV) and Qwen2-VL
// (3-D rotary positions).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import OpenAI from "openai";
import { buildSyntheticQwen2VL, buildSyntheticVlm } from "../../src/modelkit/index.ts";
import { tempDir } from "../helpers/paths.ts";
import { startTestServer, type TestServer } from "../helpers/server.ts";
import { dataUrl, makeImage } from "./images.ts";

const models = tempDir("sluice-vlm-prefix-");
let server: TestServer;
let client: OpenAI;
let pngA: Uint8Array<ArrayBuffer>;
let jpgB: Uint8Array<ArrayBuffer>;

const FAMILIES = [
  { id: "synthetic/vlm-prefix", build: (dir: string, id: string) => buildSyntheticVlm(dir, { id, seed: 21 }) },
  { id: "synthetic/vlm-prefix-fused16", build: (dir: string, id: string) => buildSyntheticVlm(dir, { id, seed: 22, variant: "fused", dtype: "float16" }) },
  { id: "synthetic/qwen2vl-prefix", build: (dir: string, id: string) => buildSyntheticQwen2VL(dir, { id, seed: 23, maxPixels: 28 * 28 * 256 }) },
];

beforeAll(async () => {
  for (const f of FAMILIES) {
    const name = f.id.split("/")[1]!;
    f.build(join(models.path, name), f.id);
    f.build(join(models.path, `${name}-twin`), `${f.id}-twin`);
  }
  pngA = await makeImage("png", 90, 60, 31);
  jpgB = await makeImage("jpeg", 60, 90, 32);
  server = await startTestServer({ modelsDir: models.path });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: server.key, maxRetries: 0 });
}, 120_000);

afterAll(async () => {
  await server?.cleanup();
  models.remove();
});

type Message = OpenAI.ChatCompletionMessageParam;
const imageTurn = (url: string): Message => ({
  role: "user",
  content: [
    { type: "text", text: "Look at this picture:" },
    { type: "image_url", image_url: { url } },
    { type: "text", text: "What is in it?" },
  ],
});

/** Completion tokens each model has produced so far, to know when its stats include a request. */
const generated = new Map<string, number>();

async function ask(model: string, messages: Message[]) {
  const r = await client.chat.completions.create({ model, messages, max_tokens: 10, temperature: 0 });
  generated.set(model, (generated.get(model) ?? 0) + r.usage!.completion_tokens);
  return { text: r.choices[0]!.message.content ?? "", promptTokens: r.usage!.prompt_tokens };
}

/** The model's reused-prefix counter, once its stats include every request sent so far. */
async function reusedTokens(model: string): Promise<number> {
  for (let i = 0; i < 100; i++) {
    const body = await (await fetch(`${server.url}/metrics`)).text();
    const value = (name: string) => Number(body.split("\n").find((l) => l.startsWith(`${name}{model="${model}"}`))?.split(" ")[1] ?? NaN);
    if (value("sluice_running_requests") === 0 && value("sluice_generated_tokens_total") === (generated.get(model) ?? 0)) {
      return value("sluice_prefix_cache_reused_tokens_total");
    }
    await Bun.sleep(20);
  }
  throw new Error("the model's stats did not catch up");
}

describe("the prefix cache with images", () => {
  for (const { id } of FAMILIES) {
    test(`${id}: a repeated image prompt and the next turn reuse the cache; a new image matches only the text before it`, async () => {
      const a = dataUrl(pngA, "image/png");
      const b = dataUrl(jpgB, "image/jpeg");
      const twin = `${id}-twin`;

      const first = await ask(id, [imageTurn(a)]);
      const before = await reusedTokens(id);
      const again = await ask(id, [imageTurn(a)]);
      const reusedAgain = (await reusedTokens(id)) - before;
      expect(again.text).toBe(first.text);
      // Everything but the last prompt token, which is run to get the first logits.
      expect(reusedAgain).toBe(again.promptTokens - 1);

      const chat: Message[] = [imageTurn(a), { role: "assistant", content: first.text }, { role: "user", content: "Tell me more." }];
      const beforeChat = await reusedTokens(id);
      const next = await ask(id, chat);
      expect(await reusedTokens(id)).toBeGreaterThanOrEqual(beforeChat + first.promptTokens);
      expect(next.text).toBe((await ask(twin, chat)).text);

      const beforeB = await reusedTokens(id);
      const other = await ask(id, [imageTurn(b)]);
      const reusedB = (await reusedTokens(id)) - beforeB;
      // Only the chat template and the text before the image can match: fewer tokens than the
      // same turn has without any image.
      const textOnly = await ask(id, [{ role: "user", content: [{ type: "text", text: "Look at this picture:" }, { type: "text", text: "What is in it?" }] }]);
      expect(reusedB).toBeGreaterThan(0);
      expect(reusedB).toBeLessThan(textOnly.promptTokens);
      expect(other.text).toBe((await ask(twin, [imageTurn(b)])).text);
      expect(other.text).not.toBe(first.text);
    }, 60_000);
  }
});
