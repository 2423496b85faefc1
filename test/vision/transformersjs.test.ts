// The synthetic vision-language model is a real Idefics3/SmolVLM-layout export: transformers.js
// loads it (AutoProcessor + AutoModelForVision2Seq) and its greedy output for an image equals
// the engine's, token for token, with the same prompt length (image tokens included).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { AutoModelForVision2Seq, AutoProcessor, RawImage, env } from "@huggingface/transformers";
import { createEngine } from "../../src/engine/index.ts";
import type { Engine } from "../../src/engine/types.ts";
import { silentLogger } from "../../src/log.ts";
import { buildSyntheticVlm } from "../../src/modelkit/index.ts";
import { tempDir } from "../helpers/paths.ts";
import { dataUrl, makeImage } from "./images.ts";
import { engineGreedy } from "./support.ts";

const models = tempDir("sluice-vlm-tjs-");
let engine: Engine;

beforeAll(async () => {
  buildSyntheticVlm(join(models.path, "vlm"), { id: "vlm" });
  engine = await createEngine({ log: silentLogger(), device: "cpu", threads: 1, preload: "all" });
  const [loaded] = await engine.load([{ id: "vlm", dir: join(models.path, "vlm") }]);
  if (!loaded?.model) throw new Error(`load failed: ${loaded?.error}`);
}, 60_000);

afterAll(async () => {
  await engine?.close();
  models.remove();
});


describe("transformers.js reads the synthetic VLM like the engine does", () => {
  test("same prompt length and greedy text for PNG and JPEG images", async () => {
    env.allowRemoteModels = false;
    env.localModelPath = `${models.path}/`;
    const processor = await AutoProcessor.from_pretrained("vlm");
    const model = await AutoModelForVision2Seq.from_pretrained("vlm", { dtype: "fp32" });
    const cases: [Uint8Array, string][] = [
      [await makeImage("png", 80, 50, 11), "image/png"],
      [await makeImage("jpeg", 50, 90, 12), "image/jpeg"],
    ];
    const texts: string[] = [];
    for (const [bytes, mime] of cases) {
      const image = await RawImage.fromBlob(new Blob([new Uint8Array(bytes)]));
      const prompt = processor.apply_chat_template([{ role: "user", content: [{ type: "text", text: "Describe" }, { type: "image" }] }] as never, { add_generation_prompt: true }) as string;
      const inputs = await processor(prompt, [image]);
      const out = (await model.generate({ ...inputs, max_new_tokens: 10, do_sample: false } as never)) as unknown as { slice: (...a: unknown[]) => unknown };
      const promptLen = inputs.input_ids.dims.at(-1) as number;
      const [reference] = processor.batch_decode(out.slice(null, [promptLen, null]) as never, { skip_special_tokens: true });
      const ours = await engineGreedy(engine, "vlm", [{ type: "text", text: "Describe" }, { type: "image_url", image_url: { url: dataUrl(bytes, mime) } }], 10);
      expect(ours.promptTokens).toBe(promptLen);
      expect(ours.text).toBe(reference!);
      texts.push(ours.text);
    }
    expect(texts[0]).not.toBe(texts[1]);
  }, 60_000);
});
