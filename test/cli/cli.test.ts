// The `sluice` command line, run as a real process.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { buildSyntheticModel } from "../../src/modelkit/index.ts";
import { openSqliteStore } from "../../src/store/index.ts";
import { BUN, REPO, tempDir } from "../helpers/paths.ts";
import { spawnServe } from "../helpers/serve-process.ts";

const MAIN = join(REPO, "src/cli/main.ts");
let data: ReturnType<typeof tempDir>;

function sluice(args: string[], env: Record<string, string> = {}) {
  const p = Bun.spawnSync([BUN, MAIN, ...args], { env: { ...process.env, ...env }, cwd: REPO });
  return { code: p.exitCode, out: p.stdout.toString(), err: p.stderr.toString() };
}
const d = () => ["--data", data.path];

beforeAll(() => {
  data = tempDir("sluice-cli-");
});
afterAll(() => data.remove());

describe("sluice CLI", () => {
  test("--version, --help, and --help on every command", () => {
    expect(sluice(["--version"]).out).toMatch(/^sluice \d+\.\d+\.\d+/);
    const help = sluice(["--help"]).out;
    for (const c of ["serve", "accounts create", "keys create", "keys revoke", "models grant", "models import llama2c", "models import hf", "doctor"]) {
      expect(help).toContain(`./sluice ${c}`);
    }
    for (const c of [["serve"], ["accounts", "list"], ["keys", "create"], ["models", "disable"], ["models", "import", "llama2c"], ["models", "import", "hf"]]) {
      const r = sluice([...c, "--help"]);
      expect(r.code).toBe(0);
      expect(r.out).toContain(`Usage: ./sluice ${c.join(" ")}`);
      expect(r.out).toContain("SLUICE_");
    }
  });

  test("accounts and keys: create prints the key once, list never shows it, revoke works", () => {
    expect(sluice(["accounts", "create", "acme", ...d()]).code).toBe(0);
    expect(sluice(["accounts", "create", "acme", ...d()]).code).toBe(1);
    const created = sluice(["keys", "create", "--account", "acme", "--label", "laptop", ...d()]);
    expect(created.code).toBe(0);
    const key = created.out.trim();
    expect(key).toMatch(/^sk-sluice-[0-9A-Za-z]{32,}$/);
    const list = sluice(["keys", "list", "--account", "acme", "--json", ...d()]);
    expect(list.out).not.toContain(key);
    const rows = JSON.parse(list.out) as { id: string; label: string; prefix: string; revoked: string | null }[];
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ label: "laptop", prefix: key.slice(0, 14) + "…", revoked: null });
    expect(sluice(["keys", "revoke", rows[0]!.id, ...d()]).code).toBe(0);
    expect(sluice(["keys", "revoke", rows[0]!.id, ...d()]).code).toBe(2);
    const after = JSON.parse(sluice(["keys", "list", "--json", ...d()]).out) as { revoked: string | null }[];
    expect(after[0]!.revoked).not.toBeNull();
    const accounts = JSON.parse(sluice(["accounts", "list", "--json", ...d()]).out) as { name: string; keys: number }[];
    expect(accounts).toEqual([expect.objectContaining({ name: "acme", keys: 0 })]);
  });

  test("options also come from SLUICE_* environment variables", () => {
    const r = sluice(["accounts", "list", "--json"], { SLUICE_DATA: data.path });
    expect(JSON.parse(r.out).map((a: { name: string }) => a.name)).toContain("acme");
  });

  test("models: enable, disable, grant, revoke, price", async () => {
    const store = openSqliteStore(join(data.path, "sluice.db"));
    const m = (id: string) => ({ id, displayName: id, contextLength: 256, sourceDir: "/x", supportsImages: false, supportsTools: false, supportsStructured: false, ownedBy: "t", loadError: null });
    await store.catalog.sync([m("t/one-1.0"), m("t/two")]);
    store.close();
    expect(sluice(["models", "disable", "t/one-1.0", ...d()]).code).toBe(0);
    let list = JSON.parse(sluice(["models", "list", "--json", ...d()]).out) as { id: string; status: string; served: string }[];
    expect(list.find((x) => x.id === "t/one-1.0")).toMatchObject({ status: "inactive", served: "no" });
    expect(sluice(["models", "enable", "t/one-1.0", ...d()]).code).toBe(0);
    expect(sluice(["models", "enable", "t/none", ...d()]).code).toBe(2);
    const revoked = sluice(["models", "revoke", "t/two", "--account", "acme", ...d()]);
    expect(revoked.code).toBe(0);
    expect(revoked.out).toContain("t/one-1.0");
    const check = openSqliteStore(join(data.path, "sluice.db"));
    const acme = (await check.accounts.get("acme"))!;
    expect((await check.catalog.listForAccount(acme.id)).map((x) => x.id)).toEqual(["t/one-1.0"]);
    check.close();
    expect(sluice(["models", "grant", "t/two", "--account", "acme", ...d()]).code).toBe(0);
    expect(sluice(["models", "grant", "t/two", "--account", "nobody", ...d()]).code).toBe(2);
    expect(sluice(["models", "allow-all", "--account", "acme", ...d()]).code).toBe(0);
    const lifted = openSqliteStore(join(data.path, "sluice.db"));
    expect((await lifted.accounts.get("acme"))!.modelAccess).toBe("all");
    lifted.close();
    expect(sluice(["models", "price", "t/two", "--input", "0.5", "--output", "2", ...d()]).code).toBe(0);
    expect(sluice(["models", "price", "t/two", "--input", "-1", "--output", "2", ...d()]).code).toBe(2);
    list = JSON.parse(sluice(["models", "list", "--json", ...d()]).out);
    expect(list.find((x) => x.id === "t/two")).toMatchObject({ "in$/M": 0.5, "cached$/M": 0.5, "out$/M": 2 });
    // The cached-input price: set, kept by a later price without it, cleared with none.
    const cachedPrice = () => (JSON.parse(sluice(["models", "list", "--json", ...d()]).out) as Record<string, unknown>[]).find((x) => x.id === "t/two")!["cached$/M"];
    expect(sluice(["models", "price", "t/two", "--input", "0.5", "--output", "2", "--cached-input", "0.05", ...d()]).code).toBe(0);
    expect(sluice(["models", "price", "t/two", "--input", "0.6", "--output", "2", ...d()]).code).toBe(0);
    expect(cachedPrice()).toBe(0.05);
    expect(sluice(["models", "price", "t/two", "--input", "0.6", "--output", "2", "--cached-input", "x", ...d()]).code).toBe(2);
    expect(sluice(["models", "price", "t/two", "--input", "0.6", "--output", "2", "--cached-input", "none", ...d()]).code).toBe(0);
    expect(cachedPrice()).toBe(0.6);
  });

  test("usage errors are one line with exit code 2", () => {
    const r = sluice(["keys", "create", ...d()]);
    expect(r.code).toBe(2);
    expect(r.err).toContain("--account is required");
    expect(sluice(["keys", "create", "--bogus", ...d()]).code).toBe(2);
    expect(sluice(["frobnicate"]).code).toBe(2);
  });

  test("doctor reports providers and the CUDA fallback reason", () => {
    const r = sluice(["doctor", ...d(), "--models", join(data.path, "none")]);
    expect(r.code).toBe(0);
    expect(r.out).toContain("execution providers: cpu");
    expect(r.out).toMatch(/missing +NVIDIA driver/);
  });
});

