// `models pull` against a local Hub-compatible server (test/helpers/hub-server.ts) serving repos
// the model kit builds: only the chosen dtype's files are fetched (the request log shows it),
// cut and interrupted transfers resume, corrupted bodies are refused, gated repos need a token,
// and a running server (watching its models directory) serves each pulled model without a
// restart, stories260K telling llama2.c's reference story token for token.
import { describe, expect, test } from "bun:test";
import { existsSync, readFileSync, statfsSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { hubToken } from "../../src/modelkit/hub/auth.ts";
import { PullError } from "../../src/modelkit/hub/errors.ts";
import { STAGING_FOLDER, stagingDir } from "../../src/modelkit/hub/place.ts";
import { pullModel, type PullEvent, type PullOptions } from "../../src/modelkit/hub/pull.ts";
import { BROKEN_SAFETENSORS_REPO, EMPTY_REPO, GATED_REPO, GENAI_REPO, GENAI_VARIANTS_REPO, SAFETENSORS_REPO, STORIES_REPO, VLM_REPO } from "../helpers/hub-repos.ts";
import { HUB_TOKEN } from "../helpers/hub-server.ts";
import { hasStories, STORIES_DIR, tempDir } from "../helpers/paths.ts";
import { hubFixture } from "../helpers/hub-fixture.ts";
import { dataUrl, makeImage } from "../vision/images.ts";

if (!hasStories) console.warn(`skipping models pull tests: ${STORIES_DIR} is absent`);

const CONFIGS = ["config.json", "generation_config.json", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"];
const DATA = "onnx/model.onnx_data";

// Started on an empty models directory: every model below arrives while it runs.
const fx = hubFixture(() => ({ watchModels: true }));

async function pull(repo: string, o: Partial<PullOptions> = {}): Promise<{ result: Awaited<ReturnType<typeof pullModel>>; events: PullEvent[] }> {
  const events: PullEvent[] = [];
  const result = await pullModel({ repo, modelsDir: fx.models, endpoint: fx.hub.url, token: null, device: "cpu", backoffMs: () => 20, onEvent: (e) => events.push(e), ...o });
  return { result, events };
}

async function pullError(repo: string, o: Partial<PullOptions> = {}): Promise<PullError> {
  try {
    await pull(repo, o);
  } catch (e) {
    expect(e).toBeInstanceOf(PullError);
    return e as PullError;
  }
  throw new Error(`pull of ${repo} succeeded`);
}

const card = (id: string) => JSON.parse(readFileSync(join(fx.models, id, "sluice.json"), "utf8")) as Record<string, unknown>;

async function served(): Promise<string[]> {
  const r = await fetch(`${fx.server.url}/v1/models`, { headers: { authorization: `Bearer ${fx.server.key}` } });
  return ((await r.json()) as { data: { id: string }[] }).data.map((m) => m.id);
}

async function complete(model: string, content: unknown, maxTokens: number): Promise<{ status: number; text: string }> {
  const r = await fetch(`${fx.server.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${fx.server.key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, messages: [{ role: "user", content }], temperature: 0, max_tokens: maxTokens }),
  });
  const body = (await r.json()) as { choices?: { message: { content: string } }[] };
  return { status: r.status, text: body.choices?.[0]?.message.content ?? JSON.stringify(body) };
}

/** Polls until `check` holds: the server notices the models directory on its own. */
async function eventually(what: string, check: () => Promise<boolean>, ms = 45_000): Promise<void> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    if (await check()) return;
    await Bun.sleep(100);
  }
  throw new Error(`timed out waiting until ${what}`);
}

function referenceText(): string {
  const m = /```\n(Once upon a time[\s\S]*?)\n```/.exec(readFileSync(join(STORIES_DIR, "README.md"), "utf8"));
  return m![1]!;
}

describe.skipIf(!hasStories)("models pull", () => {
  test("--dtype fp32 fetches fp32's files only; the running server serves the pulled stories260K's reference story", async () => {
    fx.hub.clearLog();
    const { result } = await pull(STORIES_REPO, { dtype: "fp32" });
    expect(result.dtype).toBe("fp32");
    expect(fx.hub.filesFetched().sort()).toEqual([...CONFIGS, "onnx/model.onnx", DATA].sort());
    // Not even asked about: no other dtype, no README, no .gitattributes.
    expect(fx.hub.requests.filter((r) => /_fp16|_q4|_quantized|README|gitattributes/.test(r.path))).toEqual([]);
    expect(fx.hub.requests.some((r) => r.path.includes("/paths-info/"))).toBe(true);
    const c = card(STORIES_REPO);
    expect(c).toMatchObject({ id: STORIES_REPO, dtype: "fp32", source: { repo: STORIES_REPO, commit: fx.hub.commitOf(STORIES_REPO) } });
    expect(existsSync(stagingDir(fx.models, STORIES_REPO))).toBe(false);

    await eventually("the pulled model is served", async () => (await served()).includes(STORIES_REPO));
    const story = await complete(STORIES_REPO, "", 256);
    expect(story).toEqual({ status: 200, text: referenceText() });
  });

  test("another dtype joins the directory and its card names it; the server reloads it; pulling fp32 again fetches nothing", async () => {
    fx.hub.clearLog();
    await pull(STORIES_REPO, { dtype: "q4" });
    expect(fx.hub.filesFetched()).toEqual(["onnx/model_q4.onnx"]);
    expect(card(STORIES_REPO).dtype).toBe("q4");
    for (const f of ["onnx/model.onnx", DATA, "onnx/model_q4.onnx"]) expect(existsSync(join(fx.models, STORIES_REPO, f))).toBe(true);
    // The q4 slot holds another graph: once reloaded, the model no longer tells the story.
    await eventually("the q4 graph is served", async () => {
      const r = await complete(STORIES_REPO, "", 12);
      return r.status === 200 && !r.text.startsWith(referenceText().slice(0, 20));
    });

    fx.hub.clearLog();
    const again = await pull(STORIES_REPO, { dtype: "fp32" });
    expect(fx.hub.filesFetched()).toEqual([]);
    expect(again.result.transferredBytes).toBe(0);
    expect(again.events.filter((e) => e.type === "file-done").every((e) => e.type === "file-done" && e.action === "present")).toBe(true);
    expect(card(STORIES_REPO).dtype).toBe("fp32");
    await eventually("the fp32 graph is served again", async () => {
      const { text } = await complete(STORIES_REPO, "", 12);
      return text.length > 20 && referenceText().startsWith(text);
    });
  });

  test("a body cut mid-file is fetched again from where it stopped, with a Range request, and verified", async () => {
    fx.hub.clearLog();
    const size = fx.hub.sizeOf(STORIES_REPO, DATA);
    fx.hub.faults.cutOnce.set(DATA, 400_000);
    const { events } = await pull(STORIES_REPO, { dtype: "fp32", id: "cut/stories" });
    expect(events.some((e) => e.type === "retry" && e.path === DATA)).toBe(true);
    const bodies = fx.hub.requests.filter((r) => r.file === DATA && r.method === "GET" && r.range !== "bytes=0-0");
    expect(bodies.map((r) => r.range)).toEqual([null, `bytes=400000-${size - 1}`]);
    expect(fx.hub.bytesSent(DATA)).toBe(size);
    expect(statSync(join(fx.models, "cut/stories", DATA)).size).toBe(size);
  });

  test("a server that ignores Range on the retry: the whole body is taken from the start and verified", async () => {
    fx.hub.clearLog();
    const size = fx.hub.sizeOf(STORIES_REPO, DATA);
    fx.hub.faults.cutOnce.set(DATA, 300_000);
    fx.hub.faults.ignoreRange.add(DATA);
    try {
      await pull(STORIES_REPO, { dtype: "fp32", id: "norange/stories" });
    } finally {
      fx.hub.faults.ignoreRange.delete(DATA);
    }
    const bodies = fx.hub.requests.filter((r) => r.file === DATA && r.method === "GET" && r.range !== "bytes=0-0");
    expect(bodies.map((r) => [r.range, r.status])).toEqual([[null, 200], [`bytes=300000-${size - 1}`, 200]]);
    expect(statSync(join(fx.models, "norange/stories", DATA)).size).toBe(size);
  });

  test("a body that stalls is cut after the stall timeout and resumed", async () => {
    fx.hub.clearLog();
    const size = fx.hub.sizeOf(STORIES_REPO, DATA);
    // Held until after the pull: only the stall watchdog can move it on.
    const held = fx.hub.hold(DATA, 200_000);
    try {
      const { events } = await pull(STORIES_REPO, { dtype: "fp32", id: "stall/stories", stallMs: 300 });
      expect(events.find((e) => e.type === "retry")).toMatchObject({ path: DATA, attempt: 1, reason: "no data for 0.3 s" });
      const ranges = fx.hub.requests.filter((r) => r.file === DATA && r.method === "GET" && r.range !== "bytes=0-0").map((r) => r.range);
      expect(ranges).toEqual([null, `bytes=200000-${size - 1}`]);
      expect(statSync(join(fx.models, "stall/stories", DATA)).size).toBe(size);
    } finally {
      held.release();
    }
  });

  test("an interrupted pull resumes: the next run fetches only the rest; one pull per model at a time", async () => {
    fx.hub.clearLog();
    const size = fx.hub.sizeOf(STORIES_REPO, DATA);
    const held = fx.hub.hold(DATA, 500_000);
    const stop = new AbortController();
    const first = pull(STORIES_REPO, { dtype: "fp32", id: "resume/stories", signal: stop.signal });
    await held.reached;
    expect((await pullError(STORIES_REPO, { dtype: "fp32", id: "resume/stories" })).kind).toBe("busy");
    stop.abort();
    held.release();
    const e = await first.then(() => null, (x) => x as PullError);
    expect(e?.kind).toBe("cancelled");
    expect(existsSync(join(fx.models, "resume/stories"))).toBe(false);
    expect(statSync(join(stagingDir(fx.models, "resume/stories"), `${DATA}.part`)).size).toBe(500_000);

    fx.hub.clearLog();
    const { result, events } = await pull(STORIES_REPO, { dtype: "fp32", id: "resume/stories" });
    const done = events.find((x) => x.type === "file-done" && x.path === DATA);
    expect(done).toMatchObject({ action: "resume", transferred: size - 500_000 });
    expect(fx.hub.bytesSent(DATA)).toBe(size - 500_000);
    expect(fx.hub.requests.find((r) => r.file === DATA && r.range?.startsWith("bytes=500000-"))).toBeDefined();
    expect(result.transferredBytes).toBe(size - 500_000);
    await eventually("the resumed model is served", async () => (await served()).includes("resume/stories"));
    expect((await complete("resume/stories", "", 30)).text).toBe((await complete(STORIES_REPO, "", 30)).text);
  });

  test("a corrupted body is refused with a checksum error and no model appears; the next pull fetches only that file", async () => {
    fx.hub.faults.corrupt.add(DATA);
    const e = await pullError(STORIES_REPO, { dtype: "fp32", id: "corrupt/stories" });
    fx.hub.faults.corrupt.delete(DATA);
    expect(e.kind).toBe("checksum");
    expect(e.message).toContain(`checksum mismatch for ${DATA}`);
    expect(e.message).toContain(fx.hub.sha256Of(STORIES_REPO, DATA));
    expect(existsSync(join(fx.models, "corrupt/stories"))).toBe(false);
    expect(existsSync(join(stagingDir(fx.models, "corrupt/stories"), `${DATA}.part`))).toBe(false);
    await fx.server.syncCatalog();
    expect(await served()).not.toContain("corrupt/stories");

    fx.hub.clearLog();
    await pull(STORIES_REPO, { dtype: "fp32", id: "corrupt/stories" });
    expect(fx.hub.filesFetched()).toEqual([DATA]);
  });

  test("a gated repo without a token fails naming HF_TOKEN and fetches nothing; with a token it succeeds", async () => {
    fx.hub.clearLog();
    const e = await pullError(GATED_REPO);
    expect(e.kind).toBe("gated");
    expect(e.message).toContain("HF_TOKEN");
    expect(fx.hub.filesFetched()).toEqual([]);
    expect(existsSync(join(fx.models, GATED_REPO))).toBe(false);

    const wrong = await pullError(GATED_REPO, { token: { token: "hf_notvalid", source: "HF_TOKEN" } });
    expect(wrong.kind).toBe("gated");
    expect(wrong.message).toContain("token in use may not read it");

    await pull(GATED_REPO, { token: hubToken({ HF_TOKEN: HUB_TOKEN }) });
    expect(card(GATED_REPO).dtype).toBe("fp32");
    // The token file huggingface_hub writes works the same.
    const home = tempDir("sluice-hfhome-");
    writeFileSync(join(home.path, "token"), `${HUB_TOKEN}\n`);
    await pull(GATED_REPO, { id: "gated/from-token-file", token: hubToken({ HF_HOME: home.path }) });
    home.remove();
    await eventually("the gated model is served", async () => (await served()).includes(GATED_REPO));
  });

  test("an onnxruntime-genai repo: the files its genai_config.json names", async () => {
    fx.hub.clearLog();
    const { result } = await pull(GENAI_REPO);
    expect(result.layout).toBe("genai");
    expect(fx.hub.filesFetched().sort()).toEqual([...CONFIGS, "genai_config.json", "onnx/model.onnx", DATA].sort());
    expect(card(GENAI_REPO).dtype).toBeUndefined();
    await eventually("the genai model is served", async () => (await served()).includes(GENAI_REPO));
    const r = await complete(GENAI_REPO, "", 40);
    expect(referenceText().startsWith(r.text)).toBe(true);
  });

  test("a repo with several genai exports in folders: refused naming them; --subfolder picks one", async () => {
    const e = await pullError(GENAI_VARIANTS_REPO);
    expect(e.kind).toBe("usage");
    expect(e.message).toContain("choose one with --subfolder: cpu-fp32, cpu-int4-rtn-block-32");
    fx.hub.clearLog();
    const { result } = await pull(GENAI_VARIANTS_REPO, { subfolder: "cpu-int4-rtn-block-32" });
    expect(result.note).toContain("from cpu-int4-rtn-block-32");
    expect(fx.hub.filesFetched().every((f) => f.startsWith("cpu-int4-rtn-block-32/"))).toBe(true);
    // Placed relative to the folder: the directory looks like any genai export.
    expect(existsSync(join(fx.models, GENAI_VARIANTS_REPO, "genai_config.json"))).toBe(true);
    expect(existsSync(join(fx.models, GENAI_VARIANTS_REPO, DATA))).toBe(true);
  });

  test("a safetensors-only repo is downloaded and converted by the HF importer, then served", async () => {
    fx.hub.clearLog();
    const { result, events } = await pull(SAFETENSORS_REPO, { dtype: "fp32" });
    expect(result.layout).toBe("safetensors");
    expect(fx.hub.filesFetched().sort()).toEqual(["config.json", "generation_config.json", "model.safetensors", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"]);
    expect(events.some((e) => e.type === "importing")).toBe(true);
    // The model directory holds the conversion, not the checkpoint.
    expect(existsSync(join(fx.models, SAFETENSORS_REPO, "model.safetensors"))).toBe(false);
    expect(card(SAFETENSORS_REPO)).toMatchObject({ id: SAFETENSORS_REPO, source: { repo: SAFETENSORS_REPO } });
    await eventually("the converted model is served", async () => (await served()).includes(SAFETENSORS_REPO));
    expect(await complete(SAFETENSORS_REPO, "", 256)).toEqual({ status: 200, text: referenceText() });
  });

  test("a vision-language repo: encoder, embeddings and decoder of the chosen dtype, served with images", async () => {
    fx.hub.clearLog();
    await pull(VLM_REPO, { dtype: "fp16" });
    const graphs = fx.hub.filesFetched().filter((f) => f.endsWith(".onnx"));
    expect(graphs.sort()).toEqual(["onnx/decoder_model_merged_fp16.onnx", "onnx/embed_tokens_fp16.onnx", "onnx/vision_encoder_fp16.onnx"]);
    expect(fx.hub.filesFetched()).toContain("preprocessor_config.json");
    expect(card(VLM_REPO)).toMatchObject({ dtype: "fp16", capabilities: { images: true } });
    await eventually("the vision model is served", async () => (await served()).includes(VLM_REPO));
    const image = dataUrl(await makeImage("png", 40, 30, 5), "image/png");
    const r = await complete(VLM_REPO, [{ type: "text", text: "what is this?" }, { type: "image_url", image_url: { url: image } }], 4);
    expect(r.status).toBe(200);
  });

  test("errors in words, and nothing placed: unknown repo or revision, no network, safetensors only, no model", async () => {
    fx.hub.clearLog();
    const cases: [string, Partial<PullOptions>, PullError["kind"], RegExp][] = [
      ["nobody/nothing", {}, "not_found", /no model repository nobody\/nothing .*HF_TOKEN/],
      [STORIES_REPO, { revision: "no-such-branch", id: "x/rev" }, "not_found", /has no revision "no-such-branch"/],
      [STORIES_REPO, { endpoint: "http://127.0.0.1:9", id: "x/net" }, "network", /cannot reach the Hub at http:\/\/127\.0\.0\.1:9 .*HF_ENDPOINT/],
      [BROKEN_SAFETENSORS_REPO, {}, "no_model", /holds a safetensors checkpoint that cannot be converted: /],
      [EMPTY_REPO, {}, "no_model", /neither ONNX files, safetensors weights nor GGUF files/],
      [STORIES_REPO, { dtype: "q4f16", id: "x/dtype" }, "usage", /no q4f16 export .* it has: fp32, fp16, q8, q4/],
    ];
    for (const [repo, o, kind, text] of cases) {
      const e = await pullError(repo, o);
      expect({ repo, kind: e.kind }).toEqual({ repo, kind });
      expect(e.message).toMatch(text);
    }
    // Only the broken checkpoint was downloaded (it had to be, to find it cannot be converted).
    expect(fx.hub.filesFetched().filter((f) => f !== "model.safetensors" && !f.endsWith(".json"))).toEqual([]);
    for (const id of ["nobody/nothing", "x", BROKEN_SAFETENSORS_REPO, EMPTY_REPO]) expect(existsSync(join(fx.models, id))).toBe(false);
    // A tag resolves like the branch it points to.
    await pull(STORIES_REPO, { revision: "v1", dtype: "fp32", id: "tag/stories" });
    expect(card("tag/stories")).toMatchObject({ source: { revision: "v1", commit: fx.hub.commitOf(STORIES_REPO) } });
  });
});

/** A tmpfs of `size` for the disk-full cases, when this process may mount one. */
function mountTmpfs(size: string): { path: string; remove: () => void } | null {
  const dir = tempDir("sluice-tmpfs-");
  const r = Bun.spawnSync(["mount", "-t", "tmpfs", "-o", `size=${size}`, "tmpfs", dir.path], { stderr: "pipe" });
  if (r.exitCode !== 0) {
    dir.remove();
    return null;
  }
  return {
    path: dir.path,
    remove: () => {
      Bun.spawnSync(["umount", dir.path]);
      dir.remove();
    },
  };
}

const probe = mountTmpfs("64k");
probe?.remove();
if (!probe) console.warn("skipping the disk-full pull tests: this process cannot mount a tmpfs (they need root)");

describe.skipIf(!hasStories || !probe)("models pull on a full disk", () => {
  test("too little free space: refused before fetching anything", async () => {
    const small = mountTmpfs("1m")!;
    try {
      fx.hub.clearLog();
      const e = await pullError(STORIES_REPO, { dtype: "fp32", modelsDir: small.path });
      expect(e.kind).toBe("disk_full");
      expect(e.message).toMatch(/not enough disk space in .*: the files still to fetch take 1\.\d+ MiB/);
      expect(fx.hub.filesFetched()).toEqual([]);
    } finally {
      small.remove();
    }
  });

  test("the disk fills up mid-file (a real ENOSPC): stopped in words, nothing placed; resumed once there is space", async () => {
    const disk = mountTmpfs("4m")!;
    const filler = join(disk.path, "filler");
    try {
      fx.hub.faults.beforeBody = (file) => {
        if (file !== DATA) return;
        // Someone else takes the disk just as the big file starts: 100 KiB stay free.
        const s = statfsSync(disk.path);
        writeFileSync(filler, new Uint8Array(Number(s.bavail) * Number(s.bsize) - 100 * 1024));
      };
      const e = await pullError(STORIES_REPO, { dtype: "fp32", modelsDir: disk.path });
      fx.hub.faults.beforeBody = undefined;
      expect(e.kind).toBe("disk_full");
      expect(e.message).toMatch(/^disk full while writing onnx\/model\.onnx_data/);
      expect(existsSync(join(disk.path, STORIES_REPO))).toBe(false);

      Bun.spawnSync(["rm", filler]);
      const events: PullEvent[] = [];
      await pullModel({ repo: STORIES_REPO, dtype: "fp32", modelsDir: disk.path, endpoint: fx.hub.url, token: null, device: "cpu", onEvent: (x) => events.push(x) });
      expect(events.find((x) => x.type === "file-done" && x.path === DATA)).toMatchObject({ action: "resume" });
      expect(statSync(join(disk.path, STORIES_REPO, DATA)).size).toBe(fx.hub.sizeOf(STORIES_REPO, DATA));
      expect(existsSync(join(disk.path, STAGING_FOLDER, "onnx-community--stories260k-ONNX"))).toBe(false);
    } finally {
      fx.hub.faults.beforeBody = undefined;
      disk.remove();
    }
  });
});
