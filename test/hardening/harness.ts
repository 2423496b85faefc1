// A real server (store, engine worker, HTTP on an ephemeral port) with request limits and a log
// that the test can read, on the shared tiny byte-level model.
import { createEngine, type CreateEngineOptions } from "../../src/engine/index.ts";
import { healthFilePath, writeHealthFile } from "../../src/engine/health-file.ts";
import type { Engine, WorkerHealth } from "../../src/engine/types.ts";
import type { RequestLimits } from "../../src/api/limits/request-limits.ts";
import { TextTokenizer } from "../../src/engine/text/tokenizer.ts";
import { createLogger } from "../../src/log.ts";
import { startServer, type RunningServer } from "../../src/server.ts";
import { syntheticModel, tinyModelsRoot } from "../helpers/models.ts";
import { tempDir } from "../helpers/paths.ts";

export interface Harness extends RunningServer {
  key: string;
  model: string;
  dataDir: string;
  logs: Record<string, unknown>[];
  engine: Engine;
  headers: Record<string, string>;
  /** logit_bias that keeps the model from ending on its own (for long generations). */
  noEos: Record<string, number>;
  chat(body: Record<string, unknown>, headers?: Record<string, string>, signal?: AbortSignal): Promise<Response>;
  cleanup(): Promise<void>;
}

export const MODEL = "hardening/tiny";

export async function startHarness(
  limits: Partial<RequestLimits> = {},
  engineOpts: Partial<Omit<CreateEngineOptions, "log">> = {},
  /** Links more model directories into the models directory, besides the tiny model. */
  moreModels?: (modelsDir: string) => Promise<unknown>,
): Promise<Harness> {
  const models = tempDir("sluice-hard-models-");
  // Built once into the git-ignored cache, linked into a fresh models directory per server.
  const built = await syntheticModel(tinyModelsRoot(), "hardening-tiny", { preset: "tiny-bytes", seed: 5, id: MODEL });
  const { symlinkSync } = await import("node:fs");
  symlinkSync(built, `${models.path}/tiny`);
  await moreModels?.(models.path);
  const data = tempDir("sluice-hard-data-");
  const logs: Record<string, unknown>[] = [];
  const log = createLogger({ level: "info", write: (line) => logs.push(JSON.parse(line)) });
  // As serve does: supervision state where `doctor` reads it.
  const onHealthChange = (health: WorkerHealth[]) => writeHealthFile(healthFilePath(data.path), health);
  const engine = await createEngine({ log, device: "cpu", threads: 1, onHealthChange, ...engineOpts });
  const server = await startServer({ host: "127.0.0.1", port: 0, dataDir: data.path, modelsDir: models.path, demoModel: false, log, engine, limits });
  const key = server.firstKey!;
  const headers = { authorization: `Bearer ${key}`, "content-type": "application/json" };
  return {
    ...server,
    key,
    model: MODEL,
    dataDir: data.path,
    logs,
    engine,
    headers,
    noEos: Object.fromEntries(TextTokenizer.load(built).eosTokenIds.map((id) => [id, -100])),
    chat: (body, extra = {}, signal) =>
      fetch(`${server.url}/v1/chat/completions`, {
        method: "POST",
        signal,
        headers: { ...headers, ...extra },
        body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hi" }], ...body }),
      }),
    async cleanup() {
      await server.stop(2000);
      data.remove();
      models.remove();
    },
  };
}

/** Reads an SSE body to its end; returns the data payloads (without [DONE]). */
export async function readSse(res: Response): Promise<{ events: Record<string, unknown>[]; done: boolean }> {
  const text = await res.text();
  const events: Record<string, unknown>[] = [];
  let done = false;
  for (const block of text.split("\n\n")) {
    const line = block.trim();
    if (!line.startsWith("data: ")) continue;
    const payload = line.slice(6);
    if (payload === "[DONE]") done = true;
    else events.push(JSON.parse(payload));
  }
  return { events, done };
}
