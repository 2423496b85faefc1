// Image input end to end: the synthetic vision-language model behind the real server, driven
// with the openai client. Images come as data: URLs and from a local HTTP server (allowed
// explicitly, since loopback is refused by default).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import OpenAI from "openai";
import { buildSyntheticVlm, buildSyntheticModel } from "../../src/modelkit/index.ts";
import { configureImagePolicy } from "../../src/vision/policy.ts";
import { tempDir } from "../helpers/paths.ts";
import { startTestServer, type TestServer } from "../helpers/server.ts";
import { dataUrl, makeImage } from "./images.ts";
import { streamed } from "./support.ts";

const VLM = "synthetic/tiny-vlm";
const TEXT = "synthetic/tiny-bytes-noimg";
const VLM_FUSED16 = "synthetic/tiny-vlm-fused-fp16";
const models = tempDir("sluice-vlm-");
let server: TestServer;
let client: OpenAI;
let imgServer: ReturnType<typeof Bun.serve>;
let pngA: Uint8Array<ArrayBuffer>;
let jpgB: Uint8Array<ArrayBuffer>;

beforeAll(async () => {
  buildSyntheticVlm(join(models.path, "vlm"), { id: VLM });
  buildSyntheticVlm(join(models.path, "vlm-fused"), { id: VLM_FUSED16, variant: "fused", dtype: "float16" });
  await buildSyntheticModel(join(models.path, "text"), { preset: "tiny-bytes", id: TEXT, shape: { contextLength: 256 } });
  pngA = await makeImage("png", 80, 50, 11);
  jpgB = await makeImage("jpeg", 50, 90, 12);
  imgServer = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    fetch: (req) => (new URL(req.url).pathname === "/a.png" ? new Response(pngA, { headers: { "content-type": "image/png" } }) : new Response("no", { status: 404 })),
  });
  server = await startTestServer({ modelsDir: models.path });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: server.key, maxRetries: 0 });
}, 60_000);

afterAll(async () => {
  configureImagePolicy({});
  imgServer?.stop(true);
  await server?.cleanup();
  models.remove();
});

type Part = OpenAI.ChatCompletionContentPart;
const image = (url: string, detail?: "low" | "high" | "auto"): Part => ({ type: "image_url", image_url: detail ? { url, detail } : { url } });
const ask = (parts: Part[]) => ({ model: VLM, messages: [{ role: "user" as const, content: parts }], max_tokens: 12, temperature: 0 });

async function whole(parts: Part[]) {
  const r = await client.chat.completions.create(ask(parts));
  return { text: r.choices[0]!.message.content ?? "", usage: r.usage! };
}

