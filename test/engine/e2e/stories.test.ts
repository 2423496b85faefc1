// stories260K (the real trained model, imported from ../shared by the CLI) served end to end and
// queried with the official openai client: greedy output must be llama2.c's, token for token.
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import { BUN, hasStories, REPO, STORIES_DIR } from "../../helpers/paths.ts";
import { serverFixture } from "../../helpers/server.ts";

if (!hasStories) console.warn(`skipping stories260K tests: ${STORIES_DIR} is absent`);

/** The reference story from the README's fenced block. */
function referenceText(): string {
  const readme = readFileSync(join(STORIES_DIR, "README.md"), "utf8");
  const m = /```\n(Once upon a time[\s\S]*?)\n```/.exec(readme);
  if (!m) throw new Error("reference output not found in the stories260K README");
  return m[1]!;
}

describe.skipIf(!hasStories)("stories260K through the API", () => {
  const reference = hasStories ? referenceText() : "";
  // Imported through the CLI, as an operator would.
  const fx = serverFixture(async (dir) => {
    for (const variant of ["standard", "fused"]) {
      const r = Bun.spawnSync(
        [BUN, join(REPO, "src/cli/main.ts"), "models", "import", "llama2c", join(STORIES_DIR, "stories260K.bin"), join(STORIES_DIR, "tok512.bin"),
          "--id", `karpathy/stories260k-${variant}`, "--out", join(dir, variant), "--variant", variant],
        { cwd: REPO },
      );
      if (r.exitCode !== 0) throw new Error(`import failed: ${r.stderr.toString()}`);
    }
  });

  for (const variant of ["standard", "fused"]) {
    const model = `karpathy/stories260k-${variant}`;

    test(`${variant}: greedy from the empty prompt is llama2.c's reference story`, async () => {
      const r = await fx.client.chat.completions.create({
        model,
        messages: [{ role: "user", content: "" }],
        temperature: 0,
        max_tokens: 256,
      });
      expect(r.choices[0]!.message.content).toBe(reference);
      expect(r.choices[0]!.finish_reason).toBe("length");
      expect(r.usage).toEqual({ prompt_tokens: 1, completion_tokens: 256, total_tokens: 257, prompt_tokens_details: { cached_tokens: 0 }, completion_tokens_details: { reasoning_tokens: 0 } });
    });

    test(`${variant}: "Once upon a time" continues as llama2.c does, streamed and whole alike`, async () => {
      const req = { model, messages: [{ role: "user" as const, content: "Once upon a time" }], temperature: 0, max_tokens: 100 };
      const whole = await fx.client.chat.completions.create(req);
      const text = whole.choices[0]!.message.content!;
      expect(reference.startsWith("Once upon a time" + text)).toBe(true);
      expect(text.length).toBeGreaterThan(200);
      // Prompts this short are not kept in the prefix cache: nothing is cached.
      expect(whole.usage).toEqual({ prompt_tokens: 5, completion_tokens: 100, total_tokens: 105, prompt_tokens_details: { cached_tokens: 0 }, completion_tokens_details: { reasoning_tokens: 0 } });

      const stream = await fx.client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true }, logprobs: true });
      let streamed = "";
      let chunks = 0;
      let tokens = 0;
      let usage: OpenAI.CompletionUsage | undefined;
      let finish: string | null = null;
      for await (const chunk of stream) {
        if (chunk.usage) usage = chunk.usage;
        const c = chunk.choices[0];
        if (!c) continue;
        chunks++;
        streamed += c.delta.content ?? "";
        // The tokens made within the stream interval share a chunk, each with its logprob.
        const logprobs = c.logprobs?.content ?? [];
        if (c.delta.content) expect(logprobs.length).toBeGreaterThan(0);
        tokens += logprobs.length;
        if (c.finish_reason) finish = c.finish_reason;
      }
      expect(streamed).toBe(text);
      // Streamed in pieces (the role chunk, the first token at once, the rest as it comes), one
      // logprob per token in all.
      expect(chunks).toBeGreaterThan(2);
      expect(tokens).toBe(100);
      expect(finish).toBe("length");
      expect(usage).toEqual(whole.usage!);
    });
  }

  test("usage rows carry the real token counts", async () => {
    const before = await fx.server.store.usage.countAll();
    await fx.client.chat.completions.create({ model: "karpathy/stories260k-fused", messages: [{ role: "user", content: "Once upon a time" }], temperature: 0, max_tokens: 7, user: "u-42", metadata: { run: "t" } });
    const rows = await fx.server.store.usage.list((await fx.server.store.accounts.get("local"))!.id, { limit: 1 });
    expect((await fx.server.store.usage.countAll())).toBe(before + 1);
    expect(rows[0]).toMatchObject({ modelId: "karpathy/stories260k-fused", promptTokens: 5, completionTokens: 7, status: "ok", finishReason: "length", user: "u-42", metadata: { run: "t" } });
  });
});
