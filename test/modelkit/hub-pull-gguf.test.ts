// A GGUF pull against the local Hub stand-in (test/helpers/hub-server.ts) serving a *-GGUF
// repository as the Hub holds them (hub-repos.ts: stories260K.gguf as its F32 file, a Q8_0 copy
// split in two files in a folder, a vision projector): REPO:QUANT takes that one file, a split
// one comes whole, an interrupted pull resumes from where it stopped, every file is checked
// against the Hub's SHA-256, and the file is imported and served by the running server.
import { describe, expect, test } from "bun:test";
import { existsSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { PullError } from "../../src/modelkit/hub/errors.ts";
import { stagingDir } from "../../src/modelkit/hub/place.ts";
import { pullModel, type PullEvent, type PullOptions } from "../../src/modelkit/hub/pull.ts";
import { GGUF_F32, GGUF_Q8_SHARDS, GGUF_REPO } from "../helpers/hub-repos.ts";
import { hubFixture } from "../helpers/hub-fixture.ts";
import { hasStories, STORIES_DIR, storiesReferenceText } from "../helpers/paths.ts";

if (!hasStories) console.warn(`skipping the GGUF pull tests: ${STORIES_DIR} is absent`);

const fx = hubFixture(() => ({ watchModels: true }));

async function pull(repo: string, o: Partial<PullOptions> = {}) {
  const events: PullEvent[] = [];
  const result = await pullModel({ repo, modelsDir: fx.models, endpoint: fx.hub.url, token: null, device: "cpu", backoffMs: () => 20, onEvent: (e) => events.push(e), ...o });
  return { result, events };
}

async function pullError(repo: string, o: Partial<PullOptions> = {}): Promise<PullError> {
  const e = await pull(repo, o).then(
    () => null,
    (x) => x,
  );
  expect(e).toBeInstanceOf(PullError);
  return e as PullError;
}

async function complete(model: string, content: string, maxTokens: number) {
  for (let i = 0; i < 300; i++) {
    const r = await fetch(`${fx.server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${fx.server.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model, messages: [{ role: "user", content }], temperature: 0, max_tokens: maxTokens }),
    });
    // The server notices the models directory on its own: until then the model is unknown.
    if (r.status === 404) {
      await Bun.sleep(100);
      continue;
    }
    const body = (await r.json()) as { choices: { message: { content: string } }[]; usage: { completion_tokens: number } };
    return { status: r.status, text: body.choices[0]!.message.content, tokens: body.usage.completion_tokens };
  }
  throw new Error(`${model} was never served`);
}

describe.skipIf(!hasStories)("GGUF pull", () => {
  test("REPO:QUANT fetches that one file, verified, imports it, and the running server tells the reference story", async () => {
    fx.hub.clearLog();
    const { result, events } = await pull(`${GGUF_REPO}:F32`);
    expect(result).toMatchObject({ id: `${GGUF_REPO}-F32`, layout: "gguf", files: [GGUF_F32] });
    expect(fx.hub.filesFetched()).toEqual([GGUF_F32]);
    expect(events.find((e) => e.type === "resolved")).toMatchObject({ note: "GGUF F32 (asked for; the repo has F32, Q8_0)" });
    expect(events.find((e) => e.type === "importing")).toMatchObject({ message: `converting the GGUF file ${GGUF_F32} to ONNX (dtype auto: the file's precision class)` });
    const dir = join(fx.models, `${GGUF_REPO}-F32`);
    // The directory holds the conversion, not the file.
    expect(existsSync(join(dir, GGUF_F32))).toBe(false);
    expect(JSON.parse(readFileSync(join(dir, "sluice.json"), "utf8"))).toMatchObject({ id: `${GGUF_REPO}-F32`, source: { repo: GGUF_REPO, gguf: [GGUF_F32], commit: fx.hub.commitOf(GGUF_REPO) }, graph: { dtype: "float32" } });
    expect(await complete(`${GGUF_REPO}-F32`, "", 256)).toEqual({ status: 200, text: storiesReferenceText(), tokens: 256 });
  });

  test("a split file comes whole, named by --file; interrupted, the next pull fetches only the rest", async () => {
    const [first, second] = GGUF_Q8_SHARDS as [string, string];
    const id = "gguf/split";
    fx.hub.clearLog();
    const held = fx.hub.hold(second, 100_000);
    const stop = new AbortController();
    const running = pull(GGUF_REPO, { file: first, id, signal: stop.signal });
    await held.reached;
    // Stopped once what the server sent is on disk (the bytes may still be on their way).
    const part = join(stagingDir(fx.models, id), "source", `${second}.part`);
    for (let i = 0; i < 400 && !(existsSync(part) && statSync(part).size === 100_000); i++) await Bun.sleep(25);
    stop.abort();
    held.release();
    expect(((await running.then(() => null, (x) => x)) as PullError).kind).toBe("cancelled");
    expect(existsSync(join(fx.models, id))).toBe(false);
    expect(statSync(part).size).toBe(100_000);

    fx.hub.clearLog();
    const { result, events } = await pull(GGUF_REPO, { file: first, id });
    expect(result.files).toEqual([first, second]);
    expect(events.find((e) => e.type === "file-done" && e.path === first)).toMatchObject({ action: "present" });
    expect(events.find((e) => e.type === "file-done" && e.path === second)).toMatchObject({ action: "resume", transferred: fx.hub.sizeOf(GGUF_REPO, second) - 100_000 });
    expect(fx.hub.bytesSent(second)).toBe(fx.hub.sizeOf(GGUF_REPO, second) - 100_000);
    expect(fx.hub.bytesSent(first)).toBe(0);
    // Q8_0 weights: auto keeps them float.
    expect(JSON.parse(readFileSync(join(fx.models, id, "sluice.json"), "utf8"))).toMatchObject({ graph: { dtype: "float32" } });
    const r = await complete(id, "Once upon a time", 32);
    expect(r).toMatchObject({ status: 200, tokens: 32 });
    expect(r.text.length).toBeGreaterThan(40);
  });

  test("a corrupted body is refused by its SHA-256 and nothing is placed", async () => {
    fx.hub.faults.corrupt.add(GGUF_F32);
    try {
      const e = await pullError(`${GGUF_REPO}:F32`, { id: "gguf/corrupt" });
      expect(e.message).toMatch(/SHA-256/);
      expect(existsSync(join(fx.models, "gguf/corrupt"))).toBe(false);
    } finally {
      fx.hub.faults.corrupt.clear();
    }
  });

  test("choices in words: several quantisations and none asked, one missing, a dtype a GGUF file does not become", async () => {
    fx.hub.clearLog();
    expect((await pullError(GGUF_REPO)).message).toBe("the repository holds several GGUF models; choose one with REPO:QUANT or --file (it has: F32, Q8_0)");
    expect((await pullError(`${GGUF_REPO}:Q4_K_M`)).message).toBe("the repository has no Q4_K_M GGUF file; it has: F32, Q8_0");
    expect((await pullError(GGUF_REPO, { file: "nope.gguf" })).message).toBe(`the repository has no nope.gguf; its GGUF files: ${GGUF_Q8_SHARDS.join(", ")}, ${GGUF_F32}`);
    expect((await pullError(`${GGUF_REPO}:F32`, { dtype: "q8" })).message).toBe("a GGUF file converts to fp32, fp16, q4, q4f16 or auto, not q8");
    expect((await pullError(`${GGUF_REPO}:F32`, { file: GGUF_F32 })).message).toBe("give REPO:QUANT or --file, not both");
    // Nothing was downloaded for any of them.
    expect(fx.hub.filesFetched()).toEqual([]);
  });

  test("--dtype q4: the file converts to 4-bit weights", async () => {
    await pull(`${GGUF_REPO}:F32`, { dtype: "q4", id: "gguf/q4" });
    expect(JSON.parse(readFileSync(join(fx.models, "gguf/q4", "sluice.json"), "utf8"))).toMatchObject({ graph: { file: "onnx/model_q4.onnx", quantization: { method: "MatMulNBits" } } });
    expect(await complete("gguf/q4", "Once upon a time", 16)).toMatchObject({ status: 200, tokens: 16 });
  });
});
