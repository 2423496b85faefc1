// A test run leaves no temporary directories behind: `make test` left about eleven sluice-*
// directories (33 MB) in the temp directory per run, made by fixtures that return a path and keep
// no handle. Runs those tests in a child `bun test` with a temp directory of its own, then looks.
import { expect, test } from "bun:test";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { BUN, REPO, tempDir } from "../helpers/paths.ts";

test("the tokenizer and chat-template tests leave nothing in the temp directory", async () => {
  const tmp = tempDir("sluice-tmpdir-");
  try {
    const run = Bun.spawn([BUN, "test", join(REPO, "test/engine/text/tokenizer.test.ts"), join(REPO, "test/engine/text/chat-template.test.ts")], {
      cwd: REPO,
      env: { ...process.env, TMPDIR: tmp.path },
      stdout: "pipe",
      stderr: "pipe",
    });
    const [, err, code] = await Promise.all([new Response(run.stdout).text(), new Response(run.stderr).text(), run.exited]);
    expect({ code, tail: code === 0 ? "" : err.slice(-2000) }).toEqual({ code: 0, tail: "" });
    expect(readdirSync(tmp.path)).toEqual([]);
  } finally {
    tmp.remove();
  }
}, 120_000);
