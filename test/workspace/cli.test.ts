// The workspace's operator commands as real processes: users and billing.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { join } from "node:path";
import { openSqliteStore } from "../../src/store/index.ts";
import { BUN, REPO, tempDir } from "../helpers/paths.ts";

const MAIN = join(REPO, "src/cli/main.ts");
let data: ReturnType<typeof tempDir>;

function sluice(args: string[], opts: { env?: Record<string, string>; stdin?: string } = {}) {
  const p = Bun.spawnSync([BUN, MAIN, ...args, "--data", data.path], {
    env: { ...process.env, SLUICE_PASSWORD: "", ...opts.env },
    cwd: REPO,
    stdin: opts.stdin === undefined ? "ignore" : new TextEncoder().encode(opts.stdin),
  });
  return { code: p.exitCode, out: p.stdout.toString(), err: p.stderr.toString() };
}

beforeAll(() => {
  data = tempDir("sluice-ws-cli-");
});
afterAll(() => data.remove());

test("users: create from stdin or SLUICE_PASSWORD, list, password, remove", async () => {
  expect(sluice(["accounts", "create", "team"]).code).toBe(0);
  expect(sluice(["users", "create", "ops@example.com", "--account", "team", "--operator", "--password-stdin"], { stdin: "a long enough password\n" }).code).toBe(0);
  expect(sluice(["users", "create", "dev@example.com", "--account", "team"], { env: { SLUICE_PASSWORD: "another long password" } }).code).toBe(0);
  const none = sluice(["users", "create", "x@example.com", "--account", "team"]);
  expect(none.code).toBe(2);
  expect(none.err).toContain("--password-stdin");
  expect(sluice(["users", "create", "short@example.com", "--account", "team"], { env: { SLUICE_PASSWORD: "short" } }).err).toContain("at least 10");
  const list = JSON.parse(sluice(["users", "list", "--json"]).out) as { email: string; role: string }[];
  expect(list).toEqual([expect.objectContaining({ email: "ops@example.com", role: "operator" }), expect.objectContaining({ email: "dev@example.com", role: "member" })]);
  expect(sluice(["users", "password", "dev@example.com"], { env: { SLUICE_PASSWORD: "a brand new password" } }).code).toBe(0);
  const store = openSqliteStore(join(data.path, "sluice.db"));
  try {
    expect(await store.users.verify("dev@example.com", "a brand new password")).not.toBeNull();
    expect(await store.users.verify("dev@example.com", "another long password")).toBeNull();
  } finally {
    store.close();
  }
  expect(sluice(["users", "remove", "dev@example.com"]).code).toBe(0);
  expect(JSON.parse(sluice(["users", "list", "--json"]).out)).toHaveLength(1);
});

test("billing: plan, top-up, show", () => {
  expect(sluice(["accounts", "create", "payer"]).code).toBe(0);
  expect(sluice(["billing", "topup", "payer", "--usd", "12.5", "--note", "invoice 7"]).code).toBe(0);
  expect(sluice(["billing", "topup", "payer", "--usd", "-1"]).code).toBe(2);
  expect(sluice(["billing", "plan", "payer", "gold"]).code).toBe(2);
  const shown = JSON.parse(sluice(["billing", "show", "payer", "--json"]).out) as { plan: string; balance_usd: number; history: { note: string }[] };
  expect(shown).toMatchObject({ plan: "prepaid", balance_usd: 12.5 });
  expect(shown.history[0]!.note).toBe("invoice 7");
  expect(sluice(["billing", "plan", "payer", "unlimited"]).code).toBe(0);
  expect(JSON.parse(sluice(["billing", "show", "payer", "--json"]).out).plan).toBe("unlimited");
});
