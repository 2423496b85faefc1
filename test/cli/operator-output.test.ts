// What the operator's commands print: read-only commands in a directory without a database say so
// (and where they looked) instead of creating one; lists have a header row; money reads as money,
// with amounts that add up as printed; `limits clear` does not call an account unlimited while one
// of its keys keeps a limit; doctor prints no empty heading.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { healthFilePath, writeHealthFile } from "../../src/engine/health-file.ts";
import { openSqliteStore } from "../../src/store/index.ts";
import { BUN, REPO, tempDir } from "../helpers/paths.ts";

const MAIN = join(REPO, "src/cli/main.ts");
let dir: ReturnType<typeof tempDir>;

/** `sluice …` run in `cwd` (the temporary directory unless given), where ./data is that directory's. */
function sluice(args: string[], cwd = dir.path) {
  const p = Bun.spawnSync([BUN, MAIN, ...args], { cwd, env: { ...process.env, SLUICE_LAUNCHER: join(REPO, "sluice") } });
  return { code: p.exitCode, out: p.stdout.toString(), err: p.stderr.toString() };
}

beforeAll(() => {
  dir = tempDir("sluice-operator-");
});
afterAll(() => dir.remove());

describe("read-only commands never create a database", () => {
  const READS = [["keys", "list"], ["accounts", "list"], ["models", "list"], ["users", "list"], ["limits", "list"], ["billing", "show", "local"]];
  test.each(READS.map((c) => [c.join(" "), c]))("%s in a directory without one says so, and where it looked", (_, words) => {
    const elsewhere = join(dir.path, "elsewhere");
    mkdirSync(elsewhere, { recursive: true });
    const r = sluice(words as string[], elsewhere);
    expect(r.code).toBe(1);
    expect(r.err).toContain(`there is no database in ./data (looked for ${join(elsewhere, "data", "sluice.db")}); this command only reads, and creates none`);
    expect(existsSync(join(elsewhere, "data"))).toBe(false);
  });
});

describe("what the commands print", () => {
  const d = () => ["--data", join(dir.path, "store")];

  beforeAll(async () => {
    expect(sluice(["accounts", "create", "acme", ...d()]).code).toBe(0);
    const store = openSqliteStore(join(dir.path, "store", "sluice.db"));
    const acme = (await store.accounts.get("acme"))!;
    await store.users.create({ accountId: acme.id, email: "ops@example.com", password: "a long enough password", role: "operator" });
    await store.close();
  });

  test("users list and limits list have a header row", () => {
    const users = sluice(["users", "list", ...d()]).out.split("\n");
    expect(users[0]).toMatch(/^email +account +role +created$/);
    expect(users[1]).toMatch(/^ops@example\.com +acme +operator +\d{4}-/);
    expect(sluice(["limits", "set", "--account", "acme", "--rpm", "60", ...d()]).code).toBe(0);
    const limits = sluice(["limits", "list", ...d()]).out.split("\n");
    expect(limits[0]).toMatch(/^account +key +model +rpm +tpm +concurrent$/);
    expect(limits[1]).toMatch(/^acme +\(account\) +\(all models\) +60 +unlimited +unlimited$/);
  });

  test("billing: amounts as money, one number of decimals for a balance and its rows, which add up", async () => {
    const topped = sluice(["billing", "topup", "acme", "--usd", "5", ...d()]);
    expect(topped.out.trim()).toBe("added $5.00 to acme; balance $5.00");
    let show = sluice(["billing", "show", "acme", ...d()]).out;
    expect(show).toStartWith("acme: prepaid plan, balance $5.00\n");
    expect(show).not.toContain("5.000000000");
    // Charges of a cheap model, to the nano-dollar.
    const store = openSqliteStore(join(dir.path, "store", "sluice.db"));
    const acme = (await store.accounts.get("acme"))!;
    await store.billing.topUp(acme.id, 0.000001234, "a small one");
    await store.close();
    show = sluice(["billing", "show", "acme", ...d()]).out;
    const balance = /balance (\$[\d.,]+)/.exec(show)![1]!;
    expect(balance).toBe("$5.000001234");
    const amounts = [...show.matchAll(/ (−?\$[\d.,]+) /g)].map((m) => m[1]!);
    expect(amounts).toEqual(["$0.000001234", "$5.000000000"]);
    const nano = (s: string) => Math.round(Number(s.replace(/[$,]/g, "").replace("−", "-")) * 1e9);
    expect(amounts.map(nano).reduce((a, b) => a + b, 0)).toBe(nano(balance));
  });

  test("limits clear does not call an account unlimited while one of its keys keeps a limit", async () => {
    const key = sluice(["keys", "create", "--account", "acme", "--label", "ci", ...d()]).out.trim();
    const store = openSqliteStore(join(dir.path, "store", "sluice.db"));
    const keyId = (await store.keys.list((await store.accounts.get("acme"))!.id))[0]!.id;
    await store.close();
    expect(key).toStartWith("sk-sluice-");
    expect(sluice(["limits", "set", "--account", "acme", "--key", keyId, "--tpm", "1000", ...d()]).code).toBe(0);
    const cleared = sluice(["limits", "clear", "--account", "acme", ...d()]).out;
    expect(cleared).not.toContain("unlimited\n");
    expect(cleared).toContain(`account acme: no limits of its own; key ${keyId} keeps rpm=unlimited tpm=1000 concurrent=unlimited`);
    const hint = /\(clear it: (.+)\)/.exec(cleared)![1]!;
    expect(hint).toBe(`${join(REPO, "sluice")} limits clear --account acme --key ${keyId} --data ${join(dir.path, "store")}`);
    expect(sluice(hint.split(" ").slice(1)).out.trim()).toBe(`key ${keyId} of acme: unlimited`);
    expect(sluice(["limits", "clear", "--account", "acme", ...d()]).out.trim()).toBe("account acme: unlimited");
  });

  test("doctor prints no empty heading when the server has no model loaded", () => {
    const data = join(dir.path, "store");
    writeHealthFile(healthFilePath(data), []);
    const out = sluice(["doctor", "--data", data, "--models", join(dir.path, "no-models")]).out.split("\n");
    const line = out.find((l) => l.startsWith("model workers"))!;
    expect(line).toStartWith("model workers: none (no model loaded; as serve, pid ");
    // Every heading (a line ending in ':') has lines under it.
    out.forEach((l, i) => {
      if (l.endsWith(":")) expect(out[i + 1] ?? "").toStartWith("  ");
    });
  });
});