describe("image input through the chat endpoint", () => {
  test("the catalog marks the vision model as taking images", async () => {
    const list = await fetch(`${server.url}/v1/models`, { headers: { authorization: `Bearer ${server.key}` } }).then((r) => r.json());
    const images = Object.fromEntries(list.data.map((m: { id: string; capabilities: { images: boolean } }) => [m.id, m.capabilities.images]));
    expect(images).toEqual({ [VLM]: true, [VLM_FUSED16]: true, [TEXT]: false });
  });

  test("different images give different greedy output; the same image gives the same", async () => {
    const a = await whole([{ type: "text", text: "Describe" }, image(dataUrl(pngA, "image/png"))]);
    const b = await whole([{ type: "text", text: "Describe" }, image(dataUrl(jpgB, "image/jpeg"))]);
    const a2 = await whole([{ type: "text", text: "Describe" }, image(dataUrl(pngA, "image/png"))]);
    expect(a.text.length).toBeGreaterThan(0);
    expect(b.text).not.toBe(a.text);
    expect(a2.text).toBe(a.text);
  });

  test("the same image twice in one message is the same as itself, and differs from one copy", async () => {
    const twice = [image(dataUrl(pngA, "image/png")), { type: "text" as const, text: "and" }, image(dataUrl(pngA, "image/png"))];
    const x = await whole(twice);
    const y = await whole(twice);
    expect(y.text).toBe(x.text);
    const once = await whole([image(dataUrl(pngA, "image/png")), { type: "text", text: "and" }]);
    expect(x.usage.prompt_tokens).toBeGreaterThan(once.usage.prompt_tokens);
  });

  test("streamed and whole agree, and usage counts the image tokens", async () => {
    const parts: Part[] = [{ type: "text", text: "What is this?" }, image(dataUrl(jpgB, "image/jpeg"))];
    const w = await whole(parts);
    const { text, usage } = await streamed(client, ask(parts));
    expect(text).toBe(w.text);
    // The same prompt again, image included, comes from the prefix cache but for its last token.
    expect(usage).toEqual({ ...w.usage, prompt_tokens_details: { cached_tokens: w.usage.prompt_tokens - 1 } });
    const textOnly = await whole([{ type: "text", text: "What is this?" }]);
    // 50x90 -> 36x64 -> tiles of 32: 1 column x 2 rows + the global image, 16 tokens each.
    const imageTokens = w.usage.prompt_tokens - textOnly.usage.prompt_tokens;
    expect(imageTokens).toBeGreaterThanOrEqual(3 * 16);
    expect(w.usage.total_tokens).toBe(w.usage.prompt_tokens + w.usage.completion_tokens);
  });

  test("detail low sends one global tile (fewer image tokens), high the processor's tiling", async () => {
    const low = await whole([image(dataUrl(pngA, "image/png"), "low")]);
    const high = await whole([image(dataUrl(pngA, "image/png"), "high")]);
    const auto = await whole([image(dataUrl(pngA, "image/png"), "auto")]);
    expect(high.usage.prompt_tokens).toBe(auto.usage.prompt_tokens);
    // 80x50 -> 64x40 -> 64x64: 2 x 2 tiles + global = 5 x 16 image tokens; low: 16.
    expect(high.usage.prompt_tokens - low.usage.prompt_tokens).toBeGreaterThanOrEqual(4 * 16);
  });

  test("a remote image on an allowed host gives the same answer as the same bytes inline", async () => {
    const inline = await whole([{ type: "text", text: "Describe" }, image(dataUrl(pngA, "image/png"))]);
    configureImagePolicy({ allowHosts: ["127.0.0.1"] });
    try {
      const remote = await whole([{ type: "text", text: "Describe" }, image(`http://127.0.0.1:${imgServer.port}/a.png`)]);
      expect(remote).toEqual(inline);
    } finally {
      configureImagePolicy({});
    }
  });

  test("loopback is refused by default, naming the part", async () => {
    const err = await client.chat.completions
      .create(ask([{ type: "text", text: "x" }, image(`http://127.0.0.1:${imgServer.port}/a.png`)]))
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    const e = err as InstanceType<typeof OpenAI.BadRequestError>;
    expect(e.param).toBe("messages[0].content[1]");
    expect(e.message).toMatch(/loopback/);
  });

  test("bad inline images are 400s that name the part and the reason", async () => {
    const cases: [string, RegExp][] = [
      ["data:image/png;base64,AAAA", /not a PNG, JPEG, WebP or GIF/],
      ["data:text/plain;base64,aGVsbG8=", /media type 'text\/plain'/],
      [`data:image/png;base64,${Buffer.from(pngA.subarray(0, 60)).toString("base64")}`, /could not be decoded/],
      ["ftp://example.com/a.png", /scheme 'ftp'/],
    ];
    for (const [url, why] of cases) {
      const err = (await client.chat.completions.create(ask([{ type: "text", text: "x" }, image(url)])).catch((e: unknown) => e)) as InstanceType<typeof OpenAI.BadRequestError>;
      expect(err).toBeInstanceOf(OpenAI.BadRequestError);
      expect(err.param).toBe("messages[0].content[1]");
      expect(err.message).toMatch(why);
    }
  });

  test("an image placeholder typed as text next to an image is refused, not misaligned", async () => {
    const err = (await client.chat.completions
      .create(ask([{ type: "text", text: "look: <image>" }, image(dataUrl(pngA, "image/png"))]))
      .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.BadRequestError>;
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect(err.message).toMatch(/placeholders/);
  });

  test("an image sent to a text-only model is refused, not dropped", async () => {
    const err = (await client.chat.completions
      .create({ ...ask([image(dataUrl(pngA, "image/png"))]), model: TEXT })
      .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.BadRequestError>;
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect(err.message).toMatch(/does not accept image input/);
  });

  test("text-only requests to the vision model work and n > 1 shares the image prefill", async () => {
    const t = await whole([{ type: "text", text: "Hello there" }]);
    expect(t.text.length).toBeGreaterThan(0);
    const r = await client.chat.completions.create({ ...ask([image(dataUrl(jpgB, "image/jpeg"))]), n: 2 });
    const single = await whole([image(dataUrl(jpgB, "image/jpeg"))]);
    expect(r.choices.map((c) => c.message.content)).toEqual([single.text, single.text]);
  });

  test("the fused float16 export (GroupQueryAttention, in-place KV) takes images too", async () => {
    const run = async (img: Uint8Array, mime: string) =>
      (await client.chat.completions.create({ ...ask([{ type: "text", text: "Describe" }, image(dataUrl(img, mime))]), model: VLM_FUSED16 })).choices[0]!.message.content;
    const a = await run(pngA, "image/png");
    expect(await run(pngA, "image/png")).toBe(a);
    expect(await run(jpgB, "image/jpeg")).not.toBe(a);
  });

  test("image and text requests batched together give what they give alone", async () => {
    const imageReq = ask([{ type: "text", text: "Describe" }, image(dataUrl(jpgB, "image/jpeg"))]);
    const textReq = { ...ask([{ type: "text", text: "Tell me about rivers" }]), max_tokens: 16 };
    const alone = await Promise.all([client.chat.completions.create(imageReq)]).then(async ([i]) => [i, await client.chat.completions.create(textReq)]);
    const together = await Promise.all([client.chat.completions.create(imageReq), client.chat.completions.create(textReq), client.chat.completions.create(imageReq)]);
    expect(together.map((r) => r.choices[0]!.message.content)).toEqual([alone[0]!, alone[1]!, alone[0]!].map((r) => r.choices[0]!.message.content));
  });
});
