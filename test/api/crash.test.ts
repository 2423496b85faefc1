// SIGKILL under load: every request whose client received a complete response has its usage row
// after a restart (rows are committed before the response completes).
import { expect, test } from "bun:test";
import { join } from "node:path";
import { openSqliteStore } from "../../src/store/index.ts";
import { syntheticModel } from "../helpers/models.ts";
import { tempDir } from "../helpers/paths.ts";
import { spawnServe } from "../helpers/serve-process.ts";

const startProcess = (data: string, models: string) =>
  spawnServe(["--data", data, "--models", models, "--no-demo", "--device", "cpu"]);

test("kill -9 under load loses no usage row of a completed response", async () => {
  const data = tempDir("sluice-crash-");
  const models = tempDir("sluice-crash-models-");
  await syntheticModel(models.path, "m", { preset: "tiny-bytes", seed: 12, id: "crash/m" });
  try {
    const { proc, url, key } = await startProcess(data.path, models.path);
    const completed: string[] = [];
    // Killed once some responses have completed (counted, not timed: a busy machine completes
    // fewer in a given time), with every worker's next request in flight.
    const KILL_AFTER = 8;
    const enough = Promise.withResolvers<void>();
    let n = 0;
    const worker = async () => {
      for (;;) {
        const id = `req-${n++}`;
        try {
          const stream = n % 2 === 0;
          const res = await fetch(`${url}/v1/chat/completions`, {
            method: "POST",
            headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "x-request-id": id },
            body: JSON.stringify({ model: "crash/m", messages: [{ role: "user", content: id }], max_tokens: 8, stream }),
          });
          const text = await res.text();
          if (res.status === 200 && (!stream || text.includes("data: [DONE]"))) completed.push(id);
          if (completed.length >= KILL_AFTER) enough.resolve();
        } catch {
          return; // the server is gone
        }
      }
    };
    const workers = Array.from({ length: 6 }, worker);
    await enough.promise;
    proc.kill("SIGKILL");
    await Promise.all(workers);
    expect(completed.length).toBeGreaterThanOrEqual(KILL_AFTER);
    const store = openSqliteStore(join(data.path, "sluice.db"));
    const rows = new Set((await store.usage.list((await store.accounts.get("local"))!.id, { limit: 100000 })).map((r) => r.requestId));
    const leftInFlight = (await store.inflight.list()).map((r) => r.requestId);
    await store.close();
    const missing = completed.filter((id) => !rows.has(id));
    expect(missing).toEqual([]);
    // And the server restarts on the same file; what the killed process left in flight is then
    // recorded as interrupted, once (not billed).
    const again = await startProcess(data.path, models.path);
    expect((await fetch(`${again.url}/ready`)).status).toBe(200);
    expect(await again.stop()).toBe(0);
    const after = openSqliteStore(join(data.path, "sluice.db"));
    expect(await after.inflight.list()).toEqual([]);
    const all = await after.usage.list((await after.accounts.get("local"))!.id, { limit: 100000 });
    for (const id of leftInFlight) expect(all.filter((r) => r.requestId === id).map((r) => r.status)).toEqual(["interrupted"]);
    expect(new Set(all.map((r) => r.requestId)).size).toBe(all.length);
    await after.close();
  } finally {
    data.remove();
    models.remove();
  }
}, 60_000);
