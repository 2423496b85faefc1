// `sluice models pull` as an operator runs it: a real process against the local Hub server, with
// HF_ENDPOINT / HF_TOKEN from the environment. Exit codes and messages, one line per file
// without a terminal and a progress bar with one, a pull killed mid-file and run again, and a
// running `sluice serve` that starts serving the pulled model by itself.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, statSync } from "node:fs";
import { join } from "node:path";
import { stagingDir } from "../../src/modelkit/hub/place.ts";
import { buildHubRepos, GATED_REPO, GGUF_REPO, STORIES_REPO, type HubFixtures } from "../helpers/hub-repos.ts";
import { HUB_TOKEN, startHubServer, type HubServer } from "../helpers/hub-server.ts";
import { BUN, hasStories, REPO, STORIES_DIR, tempDir } from "../helpers/paths.ts";
import { spawnServe } from "../helpers/serve-process.ts";

if (!hasStories) console.warn(`skipping models pull CLI tests: ${STORIES_DIR} is absent`);

const DATA = "onnx/model.onnx_data";
let fixtures: HubFixtures;
let hub: HubServer;
let dir: ReturnType<typeof tempDir>;

beforeAll(async () => {
  if (!hasStories) return;
  fixtures = await buildHubRepos();
  hub = startHubServer(fixtures.repos);
  dir = tempDir("sluice-pull-cli-");
}, 120_000);

afterAll(() => {
  hub?.stop();
  fixtures?.remove();
  dir?.remove();
});

function env(extra: Record<string, string> = {}): Record<string, string | undefined> {
  // No token from the machine running the tests: HF_HOME points at an empty folder.
  return { ...process.env, HF_ENDPOINT: hub.url, HF_TOKEN: undefined, HUGGING_FACE_HUB_TOKEN: undefined, HF_TOKEN_PATH: undefined, HF_HOME: join(dir.path, "hf-home"), ...extra };
}

function spawnPull(args: string[], extra: Record<string, string> = {}) {
  return Bun.spawn([BUN, join(REPO, "src/cli/main.ts"), "models", "pull", ...args], { cwd: dir.path, env: env(extra), stdout: "pipe", stderr: "pipe" });
}

async function runPull(args: string[], extra: Record<string, string> = {}): Promise<{ code: number; out: string; err: string }> {
  const p = spawnPull(args, extra);
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  return { code, out, err };
}

