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
      expect(r.out).toContain("\nEnvironment: ");
    }
  });

  test("the overview's summaries line up in one column; a group's --help lists that group only", () => {
    const help = sluice(["--help"]).out.split("\n");
    const column = new Set<number>();
    help.forEach((l, i) => {
      if (!l.startsWith("  ./sluice ")) return;
      const same = /^ {2}\S.*? {2,}(?=\S)/.exec(l);
      column.add(same ? same[0].length : /^ +/.exec(help[i + 1]!)![0].length);
    });
    expect([...column]).toHaveLength(1);
    const imports = sluice(["models", "import", "--help"]);
    expect(imports.code).toBe(0);
    expect(imports.out.split("\n").filter((l) => l.startsWith("  ./sluice ")).map((l) => l.trim().split(" ").slice(0, 4).join(" "))).toEqual([
      "./sluice models import llama2c",
      "./sluice models import hf",
      "./sluice models import gguf",
    ]);
    expect(sluice(["models", "import"]).code).toBe(2);
  });

  test("a placeholder left in a pasted command is refused, as every other one is", () => {
    const r = sluice(["keys", "create", "--account", "acme", "--label", "LABEL", ...d()]);
    expect(r.code).toBe(2);
    expect(r.err).toContain("--label LABEL: LABEL is a placeholder");
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

  test("settings also come from SLUICE_<OPTION>; switches and a command's arguments never do", async () => {
    const r = sluice(["accounts", "list", "--json"], { SLUICE_DATA: data.path });
    expect(JSON.parse(r.out).map((a: { name: string }) => a.name)).toContain("acme");
    // SLUICE_OPERATOR does not make an operator, nor SLUICE_PASSWORD_STDIN read a pipe, nor
    // SLUICE_ACCOUNT choose the account: each is named as not read.
    const made = sluice(["users", "create", "env@example.com", "--account", "acme", ...d()], {
      SLUICE_OPERATOR: "1",
      SLUICE_ACCOUNT: "nobody",
      SLUICE_PASSWORD_STDIN: "true",
      SLUICE_PASSWORD: "a long enough password",
    });
    expect(made.code).toBe(0);
    expect(made.out).toContain("created member env@example.com in account acme");
    for (const v of ["SLUICE_OPERATOR", "SLUICE_ACCOUNT", "SLUICE_PASSWORD_STDIN"]) expect(made.err).toContain(`${v} is not read`);
    const store = openSqliteStore(join(data.path, "sluice.db"));
    expect((await store.users.getByEmail("env@example.com"))!.role).toBe("member");
    await store.close();
    expect(sluice(["keys", "create", ...d()], { SLUICE_ACCOUNT: "acme" }).err).toContain("--account is required");
    expect(sluice(["users", "list", ...d()], { SLUICE_JSON: "1" }).out).not.toStartWith("[");
    // A retired name that chose the database is refused rather than dropped for the SQLite file.
    const retired = sluice(["accounts", "list", ...d()], { SLUICE_DATABASE_URL: "postgres://x@127.0.0.1:1/none" });
    expect(retired.code).toBe(2);
    expect(retired.err).toContain("SLUICE_DATABASE_URL is no longer read: name it SLUICE_DATABASE");
    expect(sluice(["limits", "set", "--account", "acme", ...d()], { SLUICE_LIMIT_RPM: "5" }).err).toContain("SLUICE_LIMIT_RPM is no longer read");
  });

  test("--help names each command's variables, by the one rule, and only settings'", () => {
    const serve = sluice(["serve", "--help"]).out;
    expect(serve).toContain("[env SLUICE_PORT]");
    expect(serve).toContain("[env SLUICE_DATABASE]");
    expect(serve).toContain("[env SLUICE_CLUSTER_SECRET]");
    expect(serve).not.toContain("SLUICE_LOG_PROMPTS");
    const users = sluice(["users", "create", "--help"]).out;
    expect(users).toContain("Environment: SLUICE_DATA, SLUICE_DATABASE (each read when its option is not given)");
    for (const v of ["SLUICE_OPERATOR", "SLUICE_PASSWORD_STDIN", "SLUICE_ACCOUNT"]) expect(users).not.toContain(v);
    const pull = sluice(["models", "pull", "--help"]).out;
    expect(pull).toContain("[env SLUICE_STALL_SECONDS]");
    expect(pull).not.toContain("SLUICE_PULL_");
    expect(sluice(["limits", "set", "--help"]).out).not.toContain("SLUICE_LIMIT_");
    // Every variable --help names follows the rule.
    for (const c of [["serve"], ["doctor"], ["models", "pull"], ["keys", "create"], ["limits", "set"], ["users", "create"], ["billing", "topup"]]) {
      const help = sluice([...c, "--help"]).out;
      for (const m of help.matchAll(/^ {2}--([a-z-]+) [A-Z]+ .*\[env (SLUICE_\w+)\]$/gm)) expect(m[2]).toBe(`SLUICE_${m[1]!.toUpperCase().replace(/-/g, "_")}`);
      // The option column lines up: every description starts at the same place.
      const starts = new Set(help.split("\n").filter((l) => l.startsWith("  --")).map((l) => /^ {2}\S+(?: [A-Z]+)? +/.exec(l)![0].length));
      expect(starts.size).toBe(1);
    }
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
    const unknown = sluice(["keys", "create", "--bogus", ...d()]);
    expect(unknown.code).toBe(2);
    // One line, no stray quote, and a hint that runs.
    expect(unknown.err).toBe("sluice keys create: unknown option --bogus (see: ./sluice keys create --help)\n");
    expect(sluice(["keys", "create", "--help"]).code).toBe(0);
    expect(sluice(["keys", "create", "--account"]).err).toContain("--account needs a value");
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
