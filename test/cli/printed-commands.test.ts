// A new operator's first ten minutes in a checkout: `./sluice serve` (what `make run` runs) in an
// empty directory, then every command its banner, its error hints and the README print, run
// exactly as printed through /bin/sh. Only the README's CAPITALS and the key or port it cannot
// know are filled in. The directory holds a link to the checkout's launcher, so `./sluice` is what
// the operator types there, and the default ./data and ./models are that directory's.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readFileSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { nvidiaGpuPresent } from "../../src/packaging/cuda.ts";
import { openSqliteStore } from "../../src/store/index.ts";
import { hasStories, REPO, STORIES_DIR, tempDir } from "../helpers/paths.ts";
import { writeStoriesHfCheckpoint } from "../modelkit/hf-fixtures.ts";
import { bannerCommands, hintIn, markdownCommands, readBanner, runPrinted, type Ran } from "../helpers/printed-commands.ts";
import { buildHubRepos, GGUF_REPO, STORIES_REPO, type HubFixtures } from "../helpers/hub-repos.ts";
import { startHubServer, type HubServer } from "../helpers/hub-server.ts";

const PASSWORD = "a long enough password\n";
const STORIES_ID = "karpathy/stories260k";
const HF_DIR = "Qwen3-0.6B";
const HF_EXAMPLE_ID = "qwen/qwen3-0.6b-q4";
/** The README's models pull example, answered by a local Hub with stories260K standing in. */
const PULL_EXAMPLE_REPO = "onnx-community/Qwen3-0.6B-ONNX";
/** The README's GGUF pull example, answered by the local Hub's *-GGUF repository under that name. */
const GGUF_EXAMPLE_REPO = "Qwen/Qwen3-0.6B-GGUF";
const GGUF_EXAMPLE = `${GGUF_EXAMPLE_REPO}:Q8_0`;
if (!hasStories) console.log(`printed commands: the README's model imports are skipped: ${STORIES_DIR} is absent`);

let dir: ReturnType<typeof tempDir>;
let env: Record<string, string>;
let hubFixtures: HubFixtures | null = null;
let hub: HubServer | null = null;

beforeAll(async () => {
  dir = tempDir("sluice-first-run-");
  symlinkSync(join(REPO, "sluice"), join(dir.path, "sluice"));
  if (hasStories) {
    for (const f of ["stories260K.bin", "tok512.bin", "stories260K.gguf"]) symlinkSync(join(STORIES_DIR, f), join(dir.path, f));
    // The README's Hugging Face example names ./Qwen3-0.6B: stories260K written as an HF checkpoint stands in.
    writeStoriesHfCheckpoint(STORIES_DIR, join(dir.path, HF_DIR));
    hubFixtures = await buildHubRepos();
    const stories = hubFixtures.repos.find((r) => r.id === STORIES_REPO)!;
    const gguf = hubFixtures.repos.find((r) => r.id === GGUF_REPO)!;
    hub = startHubServer([
      { ...stories, id: PULL_EXAMPLE_REPO },
      { ...gguf, id: GGUF_EXAMPLE_REPO },
    ]);
  }
  mkdirSync(join(dir.path, "home"));
  // Port 0: the README's 8080 may be taken on a shared machine; the banner says which port it got.
  env = { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: join(dir.path, "home"), LANG: "C.UTF-8", SLUICE_PORT: "0" };
});
afterAll(() => {
  hub?.stop();
  hubFixtures?.remove();
  dir?.remove();
});

const run = (line: string, stdin?: string) => runPrinted(line, dir.path, env, stdin);

function ok(line: string, r: Ran): Ran {
  if (r.code !== 0) throw new Error(`${line}\nexited ${r.code}:\n${r.out}${r.err}`);
  return r;
}

interface Serving {
  proc: Bun.Subprocess<"ignore", "pipe", "pipe">;
  banner: string;
  url: string;
  stop(): Promise<number>;
}

/** `./sluice serve` as the README prints it; resolves once its banner is out. */
async function serve(): Promise<Serving> {
  const proc = Bun.spawn(["/bin/sh", "-c", "exec ./sluice serve"], { cwd: dir.path, env, stdin: "ignore", stdout: "pipe", stderr: "pipe" });
  const banner = await readBanner(proc.stdout);
  const url = /at (http:\/\/\S+)\/v1/.exec(banner)![1]!;
  return {
    proc,
    banner,
    url,
    async stop() {
      proc.kill("SIGTERM");
      return await proc.exited;
    },
  };
}

