// A model's own sampling defaults, end to end through the real server: generation_config.json's
// temperature, top_p, top_k and min_p apply where a request leaves them out, `do_sample: false`
// is greedy, sluice.json "defaults" overrides the file, and a value the request gives always wins.
// Seeded sampling makes the defaults observable: a seeded request without parameters must give
// exactly what the same seed gives with the defaults written out, and not what it gives at T=1.
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { importStories, linkModelForSpec } from "../../helpers/models.ts";
import { BUN, hasStories, REPO, STORIES_DIR, storiesReferenceText } from "../../helpers/paths.ts";
import { serverFixture } from "../../helpers/server.ts";
import { makeAccount, WorkspaceClient } from "../../workspace/helpers.ts";
import type { SyntheticSpec } from "../../../src/modelkit/index.ts";

if (!hasStories) console.warn(`skipping the stories260K part of the sampling-defaults tests: ${STORIES_DIR} is absent`);

const STORIES = "karpathy/stories260k";
const QWEN = "synthetic/qwen3-defaults";
const QWEN_CARD = "synthetic/qwen3-card-defaults";
const QWEN_PLAIN = "synthetic/qwen3-no-defaults";
// Qwen3's published generation_config.json (Qwen/Qwen3-0.6B): sampling at 0.6 / 0.95 / 20.
const QWEN3_GENERATION = { do_sample: true, temperature: 0.6, top_p: 0.95, top_k: 20 };
const spec = (id: string, extra: Partial<SyntheticSpec>): SyntheticSpec => ({ preset: "tiny-qwen3", seed: 3, id, shape: { numLayers: 1 }, ...extra });