describe.skipIf(!hasStories)("sluice models pull", () => {
  test("without a terminal: what was chosen, one line per file, where it went; the models directory defaults to serve's", async () => {
    const r = await runPull([STORIES_REPO, "--dtype", "fp32"]);
    expect(r.err).toBe("");
    expect(r.code).toBe(0);
    const lines = r.out.trim().split("\n");
    expect(lines[0]).toBe(`pulling ${STORIES_REPO} at main (commit ${hub.commitOf(STORIES_REPO).slice(0, 12)}) as ${STORIES_REPO}: dtype fp32 (the repo has fp32, fp16, q8, q4)`);
    expect(lines[1]).toMatch(/^7 files, 1\.\d+ MiB; 1\.\d+ MiB to fetch$/);
    expect(lines.filter((l) => l.startsWith("  fetched  "))).toHaveLength(7);
    expect(lines).toContainEqual(expect.stringMatching(/^ {2}fetched {2}onnx\/model\.onnx_data: 1\.\d+ MiB in .*, verified$/));
    expect(lines.find((l) => l.startsWith("pulled "))).toBe(`pulled ${STORIES_REPO} as ${STORIES_REPO} into ${join(dir.path, "models", STORIES_REPO)} (1.05 MiB fetched)`);
    expect(existsSync(join(dir.path, "models", STORIES_REPO, "onnx/model.onnx"))).toBe(true);
    expect(lines.at(-1)).toMatch(/^ {2}\S+ serve --models \.\/models$/);
  });

  test("exit codes and words: gated without a token (1, names HF_TOKEN), with HF_TOKEN (0); a bad dtype (2)", async () => {
    const models = join(dir.path, "gated");
    const refused = await runPull([GATED_REPO, "--models", models]);
    expect(refused.code).toBe(1);
    expect(refused.err).toContain(`sluice models pull: ${GATED_REPO} is a gated repository`);
    expect(refused.err).toContain("HF_TOKEN");
    expect(existsSync(join(models, GATED_REPO))).toBe(false);

    const allowed = await runPull([GATED_REPO, "--models", models], { HF_TOKEN: HUB_TOKEN });
    expect(allowed.code).toBe(0);
    expect(existsSync(join(models, GATED_REPO, "sluice.json"))).toBe(true);

    const bad = await runPull([STORIES_REPO, "--dtype", "int3", "--models", models]);
    expect(bad.code).toBe(2);
    expect(bad.err).toContain("--dtype must be auto or one of fp32, fp16, q8, int8, uint8, q4, q4f16, bnb4");
  });

  test("REPO:QUANT: one GGUF file, fetched, verified and converted, with the line that says so", async () => {
    const models = join(dir.path, "gguf");
    const r = await runPull([`${GGUF_REPO}:F32`, "--models", models]);
    expect(r.err).toBe("");
    expect(r.code).toBe(0);
    const lines = r.out.trim().split("\n");
    expect(lines[0]).toBe(`pulling ${GGUF_REPO} at main (commit ${hub.commitOf(GGUF_REPO).slice(0, 12)}) as ${GGUF_REPO}-F32: GGUF F32 (asked for; the repo has F32, Q8_0)`);
    expect(lines).toContainEqual(expect.stringMatching(/^ {2}fetched {2}stories260K-F32\.gguf: 1\.\d+ MiB in .*, verified$/));
    expect(lines).toContain("converting the GGUF file stories260K-F32.gguf to ONNX (dtype auto: the file's precision class)");
    expect(existsSync(join(models, `${GGUF_REPO}-F32`, "onnx/model.onnx"))).toBe(true);
    const refused = await runPull([`${GGUF_REPO}:Q4_K_M`, "--models", models]);
    expect(refused.code).toBe(2);
    expect(refused.err).toContain("the repository has no Q4_K_M GGUF file; it has: F32, Q8_0");
  });

  test("on a terminal: a progress bar with bytes, rate and ETA", async () => {
    const models = join(dir.path, "tty");
    hub.faults.bytesPerSecond = 4 * 1024 * 1024;
    try {
      // util-linux's script gives the command a pseudo-terminal.
      const cmd = [BUN, join(REPO, "src/cli/main.ts"), "models", "pull", STORIES_REPO, "--dtype", "fp32", "--models", models].join(" ");
      const p = Bun.spawn(["script", "-qec", cmd, "/dev/null"], { env: env(), stdout: "pipe", stderr: "pipe" });
      const [out, code] = await Promise.all([new Response(p.stdout).text(), p.exited]);
      expect(code).toBe(0);
      expect(out).toMatch(/\d+% \| [\d.]+ (KiB|MiB) of 1\.\d+ MiB \| [\d.]+ (KiB|MiB)\/s \| ETA \d+s \| /);
      expect(out).toContain("100% | 1.05 MiB of 1.05 MiB");
    } finally {
      hub.faults.bytesPerSecond = 0;
    }
  });

  test("killed mid-file and run again, it resumes; a running serve picks the model up without a restart", async () => {
    const models = join(dir.path, "served");
    const serve = await spawnServe(["--data", join(dir.path, "data"), "--models", models, "--no-demo"]);
    try {
      const size = hub.sizeOf(STORIES_REPO, DATA);
      const held = hub.hold(DATA, 600_000);
      const first = spawnPull([STORIES_REPO, "--dtype", "fp32", "--models", models]);
      await held.reached;
      // Killed once what the server sent is on disk: the run is cut mid-file, as by a power cut.
      const part = join(stagingDir(models, STORIES_REPO), `${DATA}.part`);
      for (let i = 0; i < 200 && !(existsSync(part) && statSync(part).size === 600_000); i++) await Bun.sleep(25);
      expect(statSync(part).size).toBe(600_000);
      first.kill("SIGKILL");
      await first.exited;
      held.release();
      expect(existsSync(join(models, STORIES_REPO))).toBe(false);

      hub.clearLog();
      const again = await runPull([STORIES_REPO, "--dtype", "fp32", "--models", models]);
      expect(again.code).toBe(0);
      expect(again.out).toMatch(/ {2}resumed {2}onnx\/model\.onnx_data: [\d.]+ KiB more of 1\.\d+ MiB in .*, verified/);
      expect(hub.bytesSent(DATA)).toBe(size - 600_000);

      const ids = async () =>
        ((await (await fetch(`${serve.url}/v1/models`, { headers: { authorization: `Bearer ${serve.key}` } })).json()) as { data: { id: string }[] }).data.map((m) => m.id);
      let seen: string[] = [];
      for (let i = 0; i < 300 && !seen.includes(STORIES_REPO); i++) {
        await Bun.sleep(100);
        seen = await ids();
      }
      expect(seen).toEqual([STORIES_REPO]);
    } finally {
      await serve.stop();
    }
  }, 90_000);
});
