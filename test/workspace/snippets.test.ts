// The workspace's Node.js snippet, saved as index.js in a fresh `npm init -y` project (CommonJS,
// the default) and in an ES module one, runs with Node against the real server and prints the
// answer. Skipped, saying why, without node and npm.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { integrationInfo, snippets } from "../../src/workspace/integrations.ts";
import { linkCachedModel } from "../helpers/models.ts";
import { REPO, tempDir } from "../helpers/paths.ts";
import { startTestServer, type TestServer } from "../helpers/server.ts";

const MODEL = "snippets/tiny";
const node = Bun.which("node");
const npm = Bun.which("npm");
if (!node || !npm) console.log("workspace snippets: the Node.js snippet is not run: node or npm is absent");

let server: TestServer;
let models: ReturnType<typeof tempDir>;
let dir: ReturnType<typeof tempDir>;

beforeAll(async () => {
  if (!node || !npm) return;
  models = tempDir("sluice-snippet-models-");
  await linkCachedModel(models.path, "bytes", { preset: "tiny-bytes", seed: 8, id: MODEL });
  server = await startTestServer({ modelsDir: models.path });
  dir = tempDir("sluice-snippet-");
}, 120_000);

afterAll(async () => {
  await server?.cleanup();
  models?.remove();
  dir?.remove();
});

describe.skipIf(!node || !npm)("the Node.js snippet", () => {
  test.each([["CommonJS (npm init -y)", null], ['an ES module project ("type": "module")', "module"]])("runs as index.js in %s", async (_, type) => {
    const project = join(dir.path, type ?? "commonjs");
    mkdirSync(join(project, "node_modules"), { recursive: true });
    const init = Bun.spawnSync([npm!, "init", "-y"], { cwd: project, env: { ...process.env, npm_config_yes: "true" } });
    expect(init.exitCode).toBe(0);
    if (type) writeFileSync(join(project, "package.json"), JSON.stringify({ ...(await Bun.file(join(project, "package.json")).json()), type }));
    // `npm install openai`, from the checkout's copy (no network in tests).
    symlinkSync(join(REPO, "node_modules", "openai"), join(project, "node_modules", "openai"));
    const snippet = snippets(integrationInfo(server.url, [MODEL]), MODEL).find((s) => s.id === "node")!;
    expect(snippet.where).toContain("index.js");
    writeFileSync(join(project, "index.js"), snippet.text + "\n");
    const run = Bun.spawn([node!, "index.js"], { cwd: project, env: { ...process.env, OPENAI_API_KEY: server.key }, stdout: "pipe", stderr: "pipe" });
    const [out, err, code] = await Promise.all([new Response(run.stdout).text(), new Response(run.stderr).text(), run.exited]);
    expect(err).toBe("");
    expect(code).toBe(0);
    // It printed the answer (a random model's may be empty: one line all the same).
    expect(out).toEndWith("\n");
  }, 60_000);
});
