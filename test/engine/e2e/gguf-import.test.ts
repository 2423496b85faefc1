// stories260K.gguf (written by llama.cpp's own converter) imported with the CLI
// (`sluice models import gguf`), as an operator would, and served by the real server: greedy from
// the empty prompt is llama2.c's reference story token for token, and from "Once upon a time"
// (five prompt tokens with BOS, as the README gives them) its continuation.
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { BUN, REPO, STORIES_DIR, storiesReferenceText, tempDir } from "../../helpers/paths.ts";
import { serverFixture } from "../../helpers/server.ts";

const GGUF = join(STORIES_DIR, "stories260K.gguf");
const present = existsSync(GGUF);
if (!present) console.warn(`skipping the GGUF import end-to-end tests: ${GGUF} is absent`);

describe.skipIf(!present)("stories260K.gguf imported with the CLI, served", () => {
  const fx = serverFixture(async (dir) => {
    // auto keeps the file's F32 weights; q4 is asked for.
    for (const [name, extra] of [["auto", []], ["q4", ["--dtype", "q4"]]] as const) {
      const r = Bun.spawnSync([BUN, join(REPO, "src/cli/main.ts"), "models", "import", "gguf", GGUF, "--id", `karpathy/stories260k-gguf-${name}`, "--out", join(dir, name), ...extra], { cwd: REPO });
      if (r.exitCode !== 0) throw new Error(`import failed: ${r.stderr.toString()}`);
      if (name === "auto") expect(r.stderr.toString()).toContain("--dtype auto: fp32 (the file's weights: F32 100%)");
    }
  });

  test("greedy from the empty prompt: the reference story, token for token", async () => {
    const r = await fx.client.chat.completions.create({ model: "karpathy/stories260k-gguf-auto", messages: [{ role: "user", content: "" }], temperature: 0, max_tokens: 256 });
    expect(r.choices[0]!.message.content).toBe(storiesReferenceText());
    expect(r.usage).toMatchObject({ prompt_tokens: 1, completion_tokens: 256, total_tokens: 257 });
  });

  test('from "Once upon a time": five prompt tokens, and the reference story goes on', async () => {
    const r = await fx.client.chat.completions.create({ model: "karpathy/stories260k-gguf-auto", messages: [{ role: "user", content: "Once upon a time" }], temperature: 0, max_tokens: 200 });
    expect(r.usage).toMatchObject({ prompt_tokens: 5, completion_tokens: 200 });
    const text = r.choices[0]!.message.content!;
    expect(text.length).toBeGreaterThan(400);
    expect(storiesReferenceText().startsWith(`Once upon a time${text}`)).toBe(true);
  });

  test("q4: served on the same path, streamed and whole alike, the full budget", async () => {
    const req = { model: "karpathy/stories260k-gguf-q4", messages: [{ role: "user" as const, content: "Once upon a time" }], temperature: 0, max_tokens: 48 };
    const whole = await fx.client.chat.completions.create(req);
    expect(whole.usage).toMatchObject({ prompt_tokens: 5, completion_tokens: 48 });
    let streamed = "";
    for await (const chunk of await fx.client.chat.completions.create({ ...req, stream: true })) streamed += chunk.choices[0]?.delta.content ?? "";
    expect(streamed).toBe(whole.choices[0]!.message.content!);
  });
});

describe.skipIf(!present)("sluice models import gguf: refusals as an operator sees them", () => {
  const cli = (args: string[]) => Bun.spawnSync([BUN, join(REPO, "src/cli/main.ts"), "models", "import", "gguf", ...args], { cwd: REPO });

  test("bad arguments exit 2; a truncated file exits 1 in words, leaving nothing", () => {
    const dir = tempDir("gguf-cli-");
    try {
      const badDtype = cli([GGUF, "--id", "a/b", "--out", join(dir.path, "x"), "--dtype", "q8"]);
      expect(badDtype.exitCode).toBe(2);
      expect(badDtype.stderr.toString()).toContain("--dtype must be one of fp32, fp16, q4, q4f16, auto");
      const missing = cli([join(dir.path, "nope.gguf"), "--id", "a/b", "--out", join(dir.path, "x")]);
      expect(missing.exitCode).toBe(2);
      expect(missing.stderr.toString()).toContain("no such file");
      const cut = join(dir.path, "cut.gguf");
      writeFileSync(cut, readFileSync(GGUF).subarray(0, 600_000));
      const r = cli([cut, "--id", "a/b", "--out", join(dir.path, "out")]);
      expect(r.exitCode).toBe(1);
      expect(r.stderr.toString()).toMatch(/cut\.gguf is truncated: tensor \S+ \(F32 \[[\d, ]+\]\) ends at byte \d+, but the file has 600000 bytes \(an incomplete download\?\)/);
      expect(readdirSync(dir.path).sort()).toEqual(["cut.gguf"]);
    } finally {
      dir.remove();
    }
  });
});
