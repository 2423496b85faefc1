// A vision model keeps the images it encoded: the same image with the same detail is answered
// from the cache with the same features; another detail or another image is encoded afresh.
import { afterAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { openHostSession } from "../../src/engine/decoders.ts";
import { VisionModel, type RequestImage } from "../../src/engine/vision/vision-model.ts";
import { buildSyntheticVlm } from "../../src/modelkit/index.ts";
import { tempDir } from "../helpers/paths.ts";
import { dataUrl, makeImage } from "./images.ts";

const root = tempDir("sluice-vlm-cache-");
afterAll(() => root.remove());

/** The encoder as serve opens it on the CPU (the C API binding). */
const CPU_ENCODER = { open: (path: string) => openHostSession(path, { providers: ["cpu"], threads: 1, binding: "capi" }) };

const part = (url: string, detail?: "low" | "high"): RequestImage => ({
  part: { type: "image_url", image_url: detail ? { url, detail } : { url } },
  param: "messages[0].content[0]",
});

describe("encoded images", () => {
  test("the same image and detail come from the cache; another detail or image does not", async () => {
    buildSyntheticVlm(join(root.path, "vlm"), { id: "synthetic/cache-vlm", seed: 41 });
    const vision = (await VisionModel.load(join(root.path, "vlm"), CPU_ENCODER))!;
    try {
      const a = dataUrl(await makeImage("png", 70, 40, 51), "image/png");
      const b = dataUrl(await makeImage("png", 70, 40, 52), "image/png");
      const first = await vision.encode(part(a));
      expect(vision.cacheHits).toBe(0);
      const again = await vision.encode(part(a));
      expect(vision.cacheHits).toBe(1);
      expect(again.promptText).toBe(first.promptText);
      expect(Array.from(again.features)).toEqual(Array.from(first.features));

      const low = await vision.encode(part(a, "low"));
      expect(vision.cacheHits).toBe(1);
      expect(low.rows).toBeLessThan(first.rows);
      const other = await vision.encode(part(b));
      expect(vision.cacheHits).toBe(1);
      expect(Array.from(other.features)).not.toEqual(Array.from(first.features));
      await vision.encode(part(a, "low"));
      expect(vision.cacheHits).toBe(2);
    } finally {
      await vision.release();
    }
  });

  test("the least recently used image leaves first when the features outgrow the cache", async () => {
    const dir = join(root.path, "vlm");
    const a = dataUrl(await makeImage("png", 70, 40, 53), "image/png");
    const b = dataUrl(await makeImage("png", 70, 40, 54), "image/png");
    const probe = (await VisionModel.load(dir, CPU_ENCODER))!;
    const bytes = (await probe.encode(part(a))).features.byteLength;
    await probe.release();
    // Room for one image's features only.
    const vision = (await VisionModel.load(dir, { ...CPU_ENCODER, encodedCacheBytes: bytes }))!;
    try {
      await vision.encode(part(a));
      await vision.encode(part(a));
      expect(vision.cacheHits).toBe(1);
      await vision.encode(part(b));
      await vision.encode(part(a));
      expect(vision.cacheHits).toBe(1);
      await vision.encode(part(a));
      expect(vision.cacheHits).toBe(2);
    } finally {
      await vision.release();
    }
  });
});
