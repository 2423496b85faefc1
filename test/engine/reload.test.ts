// A model whose directory changed (a pull placed a new one under the same name) is loaded again
// while the old worker finishes what it runs; a model removed mid-generation ends its requests in
// words. Neither may leave a request hanging.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { createEngine } from "../../src/engine/index.ts";
import type { Engine, Generation } from "../../src/engine/types.ts";
import { silentLogger } from "../../src/log.ts";
import { chatRequest } from "../helpers/engine-request.ts";
import { syntheticModel, tinyModelsRoot } from "../helpers/models.ts";

let engine: Engine;
let dir: string;

beforeAll(async () => {
  dir = await syntheticModel(tinyModelsRoot(), "reload/tiny", { preset: "tiny-bytes", seed: 9, id: "reload/tiny" });
  engine = await createEngine({ log: silentLogger(), device: "cpu", threads: 1 });
}, 60_000);

afterAll(async () => {
  await engine?.close();
});

const start = (maxTokens: number): Promise<Generation> => engine.start(chatRequest("reload/tiny", "hello", maxTokens, { temperature: 1, seed: 1 }));

/** Every event of the generation: resolves with the finish or the error that ended it. */
async function drain(g: Generation): Promise<{ finish: string | null; error: string | null; tokens: number }> {
  let finish: string | null = null;
  let tokens = 0;
  try {
    for await (const batch of g.events) for (const e of batch) if (e.type === "finish") [finish, tokens] = [e.reason, e.completionTokens];
    return { finish, error: null, tokens };
  } catch (e) {
    return { finish, error: (e as Error).message, tokens };
  }
}

test("a changed stamp loads the model again; a generation running on the old load finishes", async () => {
  const [first] = await engine.load([{ id: "reload/tiny", dir, stamp: "a" }]);
  expect(first!.error).toBeNull();
  const running = drain(await start(1500));
  const [again] = await engine.load([{ id: "reload/tiny", dir, stamp: "b" }]);
  expect(again!.error).toBeNull();
  const old = await running;
  expect(old.error).toBeNull();
  expect(old.finish).not.toBeNull();
  expect(old.tokens).toBeGreaterThan(0);
  const fresh = await drain(await start(5));
  expect(fresh.tokens).toBeGreaterThan(0);
  // The same stamp keeps the loaded worker.
  const [same] = await engine.load([{ id: "reload/tiny", dir, stamp: "b" }]);
  expect(same!.model).toBe(again!.model);
}, 60_000);

test("a model removed mid-generation ends the generation rather than leaving it hanging", async () => {
  await engine.load([{ id: "reload/tiny", dir, stamp: "c" }]);
  const running = drain(await start(1500));
  await engine.load([]);
  const r = await running;
  expect(r.finish !== null || r.error !== null).toBe(true);
  if (r.error) expect(r.error).toContain("was unloaded while the request ran");
  expect(engine.models()).toEqual([]);
}, 60_000);
