// The synthetic Qwen2-VL is a real onnx-community-layout export: transformers.js loads it
// (AutoProcessor + Qwen2VLForConditionalGeneration, with its own get_rope_index and rope deltas)
// and its greedy output for an image prompt equals the engine's, token for token, with the same
// prompt length (image tokens included).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { AutoModelForImageTextToText, AutoProcessor, RawImage, env } from "@huggingface/transformers";
import { createEngine } from "../../src/engine/index.ts";
import type { Engine } from "../../src/engine/types.ts";
import { silentLogger } from "../../src/log.ts";
import { buildSyntheticQwen2VL } from "../../src/modelkit/index.ts";
import { tempDir } from "../helpers/paths.ts";
import { dataUrl, makeImage } from "./images.ts";
import { engineGreedy } from "./support.ts";

const models = tempDir("sluice-qwen2vl-tjs-");
let engine: Engine;

beforeAll(async () => {
  // Up to 400 image tokens: a large image spans two of the scheduler's 256-token prefill chunks.
  buildSyntheticQwen2VL(join(models.path, "qwen2vl"), { id: "qwen2vl", maxPixels: 28 * 28 * 400 });
  engine = await createEngine({ log: silentLogger(), device: "cpu", threads: 1, preload: "all" });
  const [loaded] = await engine.load([{ id: "qwen2vl", dir: join(models.path, "qwen2vl") }]);
  if (!loaded?.model) throw new Error(`load failed: ${loaded?.error}`);
}, 60_000);

afterAll(async () => {
  await engine?.close();
  models.remove();
});


describe("transformers.js runs the synthetic Qwen2-VL like the engine does", () => {
  test("same prompt length and greedy text for PNG and JPEG images, small and chunked", async () => {
    env.allowRemoteModels = false;
    env.localModelPath = `${models.path}/`;
    const processor = await AutoProcessor.from_pretrained("qwen2vl");
    const model = await AutoModelForImageTextToText.from_pretrained("qwen2vl", { dtype: "fp32" });
    const cases: [Uint8Array, string][] = [
      [await makeImage("png", 90, 60, 11), "image/png"],
      [await makeImage("jpeg", 50, 100, 12), "image/jpeg"],
      [await makeImage("png", 620, 470, 13), "image/png"],
    ];
    const texts: string[] = [];
    const promptLens: number[] = [];
    for (const [bytes, mime] of cases) {
      const image = await RawImage.fromBlob(new Blob([new Uint8Array(bytes)]));
      const prompt = processor.apply_chat_template(
        [{ role: "user", content: [{ type: "text", text: "Describe" }, { type: "image" }, { type: "text", text: "please" }] }] as never,
        { add_generation_prompt: true },
      ) as string;
      const inputs = await processor(prompt, [image]);
      const out = (await model.generate({ ...inputs, max_new_tokens: 12, do_sample: false } as never)) as unknown as { slice: (...a: unknown[]) => unknown };
      const promptLen = inputs.input_ids.dims.at(-1) as number;
      const [reference] = processor.batch_decode(out.slice(null, [promptLen, null]) as never, { skip_special_tokens: true });
      const ours = await engineGreedy(engine, "qwen2vl", [{ type: "text", text: "Describe" }, { type: "image_url", image_url: { url: dataUrl(bytes, mime) } }, { type: "text", text: "please" }], 12);
      expect(ours.promptTokens).toBe(promptLen);
      promptLens.push(promptLen);
      expect(ours.text).toBe(reference!);
      texts.push(ours.text);
    }
    expect(texts[0]!.length).toBeGreaterThan(0);
    expect(promptLens[2]).toBeGreaterThan(256);
    expect(new Set(texts).size).toBe(texts.length);
  }, 120_000);
});
