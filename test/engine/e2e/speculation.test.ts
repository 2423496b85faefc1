// Speculative decoding through the real server: `serve --speculate off` and the default (ngram)
// give the same text for the same greedy requests, /metrics counts drafted and accepted tokens,
// and a bad --speculate value is refused at start.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import OpenAI from "openai";
import { linkCachedModel } from "../../helpers/models.ts";
import { BUN, REPO, tempDir } from "../../helpers/paths.ts";
import { spawnServe, type ServeProcess } from "../../helpers/serve-process.ts";

const MODEL = "spec/tiny-bytes";

async function metric(url: string, name: string): Promise<number> {
  const body = await (await fetch(`${url}/metrics`)).text();
  const line = body.split("\n").find((l) => l.startsWith(`${name}{model="${MODEL}"}`));
  return line ? Number(line.split(" ")[1]) : NaN;
}

describe("serve --speculate", () => {
  const dir = tempDir("sluice-speculate-");
  const servers: Record<"ngram" | "off", ServeProcess | null> = { ngram: null, off: null };

  beforeAll(async () => {
    await linkCachedModel(dir.path, "tiny", { preset: "tiny-bytes", id: MODEL, variant: "fused", seed: 11 });
    for (const mode of ["ngram", "off"] as const) {
      const args = ["--data", join(dir.path, `data-${mode}`), "--models", dir.path, "--no-demo", "--device", "cpu"];
      servers[mode] = await spawnServe(mode === "off" ? [...args, "--speculate", "off"] : args);
    }
  }, 120_000);

  afterAll(async () => {
    for (const s of Object.values(servers)) await s?.stop();
    dir.remove();
  });

  test("the default and off give the same greedy text; /metrics counts the drafts of the default only", async () => {
    // The first again at the end: the account's own earlier answer is then a draft for it.
    const prompts = ["Once upon a time", "The cat sat on the mat. The cat sat on the mat. The cat sat", "One day, Tom and Sue went to the park.", "Once upon a time"];
    const texts: Record<string, string[]> = {};
    for (const mode of ["ngram", "off"] as const) {
      const s = servers[mode]!;
      const client = new OpenAI({ apiKey: s.key!, baseURL: `${s.url}/v1`, maxRetries: 0 });
      texts[mode] = [];
      for (const content of prompts) {
        let text = "";
        for await (const chunk of await client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content }], temperature: 0, max_tokens: 120, stream: true })) {
          text += chunk.choices[0]?.delta.content ?? "";
        }
        texts[mode]!.push(text);
      }
    }
    expect(texts.ngram).toEqual(texts.off!);
    expect(texts.off!.join("").length).toBeGreaterThan(100);
    // Stats reach /metrics a little after the work.
    let drafted = 0;
    for (let i = 0; i < 50 && !(drafted > 0); i++) {
      await Bun.sleep(50);
      drafted = await metric(servers.ngram!.url, "sluice_draft_tokens_total");
    }
    expect(drafted).toBeGreaterThan(0);
    const accepted = await metric(servers.ngram!.url, "sluice_draft_accepted_tokens_total");
    expect(accepted).toBeGreaterThanOrEqual(0);
    expect(accepted).toBeLessThanOrEqual(drafted);
    expect(await metric(servers.off!.url, "sluice_draft_tokens_total")).toBe(0);
    expect(await metric(servers.off!.url, "sluice_draft_accepted_tokens_total")).toBe(0);
  }, 60_000);

  test("--warmup-ms: a preloaded model is warmed at load with synthetic requests that leave no trace in its counters or output", async () => {
    // Preloaded: a model loaded on demand skips the warm-up (its first request is waiting).
    const warm = await spawnServe(["--data", join(dir.path, "data-warm"), "--models", dir.path, "--no-demo", "--device", "cpu", "--preload", "all", "--warmup-ms", "400"], { stderr: "pipe" });
    let log = "";
    try {
      // The warm-up ran before the model was reported loaded; none of it shows in /metrics.
      for (const name of ["sluice_generated_tokens_total", "sluice_decode_steps_total", "sluice_prompt_tokens_computed_total", "sluice_prefix_cache_entries", "sluice_draft_tokens_total"]) {
        expect(await metric(warm.url, name)).toBe(0);
      }
      const c = new OpenAI({ apiKey: warm.key!, baseURL: `${warm.url}/v1`, maxRetries: 0 });
      const ref = new OpenAI({ apiKey: servers.ngram!.key!, baseURL: `${servers.ngram!.url}/v1`, maxRetries: 0 });
      const ask = async (client: OpenAI) =>
        (await client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "The cat sat on the mat." }], temperature: 0, max_tokens: 60 })).choices[0]!.message.content;
      expect(await ask(c)).toBe((await ask(ref))!);
    } finally {
      await warm.stop();
      log = await new Response(warm.proc.stderr as ReadableStream).text();
    }
    const m = /warmed up with (\d+) synthetic requests \((\d+) tokens\) in (\d+) ms/.exec(log);
    expect(m).not.toBeNull();
    expect(Number(m![1])).toBeGreaterThan(0);
    expect(Number(m![2])).toBeGreaterThan(0);
  }, 60_000);

  test("--warmup-ms: a model loaded on demand skips the warm-up (its first request is waiting for the load)", async () => {
    const cold = await spawnServe(["--data", join(dir.path, "data-cold"), "--models", dir.path, "--no-demo", "--device", "cpu", "--warmup-ms", "400"], { stderr: "pipe" });
    let log = "";
    try {
      const c = new OpenAI({ apiKey: cold.key!, baseURL: `${cold.url}/v1`, maxRetries: 0 });
      const r = await c.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 4 });
      expect(r.choices[0]!.finish_reason).not.toBeNull();
    } finally {
      await cold.stop();
      log = await new Response(cold.proc.stderr as ReadableStream).text();
    }
    expect(log).toContain("model loaded on");
    expect(log).not.toContain("warmed up with");
  }, 60_000);

  test("a value other than ngram or off is refused with a usage error", () => {
    const r = Bun.spawnSync([BUN, join(REPO, "src/cli/main.ts"), "serve", "--speculate", "eagle", "--data", join(dir.path, "bad"), "--port", "0"], { cwd: REPO });
    expect(r.exitCode).not.toBe(0);
    expect(r.stderr.toString()).toContain("--speculate must be ngram or off");
  });
});