let firstKey = "";

describe("every command printed for the operator runs as printed, in a checkout", () => {
  test("the first start: its banner's commands, then the README's, in order", async () => {
    const server = await serve();
    try {
      // The banner comes after the log lines, once the model is loaded and the port listens.
      expect((await fetch(`${server.url}/ready`)).status).toBe(200);
      const hints = bannerCommands(server.banner, "./sluice");
      expect(hints).toEqual([
        expect.stringMatching(/^curl http:\/\/127\.0\.0\.1:\d+\/v1\/models -H "Authorization: Bearer sk-sluice-\w+"$/),
        "./sluice users create EMAIL --account local --operator --password-stdin",
      ]);
      firstKey = /sk-sluice-\w+/.exec(server.banner)![0];
      const models = ok(hints[0]!, await run(hints[0]!));
      expect(JSON.parse(models.out).data.map((m: { id: string }) => m.id)).toEqual(["sluice/demo"]);
      ok(hints[1]!, await run(hints[1]!.replace("EMAIL", "first@example.com"), PASSWORD));

      await walkReadme(server);
    } finally {
      expect(await server.stop()).toBe(0);
    }
    // A CPU machine is an ordinary place to serve from: a short line or two about the device, no warning.
    if (nvidiaGpuPresent()) return;
    const log = (await new Response(server.proc.stderr).text()).split("\n").filter(Boolean);
    const devices = log.filter((l) => /CPU|GPU|CUDA|device/.test(l) && !l.includes('"model loaded on'));
    expect(devices.length).toBeGreaterThanOrEqual(1);
    expect(devices.length).toBeLessThanOrEqual(2);
    for (const l of devices) {
      expect(JSON.parse(l).level).toBe("info");
      expect(l.length).toBeLessThan(200);
    }
    expect(log.filter((l) => JSON.parse(l).level !== "info")).toEqual([]);
  }, 120_000);

  test("a later start prints how to create a key; that key works", async () => {
    const server = await serve();
    try {
      expect(server.banner).not.toMatch(/sk-sluice-\w+/);
      // Someone can sign in now, so the banner no longer asks for an operator.
      expect(bannerCommands(server.banner, "./sluice")).toEqual(["./sluice keys create --account local"]);
      const created = ok("keys create", await run("./sluice keys create --account local"));
      const key = created.out.trim();
      expect(key).toMatch(/^sk-sluice-\w+$/);
      const res = await fetch(`${server.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
      expect(res.status).toBe(200);
    } finally {
      expect(await server.stop()).toBe(0);
    }
  }, 60_000);

  test("error messages' hints and --help name the launcher and run as printed", async () => {
    const failed = await run("./sluice keys create --account nobody");
    expect(failed.code).toBe(2);
    const see = hintIn(failed.err);
    expect(see).toBe("./sluice accounts list");
    expect(ok(see!, await run(see!)).out).toContain("local");
    const unknown = await run("./sluice frobnicate");
    expect(hintIn(unknown.err)).toBe("./sluice --help");
    const help = ok("--help", await run(hintIn(unknown.err)!)).out;
    // Command lines (a summary too long for its column goes on the line below, indented further).
    const listed = help.split("\n").filter((l) => /^ {2}\S/.test(l));
    expect(listed.length).toBeGreaterThan(20);
    for (const l of listed) expect(l).toStartWith("  ./sluice ");
    expect(help).toContain("./sluice COMMAND --help");
  }, 60_000);
});

/** Runs each distinct command of the README in order, with its CAPITALS filled in. */
async function walkReadme(server: Serving) {
  const commands = [...new Set(markdownCommands(readFileSync(join(REPO, "README.md"), "utf8"), "./sluice"))];
  let users = 0;
  let lastUser = "";
  const keyId = async () => {
    const store = openSqliteStore(join(dir.path, "data", "sluice.db"));
    try {
      return (await store.keys.list((await store.accounts.get("acme"))!.id))[0]!.id;
    } finally {
      await store.close();
    }
  };
  const ran: string[] = [];
  for (const printed of commands) {
    if (printed === "./sluice serve") continue; // running: this is the server under test
    if ((printed.includes("models import") || printed.includes("models pull")) && !hasStories) continue;
    let line = printed
      .replace("http://127.0.0.1:8080", server.url)
      .replace("sk-sluice-…", firstKey)
      .replace("kill -HUP PID", `kill -HUP ${server.proc.pid}`);
    if (line.includes("users create EMAIL")) lastUser = `user${++users}@example.com`;
    line = line
      .replace(/\bEMAIL\b/g, lastUser)
      .replace(/\bDIR --id MODEL --out models\/MODEL/, `./${HF_DIR} --id ${STORIES_ID}-hf --out models/${STORIES_ID}-hf`)
      .replace(/\bFILE --id MODEL --out models\/MODEL/, `stories260K.gguf --id ${STORIES_ID}-gguf-table --out models/${STORIES_ID}-gguf-table`)
      .replace(/\bREPO:QUANT\b/g, GGUF_EXAMPLE)
      .replace(/--id MODEL --out models\/MODEL/, `--id ${STORIES_ID} --out models/${STORIES_ID}`)
      .replace(/\bREPO\b/g, PULL_EXAMPLE_REPO)
      // Loading acts on a model the running server serves: once a model is imported, the demo is not.
      .replace(/models (load|unload) MODEL/, `models $1 ${hasStories ? STORIES_ID : "sluice/demo"}`)
      .replace(/\bMODEL\b/g, "sluice/demo")
      .replace(/\bNAME\b/g, "acme")
      .replace(/\bLABEL\b/g, "laptop")
      .replace(/\bUSD\b/g, "0.5")
      .replace(/\bN\b/g, "60")
      .replace("CHECKPOINT TOKENIZER", "stories260K.bin tok512.bin");
    if (line.includes("KEY_ID")) line = line.replace("KEY_ID", await keyId());
    expect(line).not.toMatch(/\b(NAME|MODEL|KEY_ID|EMAIL|LABEL|USD|PID|CHECKPOINT|TOKENIZER|DIR|REPO|FILE|QUANT)\b|…/);
    // A pull asks the local Hub (HF_ENDPOINT), as an operator's asks huggingface.co.
    const r = line.includes("models pull")
      ? ok(line, await runPrinted(line, dir.path, { ...env, HF_ENDPOINT: hub!.url }))
      : ok(line, await run(line, line.includes("--password-stdin") ? PASSWORD : undefined));
    ran.push(line);
    if (line.startsWith("curl ") && line.includes("chat/completions")) {
      expect(JSON.parse(r.out).choices[0].message.content).toBeString();
    }
    if (line.startsWith("kill -HUP") && hasStories) {
      // The imported model is served once the catalog has been synchronised.
      let ids: string[] = [];
      for (let i = 0; i < 200 && !(ids.includes(STORIES_ID) && ids.includes(HF_EXAMPLE_ID)); i++) {
        await Bun.sleep(50);
        const res = await fetch(`${server.url}/v1/models`, { headers: { authorization: `Bearer ${firstKey}` } });
        ids = ((await res.json()) as { data: { id: string }[] }).data.map((m) => m.id);
      }
      expect(ids).toContain(STORIES_ID);
      expect(ids).toContain(HF_EXAMPLE_ID);
    }
  }
  // The walk covered the table: every command family, each run once.
  for (const family of ["accounts", "keys", "models", "users", "billing", "limits", "doctor"]) {
    expect(ran.some((l) => l.startsWith(`./sluice ${family}`))).toBe(true);
  }
  expect(ran.some((l) => l.startsWith("curl "))).toBe(true);
  if (hasStories) {
    for (const id of [STORIES_ID, `${STORIES_ID}-hf`, HF_EXAMPLE_ID, PULL_EXAMPLE_REPO, `${STORIES_ID}-gguf`, `${STORIES_ID}-gguf-table`, `${GGUF_EXAMPLE_REPO}-Q8_0`]) {
      expect(existsSync(join(dir.path, "models", id, "sluice.json"))).toBe(true);
    }
  }
}
