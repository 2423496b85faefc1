// serve --allow-image-hosts (and SLUICE_ALLOW_IMAGE_HOSTS): a loopback image server is refused
// by default and fetched once its host is allowed.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { buildSyntheticVlm } from "../../src/modelkit/index.ts";
import { tempDir } from "../helpers/paths.ts";
import { spawnServe } from "../helpers/serve-process.ts";
import { makeImage } from "./images.ts";

const dir = tempDir("sluice-vlm-serve-");
let images: ReturnType<typeof Bun.serve>;

beforeAll(async () => {
  buildSyntheticVlm(join(dir.path, "models", "vlm"), { id: "synthetic/tiny-vlm" });
  const png = await makeImage("png", 40, 30, 3);
  images = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response(png, { headers: { "content-type": "image/png" } }) });
});

afterAll(() => {
  images?.stop(true);
  dir.remove();
});

async function serveAndAsk(flags: string[], env: Record<string, string>, data: string): Promise<{ status: number; body: { error?: { param: string; message: string }; usage?: { prompt_tokens: number } } }> {
  const server = await spawnServe(["--no-demo", "--data", join(dir.path, data), "--models", join(dir.path, "models"), ...flags], { env });
  const { url, key } = server;
  try {
    const r = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({
        model: "synthetic/tiny-vlm",
        max_tokens: 2,
        messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: `http://127.0.0.1:${images.port}/cat.png` } }] }],
      }),
    });
    return { status: r.status, body: await r.json() };
  } finally {
    await server.stop();
  }
}

describe("serve --allow-image-hosts", () => {
  test("loopback images are refused without it and fetched with it (flag or environment)", async () => {
    const refused = await serveAndAsk([], {}, "d1");
    expect(refused.status).toBe(400);
    expect(refused.body.error!.param).toBe("messages[0].content[0]");
    expect(refused.body.error!.message).toMatch(/loopback/);
    const flag = await serveAndAsk(["--allow-image-hosts", `example.org, 127.0.0.1:${images.port}`], {}, "d2");
    expect(flag.status).toBe(200);
    expect(flag.body.usage!.prompt_tokens).toBeGreaterThan(16);
    const viaEnv = await serveAndAsk([], { SLUICE_ALLOW_IMAGE_HOSTS: "127.0.0.1" }, "d3");
    expect(viaEnv.status).toBe(200);
  }, 60_000);
});
