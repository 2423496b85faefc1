// Logs: JSON lines with the request id; never an API key, and prompt or completion text only when
// the operator turned on --log-prompts.
import { describe, expect, test } from "bun:test";
import { createLogger } from "../../src/log.ts";
import { linkCachedModel } from "../helpers/models.ts";
import { tempDir } from "../helpers/paths.ts";
import { startTestServer } from "../helpers/server.ts";

const SECRET = "the zebra sings at midnight";

async function run(logPrompts: boolean) {
  const lines: string[] = [];
  const models = tempDir("sluice-logs-");
  await linkCachedModel(models.path, "bytes", { preset: "tiny-bytes", seed: 8, id: "logs/tiny" });
  const server = await startTestServer({ modelsDir: models.path, log: createLogger({ level: "debug", logPrompts, write: (l) => lines.push(l) }) });
  try {
    for (const stream of [false, true]) {
      const res = await fetch(`${server.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${server.key}`, "content-type": "application/json", "x-request-id": `logged-${stream}` },
        body: JSON.stringify({ model: "logs/tiny", messages: [{ role: "user", content: SECRET }], max_tokens: 3, stream }),
      });
      await res.text();
    }
    await fetch(`${server.url}/v1/models`, { headers: { authorization: `Bearer ${server.key}x` } });
    // Routes no handler matched: an unsupported one and an unknown URL.
    const unmatched: Record<string, string> = {};
    for (const path of ["/v1/embeddings", "/nowhere"]) {
      const res = await fetch(`${server.url}${path}`, { method: "POST", body: "{}" });
      unmatched[path] = res.headers.get("x-request-id")!;
    }
    await Bun.sleep(20);
    return { lines, key: server.key, unmatched };
  } finally {
    await server.cleanup();
    models.remove();
  }
}

describe("logs", () => {
  test("by default: no prompt text, no key, request ids on the request's lines", async () => {
    const { lines, key } = await run(false);
    const text = lines.join("\n");
    expect(text).not.toContain(SECRET);
    expect(text).not.toContain(key);
    expect(text).not.toContain(key.slice(10));
    for (const l of lines) expect(() => JSON.parse(l)).not.toThrow();
    expect(lines.filter((l) => l.includes('"logged-false"') || l.includes('"logged-true"')).length).toBeGreaterThanOrEqual(2);
  });

  test("a route no handler matched is logged with the request id its answer carries", async () => {
    const { lines, unmatched } = await run(false);
    const access = lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.msg === "request");
    for (const [path, id] of Object.entries(unmatched)) {
      expect(id).toBeTruthy();
      expect(access.filter((l) => l.path === path).map((l) => l.request_id)).toEqual([id]);
    }
  });

  test("with --log-prompts: the prompt and the completion are logged at debug, still no key", async () => {
    const { lines, key } = await run(true);
    const prompts = lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.msg === "chat prompt");
    expect(prompts).toHaveLength(2);
    expect(JSON.stringify(prompts)).toContain(SECRET);
    expect(prompts[0]!.level).toBe("debug");
    expect(lines.filter((l) => l.includes('"chat completion"'))).toHaveLength(2);
    expect(lines.join("\n")).not.toContain(key);
  });
});
