// The residency policy (src/engine/residency/residency.ts) over a loader that records what it is
// asked and finishes loads when the test says: which model is evicted, when, and what waits.
import { expect, test } from "bun:test";
import { Residency } from "../../../src/engine/residency/residency.ts";
import { PINNED } from "../../../src/engine/residency/settings.ts";
import { silentLogger } from "../../../src/log.ts";

const MiB = 2 ** 20;

function setup(opts: { budgetMiB: number; keepAlive?: Record<string, number>; waitMs?: number; failing?: string[] }) {
  const calls: string[] = [];
  const pending = new Map<string, () => void>();
  let autoLoad = true;
  const residency = new Residency({
    budgetBytes: opts.budgetMiB * MiB,
    waitMs: opts.waitMs ?? 2000,
    log: silentLogger(),
    sweepMs: 20,
    keepAliveMs: (id) => opts.keepAlive?.[id] ?? 60_000,
    loader: {
      async load(id, kvBytes) {
        calls.push(`load ${id}`);
        if (!autoLoad) await new Promise<void>((r) => pending.set(id, r));
        if (opts.failing?.includes(id)) throw new Error(`${id}: not an ONNX model`);
        // The model takes half the KV budget it was offered (the worker's own cap).
        return { kvBytes: kvBytes / 2 };
      },
      async unload(id) {
        calls.push(`unload ${id}`);
      },
    },
  });
  for (const id of ["a", "b", "c"]) residency.register(id, { weightsBytes: 30 * MiB, kvBytes: 20 * MiB });
  return {
    residency,
    calls,
    manual: () => (autoLoad = false),
    finish: (id: string) => pending.get(id)!(),
    state: (id: string) => residency.summary().models.find((m) => m.model === id)!.state,
  };
}

test("a budget for two of three: the third evicts the least recently used idle one; memory is weights + the KV taken", async () => {
  const { residency, calls, state } = setup({ budgetMiB: 90 });
  (await residency.acquire("a"))();
  await Bun.sleep(2);
  (await residency.acquire("b"))();
  // a: 30 + 10 (half of its 20 MiB KV offer), b the same.
  expect(residency.usedBytes).toBe(80 * MiB);
  expect(residency.summary().models.find((m) => m.model === "a")).toMatchObject({ state: "resident", weightsBytes: 30 * MiB, kvBytes: 10 * MiB, bytes: 40 * MiB });
  // c needs its planned 50 MiB: 10 free, so the least recently used (a) goes.
  (await residency.acquire("c"))();
  expect(calls).toEqual(["load a", "load b", "unload a", "load c"]);
  expect([state("a"), state("b"), state("c")]).toEqual(["unloaded", "resident", "resident"]);
  expect(residency.summary().models.find((m) => m.model === "a")!.evictions).toBe(1);
  await residency.close();
});

test("a model with a request in flight is never evicted, a pinned one never: the request waits, then gets a 503", async () => {
  const { residency, calls, state } = setup({ budgetMiB: 90, keepAlive: { b: PINNED }, waitMs: 150 });
  const holdA = await residency.acquire("a"); // a request streaming on a
  (await residency.acquire("b"))(); // b is idle but pinned
  const refused = await residency.acquire("c").catch((e: Error) => e);
  expect(refused).toMatchObject({ name: "EngineUnavailableError", code: "insufficient_memory" });
  expect((refused as unknown as { retryAfterSeconds: number }).retryAfterSeconds).toBeGreaterThanOrEqual(1);
  expect((refused as Error).message).toContain("a (1 in flight)");
  expect((refused as Error).message).toContain("b (pinned)");
  expect(calls).toEqual(["load a", "load b"]);
  // Within the bound, the request gets in as soon as a's request ends.
  const waiting = residency.acquire("c");
  await Bun.sleep(20);
  expect(state("c")).toBe("unloaded");
  holdA();
  (await waiting)();
  expect(calls).toEqual(["load a", "load b", "unload a", "load c"]);
  await residency.close();
});

test("concurrent requests share one load; a failed load gives each of them the error and the others keep serving", async () => {
  const { residency, calls, manual, finish } = setup({ budgetMiB: 200, failing: ["c"] });
  manual();
  const three = [residency.acquire("a"), residency.acquire("a"), residency.acquire("a")];
  await Bun.sleep(5);
  expect(calls).toEqual(["load a"]);
  finish("a");
  for (const r of await Promise.all(three)) r();
  const failed = [residency.acquire("c").catch((e: Error) => e), residency.acquire("c").catch((e: Error) => e)];
  await Bun.sleep(5);
  finish("c");
  for (const e of await Promise.all(failed)) {
    expect(e).toMatchObject({ name: "EngineUnavailableError", code: "model_load_failed" });
    expect((e as Error).message).toContain("c: not an ONNX model");
  }
  expect(calls.filter((c) => c === "load c")).toHaveLength(1);
  expect(residency.summary().models.find((m) => m.model === "c")).toMatchObject({ state: "unloaded", lastError: "c: not an ONNX model" });
  // The memory c would have taken is free again; a still serves.
  expect(residency.usedBytes).toBe(40 * MiB);
  (await residency.acquire("a"))();
  await residency.close();
});

test("keep-alive: an idle model unloads after it, a pinned one never; 0 unloads at once", async () => {
  const { residency, calls, state } = setup({ budgetMiB: 200, keepAlive: { a: 60, b: PINNED, c: 0 } });
  for (const id of ["a", "b", "c"]) (await residency.acquire(id))();
  await Bun.sleep(5);
  expect(state("c")).toBe("unloaded");
  await Bun.sleep(150);
  expect([state("a"), state("b")]).toEqual(["unloaded", "resident"]);
  expect(calls).toEqual(["load a", "load b", "load c", "unload c", "unload a"]);
  // A model in use is not unloaded by its keep-alive.
  const hold = await residency.acquire("a");
  await Bun.sleep(150);
  expect(state("a")).toBe("resident");
  hold();
  await residency.close();
});

test("a model larger than the whole budget is refused at once, naming the budget", async () => {
  const { residency } = setup({ budgetMiB: 40 });
  const e = await residency.acquire("a").catch((err: Error) => err);
  expect(e).toMatchObject({ name: "EngineUnavailableError", code: "insufficient_memory" });
  expect((e as Error).message).toContain("--memory-budget");
  await residency.close();
});

test("unload on request refuses a model in use; an unregistered model leaves once idle", async () => {
  const { residency, state } = setup({ budgetMiB: 200 });
  const hold = await residency.acquire("a");
  await expect(residency.unloadNow("a")).rejects.toThrow(/in flight/);
  hold();
  expect((await residency.unloadNow("a")).state).toBe("unloaded");
  (await residency.acquire("b"))();
  await residency.unregister("b");
  expect(residency.has("b")).toBe(false);
  expect(residency.summary().models.map((m) => m.model)).toEqual(["a", "c"]);
  expect(state("a")).toBe("unloaded");
  await residency.close();
});