describe("sampling defaults", () => {
  const fx = serverFixture(async (dir) => {
    await linkModelForSpec(dir, "qwen", spec(QWEN, { generation: QWEN3_GENERATION }));
    // The same weights; sluice.json raises the temperature back to 1 and switches top-k off.
    await linkModelForSpec(dir, "qwen-card", spec(QWEN_CARD, { generation: QWEN3_GENERATION, defaults: { temperature: 1, top_k: 0 } }));
    // Listed only (the catalog reads directories without loading them).
    await linkModelForSpec(dir, "qwen-plain", spec(QWEN_PLAIN, {}));
    if (hasStories) importStories(dir, STORIES, "fused");
  });

  const ask = async (model: string, params: Record<string, number>, seed = 11) => {
    const r = await fx.client.chat.completions.create({ model, messages: [{ role: "user", content: "Tell me a story." }], max_tokens: 24, seed, ...params });
    expect(r.choices[0]!.finish_reason).toBe("length");
    return r.choices[0]!.message.content!;
  };

  test("generation_config.json's temperature, top_p and top_k apply when the request leaves them out", async () => {
    const omitted = await ask(QWEN, {});
    expect(await ask(QWEN, { temperature: 0.6, top_p: 0.95, top_k: 20 })).toBe(omitted);
    // At the API's defaults the same seed gives something else: the defaults did change the sampling.
    const apiDefaults = await ask(QWEN, { temperature: 1, top_p: 1, top_k: 0 });
    expect(apiDefaults).not.toBe(omitted);
    // Each seed is its own draw: the equality above is not that of a constant output.
    expect(await ask(QWEN, {}, 12)).not.toBe(omitted);
  });

  test("a value the request gives wins, one parameter at a time", async () => {
    // temperature from the request, top_p and top_k still the model's.
    const t1 = await ask(QWEN, { temperature: 1 });
    expect(t1).toBe(await ask(QWEN, { temperature: 1, top_p: 0.95, top_k: 20 }));
    expect(t1).not.toBe(await ask(QWEN, { temperature: 1, top_p: 1, top_k: 0 }));
    // Explicit temperature 0 is greedy whatever the defaults: seeds do not matter.
    expect(await ask(QWEN, { temperature: 0 }, 1)).toBe(await ask(QWEN, { temperature: 0 }, 2));
  });

  test("sluice.json defaults override generation_config.json's, field by field", async () => {
    const omitted = await ask(QWEN_CARD, {});
    // temperature and top_k from the card, top_p still the file's.
    expect(await ask(QWEN_CARD, { temperature: 1, top_p: 0.95, top_k: 0 })).toBe(omitted);
    expect(omitted).not.toBe(await ask(QWEN_CARD, { temperature: 0.6, top_p: 0.95, top_k: 20 }));
  });

  test.skipIf(!hasStories)("do_sample false: stories260K answers greedily without temperature, and samples when the request asks", async () => {
    const config = JSON.parse(readFileSync(join(fx.modelsDir, STORIES, "generation_config.json"), "utf8"));
    expect(config.do_sample).toBe(false);
    const reference = storiesReferenceText();
    const r = await fx.client.chat.completions.create({ model: STORIES, messages: [{ role: "user", content: "" }], max_tokens: 256 });
    expect(r.choices[0]!.message.content).toBe(reference);
    // Streamed alike.
    let streamed = "";
    for await (const chunk of await fx.client.chat.completions.create({ model: STORIES, messages: [{ role: "user", content: "" }], max_tokens: 256, stream: true })) {
      streamed += chunk.choices[0]?.delta.content ?? "";
    }
    expect(streamed).toBe(reference);
    // An explicit temperature with a seed samples: not the greedy story, and the same for the same seed.
    const sampled = async () =>
      (await fx.client.chat.completions.create({ model: STORIES, messages: [{ role: "user", content: "" }], max_tokens: 256, temperature: 1, seed: 42 })).choices[0]!.message.content!;
    const a = await sampled();
    expect(a).not.toBe(reference);
    expect(await sampled()).toBe(a);
  });

  test("the catalog shows each model's defaults: the workspace's models page and its API", async () => {
    const { email } = await makeAccount(fx.server.store, "defaults-viewer");
    const ws = new WorkspaceClient(fx.server.url);
    expect((await ws.signIn(email, "correct horse battery")).status).toBe(303);
    const page = await (await ws.get("/workspace/models")).text();
    const row = (id: string) => page.slice(page.indexOf(`<code>${id}</code>`)).split("</tr>")[0]!;
    expect(row(QWEN)).toContain("temperature 0.6, top_p 0.95, top_k 20");
    expect(row(QWEN_CARD)).toContain("temperature 1, top_p 0.95");
    expect(row(QWEN_CARD)).not.toContain("top_k");
    expect(row(QWEN_PLAIN)).toContain("API defaults");
    if (hasStories) expect(row(STORIES)).toContain("greedy");
    const api = (await (await ws.get("/workspace/api/models")).json()) as { data: { id: string; sampling_defaults: Record<string, number> }[] };
    const of = (id: string) => api.data.find((m) => m.id === id)!.sampling_defaults;
    expect(of(QWEN)).toEqual({ temperature: 0.6, top_p: 0.95, top_k: 20 });
    expect(of(QWEN_CARD)).toEqual({ temperature: 1, top_p: 0.95, top_k: 0 });
    expect(of(QWEN_PLAIN)).toEqual({});
    if (hasStories) expect(of(STORIES)).toEqual({ temperature: 0 });
    // And the operator's `models list`.
    const r = Bun.spawnSync([BUN, join(REPO, "src/cli/main.ts"), "models", "list", "--data", fx.server.dataDir, "--json"], { cwd: REPO });
    expect(r.exitCode).toBe(0);
    const listed = JSON.parse(r.stdout.toString()) as { id: string; sampling: string }[];
    expect(listed.find((m) => m.id === QWEN)!.sampling).toBe("temperature 0.6, top_p 0.95, top_k 20");
    expect(listed.find((m) => m.id === QWEN_PLAIN)!.sampling).toBe("API defaults");
  });
});
