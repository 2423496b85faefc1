// The four models the hostile benchmarks serve (tiny-bytes, tiny-qwen3 with Qwen3's 151k
// tokenizer, the synthetic vision model, stories260K when present), in a fresh models directory.
import { existsSync, mkdtempSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { TextTokenizer } from "../src/engine/text/tokenizer.ts";
import { buildSyntheticVlm, importLlama2c } from "../src/modelkit/index.ts";
import type { HostileModels } from "../test/hardening/hostile-cases.ts";
import { linkCachedModel, tinyModelsRoot } from "../test/helpers/models.ts";
import { hasStories, STORIES_DIR } from "../test/helpers/paths.ts";

export async function hostileModels(): Promise<{ modelsDir: string; models: HostileModels }> {
  const modelsDir = mkdtempSync(join(tmpdir(), "sluice-bench-hostile-"));
  const tiny = await linkCachedModel(modelsDir, "hostile-tiny", { preset: "tiny-bytes", seed: 5, id: "hostile/tiny" });
  const qwen = await linkCachedModel(modelsDir, "hostile-qwen", { preset: "tiny-qwen3", seed: 7, id: "hostile/qwen" });
  const vlm = join(modelsDir, "vlm");
  buildSyntheticVlm(vlm, { id: "hostile/vlm" });
  let stories: string | null = null;
  if (hasStories) {
    stories = join(tinyModelsRoot(), "hostile-stories260k");
    if (!existsSync(join(stories, "sluice.json"))) await importLlama2c(join(STORIES_DIR, "stories260K.bin"), join(STORIES_DIR, "tok512.bin"), { id: "hostile/stories260k", outDir: stories });
    symlinkSync(stories, join(modelsDir, "stories"));
  }
  const tinyTok = TextTokenizer.load(tiny);
  const models: HostileModels = {
    text: "hostile/tiny",
    tools: "hostile/qwen",
    vision: "hostile/vlm",
    stories: stories ? "hostile/stories260k" : null,
    vocab: {
      "hostile/tiny": tinyTok.vocabSize,
      "hostile/qwen": TextTokenizer.load(qwen).vocabSize,
      "hostile/vlm": TextTokenizer.load(vlm).vocabSize,
      ...(stories ? { "hostile/stories260k": TextTokenizer.load(stories).vocabSize } : {}),
    },
    xToken: tinyTok.tokenToId("x")!,
  };
  return { modelsDir, models };
}
