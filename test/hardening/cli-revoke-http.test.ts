// The guarantee the wal-index watch must keep, end to end: a key revoked with the real
// `sluice keys revoke` (another process, same SQLite file) fails on the very next request to a
// running server, though that server had the key in its cache; a limit set the same way applies
// on the next request too.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { join } from "node:path";
import { BUN, REPO } from "../helpers/paths.ts";
import { startHarness, type Harness } from "./harness.ts";

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(() => h.cleanup());

function sluice(...args: string[]): string {
  const p = Bun.spawnSync([BUN, join(REPO, "src/cli/main.ts"), ...args, "--data", h.dataDir], { stdout: "pipe", stderr: "pipe" });
  if (p.exitCode !== 0) throw new Error(`sluice ${args.join(" ")}: ${p.stderr.toString()}`);
  return p.stdout.toString();
}

const models = (key: string) => fetch(`${h.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });

test("a key revoked by the CLI fails on the next request; other keys keep working", async () => {
  const key = sluice("keys", "create", "--account", "local", "--label", "revoked from the CLI").trim();
  for (let i = 0; i < 3; i++) expect((await models(key)).status).toBe(200); // cached by now
  const rows = JSON.parse(sluice("keys", "list", "--account", "local", "--json")) as { id: string; label: string | null }[];
  const id = rows.find((r) => r.label === "revoked from the CLI")!.id;
  sluice("keys", "revoke", id);
  const res = await models(key);
  expect(res.status).toBe(401);
  expect(((await res.json()) as { error: { code: string } }).error.code).toBe("invalid_api_key");
  expect((await models(h.key)).status).toBe(200);
});

test("a limit set by the CLI shows on the next answer's headers, and its removal too", async () => {
  expect((await models(h.key)).headers.get("x-ratelimit-limit-requests")).toBeNull();
  sluice("limits", "set", "--account", "local", "--rpm", "5000");
  expect((await models(h.key)).headers.get("x-ratelimit-limit-requests")).toBe("5000");
  sluice("limits", "set", "--account", "local", "--rpm", "none");
  expect((await models(h.key)).headers.get("x-ratelimit-limit-requests")).toBeNull();
});
