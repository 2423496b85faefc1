// onnxruntime-genai's layout: genai_config.json instead of config.json / generation_config.json.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { existsSync, rmSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import { buildSyntheticModel } from "../../../src/modelkit/index.ts";
import { tempDir } from "../../helpers/paths.ts";
import { startTestServer, type TestServer } from "../../helpers/server.ts";

let models: ReturnType<typeof tempDir>;
let server: TestServer;

beforeAll(async () => {
  models = tempDir("sluice-genai-");
  const dir = join(models.path, "genai-export");
  await buildSyntheticModel(dir, { preset: "tiny-bytes", seed: 5, variant: "fused", genaiConfig: true, id: "genai/tiny" });
  expect(existsSync(join(dir, "genai_config.json"))).toBe(true);
  for (const f of ["config.json", "generation_config.json", "sluice.json"]) rmSync(join(dir, f));
  server = await startTestServer({ modelsDir: models.path });
});

afterAll(async () => {
  await server?.cleanup();
  models?.remove();
});

test("a genai_config.json directory is discovered, loaded and served", async () => {
  const client = new OpenAI({ apiKey: server.key, baseURL: `${server.url}/v1`, maxRetries: 0 });
  const list = await client.models.list();
  expect(list.data.map((m) => m.id)).toEqual(["genai-export"]);
  const entry = list.data[0] as unknown as { context_length: number };
  expect(entry.context_length).toBeGreaterThan(0);
  const r = await client.chat.completions.create({ model: "genai-export", messages: [{ role: "user", content: "hi" }], max_tokens: 5, temperature: 0 });
  expect(r.usage!.completion_tokens).toBeGreaterThan(0);
  expect(r.usage!.completion_tokens).toBeLessThanOrEqual(5);
});
