// Hugging Face checkpoints imported with the CLI (`sluice models import hf`), as an operator
// would, and served: stories260K written as an HF Llama checkpoint tells llama2.c's reference
// story through the API in fp32, and its 4-bit import serves on the same fast path.
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { BUN, hasStories, REPO, STORIES_DIR, storiesReferenceText, tempDir } from "../../helpers/paths.ts";
import { serverFixture } from "../../helpers/server.ts";
import { writeStoriesHfCheckpoint } from "../../modelkit/hf-fixtures.ts";

if (!hasStories) console.warn(`skipping the HF import end-to-end tests: ${STORIES_DIR} is absent`);


describe.skipIf(!hasStories)("stories260K imported from an HF checkpoint, served", () => {
  const fx = serverFixture(async (dir) => {
    const scratch = tempDir("hf-e2e-");
    try {
      writeStoriesHfCheckpoint(STORIES_DIR, scratch.path);
      for (const dtype of ["fp32", "q4"]) {
        const r = Bun.spawnSync(
          [BUN, join(REPO, "src/cli/main.ts"), "models", "import", "hf", scratch.path, "--id", `karpathy/stories260k-hf-${dtype}`, "--out", join(dir, dtype), "--dtype", dtype],
          { cwd: REPO },
        );
        if (r.exitCode !== 0) throw new Error(`import failed: ${r.stderr.toString()}`);
      }
    } finally {
      scratch.remove();
    }
  });

  test("both are listed; fp32 greedy from the empty prompt is the reference story", async () => {
    const ids = (await fx.client.models.list()).data.map((m) => m.id);
    expect(ids).toEqual(expect.arrayContaining(["karpathy/stories260k-hf-fp32", "karpathy/stories260k-hf-q4"]));
    const r = await fx.client.chat.completions.create({ model: "karpathy/stories260k-hf-fp32", messages: [{ role: "user", content: "" }], temperature: 0, max_tokens: 256 });
    expect(r.choices[0]!.message.content).toBe(storiesReferenceText());
    expect(r.usage).toEqual({ prompt_tokens: 1, completion_tokens: 256, total_tokens: 257, prompt_tokens_details: { cached_tokens: 0 }, completion_tokens_details: { reasoning_tokens: 0 } });
  });

  test("q4: served on the same path, streamed and whole alike, the full budget", async () => {
    const req = { model: "karpathy/stories260k-hf-q4", messages: [{ role: "user" as const, content: "Once upon a time" }], temperature: 0, max_tokens: 64 };
    const whole = await fx.client.chat.completions.create(req);
    const text = whole.choices[0]!.message.content!;
    expect(whole.usage).toEqual({ prompt_tokens: 5, completion_tokens: 64, total_tokens: 69, prompt_tokens_details: { cached_tokens: 0 }, completion_tokens_details: { reasoning_tokens: 0 } });
    expect(text.length).toBeGreaterThan(100);
    const stream = await fx.client.chat.completions.create({ ...req, stream: true });
    let streamed = "";
    for await (const chunk of stream) streamed += chunk.choices[0]?.delta.content ?? "";
    expect(streamed).toBe(text);
  });
});
