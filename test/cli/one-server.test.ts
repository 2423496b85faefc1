// One server per port and one per data directory: a second `sluice serve` on either exits 1 with a
// message naming the port or the directory and the process that holds it, before it opens a store
// or writes anything, and the first keeps serving with its control.json (so `models resident`
// still finds it). The lock goes with the process, even one killed with SIGKILL.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { BUN, REPO, tempDir } from "../helpers/paths.ts";
import { spawnServe, type ServeProcess } from "../helpers/serve-process.ts";

const MAIN = join(REPO, "src/cli/main.ts");
let root: ReturnType<typeof tempDir>;
let models: string;
let first: ServeProcess;
const dataA = () => join(root.path, "a");

/** `sluice serve` that is expected not to start: its exit code and what it printed. */
async function serveRefused(args: string[]) {
  const p = Bun.spawn([BUN, MAIN, "serve", "--models", models, "--no-demo", ...args], { cwd: root.path, env: { ...process.env, SLUICE_WARMUP_MS: "0" }, stdout: "pipe", stderr: "pipe" });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  return { code, out, err };
}

const sluice = (args: string[]) => {
  const p = Bun.spawnSync([BUN, MAIN, ...args], { cwd: root.path, env: process.env });
  return { code: p.exitCode, out: p.stdout.toString(), err: p.stderr.toString() };
};

beforeAll(async () => {
  root = tempDir("sluice-one-server-");
  models = join(root.path, "models");
  mkdirSync(models);
  first = await spawnServe(["--data", dataA(), "--models", models, "--no-demo"]);
}, 60_000);

afterAll(async () => {
  if (first.proc.exitCode === null) await first.stop();
  root.remove();
});

describe("one server per port, one per data directory", () => {
  test("a second serve on the same port exits 1 naming the port and the process, and writes nothing", async () => {
    const port = new URL(first.url).port;
    const other = join(root.path, "b");
    const r = await serveRefused(["--port", port, "--data", other]);
    expect(r.code).toBe(1);
    expect(r.err).toContain(`port ${port} on 127.0.0.1 is already in use by process ${first.proc.pid}`);
    expect(r.err).toContain("serve");
    // Refused first of all: the message is all it printed, and the other data directory was never made.
    expect(r.err.trim().split("\n")).toHaveLength(1);
    expect(existsSync(other)).toBe(false);
    expect(r.out).not.toContain("sk-sluice-");
    // The first still answers every request on its port.
    for (let i = 0; i < 6; i++) expect((await fetch(`${first.url}/health`)).status).toBe(200);
  }, 60_000);

  test("a second serve on the same data directory exits 1 naming the directory and the process; the first keeps its control.json", async () => {
    const r = await serveRefused(["--port", "0", "--data", dataA()]);
    expect(r.code).toBe(1);
    expect(r.err).toContain(`the data directory ${dataA()} is in use by another sluice serve (process ${first.proc.pid}, serving ${first.url}`);
    expect(r.err.trim().split("\n")).toHaveLength(1);
    expect(existsSync(join(dataA(), "control.json"))).toBe(true);
    const resident = sluice(["models", "resident", "--data", dataA()]);
    expect(resident.err).toBe("");
    expect(resident.code).toBe(0);
    expect(resident.out).toContain("memory budget");
  }, 60_000);

  test("the lock goes with the process: after a clean stop, and after SIGKILL", async () => {
    expect(await first.stop()).toBe(0);
    const again = await spawnServe(["--data", dataA(), "--models", models, "--no-demo"]);
    expect(await again.stop("SIGKILL")).not.toBe(0);
    first = await spawnServe(["--data", dataA(), "--models", models, "--no-demo"]);
    expect((await fetch(`${first.url}/health`)).status).toBe(200);
  }, 60_000);
});