describe("sluice serve", () => {
  async function serveOnce(dir: string): Promise<string> {
    const server = await spawnServe(["--data", dir, "--models", join(dir, "models")]);
    expect((await fetch(`${server.url}/ready`)).status).toBe(200);
    if (server.key) {
      const models = (await (await fetch(`${server.url}/v1/models`, { headers: { authorization: `Bearer ${server.key}` } })).json()) as {
        data: { id: string }[];
      };
      expect(models.data.map((m) => m.id)).toEqual(["sluice/demo"]);
    }
    expect(await server.stop()).toBe(0);
    return server.banner;
  }

  test("SIGHUP synchronises the catalog with the models directory", async () => {
    const dir = tempDir("sluice-hup-");
    const server = await spawnServe(["--data", dir.path, "--models", join(dir.path, "models"), "--no-demo"]);
    try {
      const { url, key } = server;
      const ids = async () =>
        ((await (await fetch(`${url}/v1/models`, { headers: { authorization: `Bearer ${key}` } })).json()) as { data: { id: string }[] }).data.map((m) => m.id);
      expect(await ids()).toEqual([]);
      await buildSyntheticModel(join(dir.path, "models", "acme", "hup-1.0"), { preset: "tiny-bytes", seed: 3 });
      rmSync(join(dir.path, "models", "acme", "hup-1.0", "sluice.json"));
      server.proc.kill("SIGHUP");
      let seen: string[] = [];
      for (let i = 0; i < 200 && seen.length === 0; i++) {
        await Bun.sleep(25);
        seen = await ids();
      }
      // Named by its path below the models directory, as sluice.json's id is absent.
      expect(seen).toEqual(["acme/hup-1.0"]);
    } finally {
      await server.stop();
      dir.remove();
    }
  }, 60_000);

  test("first start creates 'local' with one printed key and the demo model; later starts print none", async () => {
    const dir = tempDir("sluice-serve-");
    try {
      const first = await serveOnce(dir.path);
      expect(first).toContain("sluice/demo");
      expect(first.match(/sk-sluice-[0-9A-Za-z]{32,}/g)?.length).toBeGreaterThanOrEqual(1);
      const second = await serveOnce(dir.path);
      expect(second).not.toMatch(/sk-sluice-[0-9A-Za-z]{32,}/);
      expect(second).toContain("keys create --account local");
    } finally {
      dir.remove();
    }
  }, 120_000);
});
