// What crosses between host memory and the KV cache's per decode step, read from the server's
// /metrics (sluice_host_device_bytes_total over sluice_decode_steps_total), on stories260K at a
// context past 400: the C API binding moves a step's token id, position and lengths (a few bytes,
// whatever the context), the JS binding the whole pool at every step.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import type { OrtBinding } from "../../../src/engine/ort-binding.ts";
import { importStories } from "../../helpers/models.ts";
import { hasStories, STORIES_DIR, tempDir } from "../../helpers/paths.ts";
import { startTestServer, type TestServer } from "../../helpers/server.ts";

const MODEL = "stories-bytes";
/** The bound for the C API binding: a step's inputs must not grow with the context. */
const CAPI_STEP_BYTES = 16 * 1024;

if (!hasStories) console.warn(`skipping the host-device bytes test: ${STORIES_DIR} is absent`);

let models: ReturnType<typeof tempDir>;
const servers = new Map<OrtBinding, TestServer>();

beforeAll(async () => {
  if (!hasStories) return;
  models = tempDir("sluice-bytes-");
  importStories(models.path, MODEL, "fused");
  for (const binding of ["capi", "node"] as const) servers.set(binding, await startTestServer({ modelsDir: models.path, engine: { binding, speculate: "off" } }));
}, 120_000);

afterAll(async () => {
  for (const s of servers.values()) await s.cleanup();
  models?.remove();
});

async function counters(server: TestServer): Promise<{ toDevice: number; steps: number }> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  // A model not loaded yet has no series: nothing counted.
  const read = (re: RegExp) => Number(re.exec(text)?.[1] ?? 0);
  return {
    toDevice: read(new RegExp(`^sluice_host_device_bytes_total\\{model="${MODEL}",direction="to_device"\\} (\\d+)`, "m")),
    steps: read(new RegExp(`^sluice_decode_steps_total\\{model="${MODEL}"\\} (\\d+)`, "m")),
  };
}

/** Stats reach the host a little after the work: read until the step count stops moving. */
async function settled(server: TestServer, steps: number): Promise<{ toDevice: number; steps: number }> {
  for (let i = 0; i < 200; i++) {
    const c = await counters(server);
    if (c.steps >= steps) return c;
    await Bun.sleep(10);
  }
  return counters(server);
}

/**
 * A stream that decodes 63 tokens after a prompt of about 420: every step at a context over 400.
 * The end-of-text tokens (</s>, and <s> which generation_config.json also ends on) are banned, so the count is exact.
 */
async function longContextSteps(server: TestServer): Promise<{ bytesPerStep: number; steps: number }> {
  const client = new OpenAI({ apiKey: server.key, baseURL: `${server.url}/v1`, maxRetries: 0 });
  const before = await counters(server);
  const prompt = Array.from({ length: 38 }, (_, i) => `Lily saw ${i % 2 ? "a dog" : "the sun"} and smiled.`).join(" ");
  const r = await client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: prompt }], max_tokens: 64, temperature: 0, logit_bias: { "1": -100, "2": -100 } });
  const usage = r.usage!;
  expect(usage.prompt_tokens).toBeGreaterThan(400);
  expect(usage.completion_tokens).toBe(64);
  const after = await settled(server, before.steps + 63);
  const steps = after.steps - before.steps;
  return { bytesPerStep: (after.toDevice - before.toDevice) / steps, steps };
}

describe.skipIf(!hasStories)("host-device bytes per decode step, stories260K at a context over 400", () => {
  test("the C API binding moves at most 16 KiB per step to the device; the JS binding at least the pool's bytes", async () => {
    const capi = await longContextSteps(servers.get("capi")!);
    const node = await longContextSteps(servers.get("node")!);
    expect(capi.steps).toBe(63);
    expect(node.steps).toBe(63);
    // The pool a row of over 400 positions lives in: 5 layers' keys and values, 4 heads of 8
    // dimensions (the split graph's), float32, at least 400 positions.
    const poolBytes = 5 * 2 * 4 * 400 * 8 * 4;
    expect(capi.bytesPerStep).toBeLessThanOrEqual(CAPI_STEP_BYTES);
    expect(node.bytesPerStep).toBeGreaterThanOrEqual(poolBytes);
  }, 120_000);
});
