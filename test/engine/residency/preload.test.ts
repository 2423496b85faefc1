// The engine's side of residency, without the server: --preload loads the models it names when
// they are registered (the others wait for a request), a model's sluice.json bounds its own queue,
// and its keep_alive applies to it.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createEngine } from "../../../src/engine/index.ts";
import { EngineUnavailableError, type Engine } from "../../../src/engine/types.ts";
import { silentLogger } from "../../../src/log.ts";
import { chatRequest } from "../../helpers/engine-request.ts";
import { syntheticModel } from "../../helpers/models.ts";
import { tempDir } from "../../helpers/paths.ts";

let models: ReturnType<typeof tempDir>;
let engine: Engine;
const dirs: Record<string, string> = {};

beforeAll(async () => {
  models = tempDir("sluice-preload-");
  for (const id of ["pre/a", "pre/b"]) dirs[id] = await syntheticModel(models.path, id, { preset: "tiny-bytes", id, seed: 51 });
  // pre/b: a queue of one waiting request, and no time kept once idle.
  const card = join(dirs["pre/b"]!, "sluice.json");
  writeFileSync(card, JSON.stringify({ ...JSON.parse(readFileSync(card, "utf8")), max_queue: 1 }));
  engine = await createEngine({ log: silentLogger(), device: "cpu", threads: 1, preload: ["pre/a"], kvBudgetBytes: 64 * 1024 });
}, 60_000);

afterAll(async () => {
  await engine?.close();
  models?.remove();
});

const state = (id: string) => engine.residency!().models.find((m) => m.model === id)!.state;

test("only the preloaded model is loaded at registration; the other loads on its first request", async () => {
  const results = await engine.load(Object.entries(dirs).map(([id, dir]) => ({ id, dir, keepAliveMs: () => (id === "pre/b" ? 0 : null) })));
  expect(results.map((r) => [r.id, r.error, r.model?.id ?? null])).toEqual([
    ["pre/a", null, "pre/a"],
    // Not loaded, and nothing declared for it here (the server passes what its directory declares).
    ["pre/b", null, null],
  ]);
  expect([state("pre/a"), state("pre/b")]).toEqual(["resident", "unloaded"]);
  for await (const _ of (await engine.start(chatRequest("pre/b", "hi", 2))).events);
  // Its keep-alive of 0: unloaded as soon as the request ended.
  for (let i = 0; i < 100 && state("pre/b") !== "unloaded"; i++) await Bun.sleep(10);
  expect(state("pre/b")).toBe("unloaded");
  expect(engine.residency!().models.find((m) => m.model === "pre/b")!.loads).toBe(1);
}, 60_000);

test("sluice.json's max_queue bounds the model's own queue (503 past it), whatever the server's", async () => {
  // 64 KiB of KV holds one request of 100 tokens at a time: one runs, one waits, the next is refused.
  const long = () => chatRequest("pre/b", "hi", 100);
  const accounts = ["x", "y", "z"].map((k) => ({ ...long(), fairnessKey: k }));
  const started = await Promise.allSettled(accounts.map((r) => engine.start(r)));
  const refused = started.filter((s) => s.status === "rejected").map((s) => (s as PromiseRejectedResult).reason);
  expect(refused.length).toBe(1);
  expect(refused[0]).toBeInstanceOf(EngineUnavailableError);
  expect((refused[0] as EngineUnavailableError).code).toBe("server_busy");
  for (const s of started) if (s.status === "fulfilled") for await (const _ of s.value.events);
}, 60_000);
