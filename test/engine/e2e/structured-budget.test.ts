// Structured output within the budget a client gives it, on a real model that knows nothing of
// JSON (stories260K) at temperature 1: whitespace cannot eat the budget, the document is closed
// in time, and a budget below the shortest document is refused up front naming the minimum.
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import Ajv from "ajv";
import { zodResponseFormat } from "openai/helpers/zod";
import { z } from "zod";
import { importLlama2c } from "../../../src/modelkit/llama2c/import.ts";
import { hasStories, STORIES_DIR } from "../../helpers/paths.ts";
import { serverFixture } from "../../helpers/server.ts";
import { ISSUE_SCHEMA } from "../../structured/helpers.ts";

if (!hasStories) console.warn(`skipping structured budget tests: ${STORIES_DIR} is absent`);

const MODEL = "karpathy/stories260k";
const FORMAT = { type: "json_schema" as const, json_schema: { name: "person", schema: ISSUE_SCHEMA, strict: true } };
// Token ids in stories260K's vocabulary: newline, tab, carriage return, vertical tab, form feed, and the pieces that are one space.
const NEWLINE = 13;
const SPACES = [35, 410, 498, 511];
const OTHER_BLANKS = [12, 14, 15, 16];

describe.skipIf(!hasStories)("structured output within the budget (stories260K)", () => {
  const fx = serverFixture(async (dir) => {
    await importLlama2c(join(STORIES_DIR, "stories260K.bin"), join(STORIES_DIR, "tok512.bin"), { id: MODEL, outDir: join(dir, "stories"), variant: "fused" });
  });
  const validate = new Ajv({ strict: false }).compile(ISSUE_SCHEMA);
  const ask = (seed: number, maxTokens: number, extra: Record<string, unknown> = {}) =>
    fx.client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "Once upon a time" }], temperature: 1, seed, max_tokens: maxTokens, response_format: FORMAT, ...extra });

  test("the issue's schema at max_tokens 120: at least 19 of 20 seeds give valid JSON with finish_reason stop", async () => {
    let good = 0;
    const failures: string[] = [];
    for (let seed = 1; seed <= 20; seed++) {
      const r = await ask(seed, 120);
      const c = r.choices[0]!;
      expect(r.usage!.completion_tokens).toBeLessThanOrEqual(120);
      let ok = c.finish_reason === "stop";
      try {
        ok &&= validate(JSON.parse(c.message.content!)) === true;
      } catch {
        ok = false;
      }
      if (process.env.SHOW) console.log(seed, c.finish_reason, r.usage!.completion_tokens, JSON.stringify(c.message.content));
      if (ok) good++;
      else failures.push(`seed ${seed}: ${c.finish_reason} ${JSON.stringify(c.message.content)}`);
    }
    if (good < 19) throw new Error(failures.join("\n"));
  }, 120_000);

  test("json_object at max_tokens 60 is a JSON object", async () => {
    for (let seed = 1; seed <= 5; seed++) {
      const r = await fx.client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "Once upon a time" }], temperature: 1, seed, max_tokens: 60, response_format: { type: "json_object" } });
      const c = r.choices[0]!;
      expect(c.finish_reason).toBe("stop");
      const v = JSON.parse(c.message.content!);
      expect(typeof v === "object" && v !== null && !Array.isArray(v)).toBe(true);
    }
  }, 60_000);

  test("the model's compile thread computes its built-in budget tables after load and the model's worker takes them (/metrics counts their bytes); json_object answers close in time before and after", async () => {
    const tableBytes = async () => {
      const body = await (await fetch(`${fx.server.url}/metrics`)).text();
      const line = body.split("\n").find((l) => l.startsWith(`sluice_built_in_budget_tables_bytes{model="${MODEL}"}`));
      return line ? Number(line.split(" ")[1]) : NaN;
    };
    // The model's stats reach /metrics after its next work: a request, then a look, until they are there.
    let bytes = 0;
    for (let seed = 1; seed <= 100 && !(bytes > 0); seed++) {
      const r = await fx.client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "Once upon a time" }], temperature: 1, seed, max_tokens: 60, response_format: { type: "json_object" } });
      const c = r.choices[0]!;
      expect(c.finish_reason).toBe("stop");
      expect(typeof JSON.parse(c.message.content!)).toBe("object");
      await Bun.sleep(50);
      bytes = await tableBytes();
    }
    expect(bytes).toBeGreaterThan(0);
  }, 60_000);

  test("the openai client's chat.completions.parse with a zod schema at max_tokens 120, 10 seeds", async () => {
    const Person = z.object({ name: z.string().max(12), age: z.number().int().min(0).max(120), mood: z.enum(["happy", "sad"]).nullable(), tags: z.array(z.string().max(6)).max(2) });
    for (let seed = 1; seed <= 10; seed++) {
      const r = await fx.client.chat.completions.parse({ model: MODEL, messages: [{ role: "user", content: "Once upon a time" }], seed, temperature: 1, max_tokens: 120, response_format: zodResponseFormat(Person, "person") });
      const c = r.choices[0]!;
      expect(c.finish_reason).toBe("stop");
      expect(Person.parse(c.message.parsed)).toEqual(c.message.parsed!);
    }
  }, 120_000);

  test("a budget exactly at the shortest document still gives one; one token less is a 400 naming the minimum", async () => {
    const refused = await fetch(`${fx.server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${fx.server.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "x" }], max_tokens: 5, response_format: FORMAT }),
    });
    expect(refused.status).toBe(400);
    const err = ((await refused.json()) as { error: { message: string; param: string; code: string } }).error;
    expect(err.param).toBe("max_tokens");
    expect(err.code).toBe("max_tokens_too_small");
    const least = Number(/takes (\d+) tokens/.exec(err.message)![1]);
    expect(err.message).toContain(`at least ${least}`);
    // {"name":"","age":0,"pets":[],"mood":null} is 41 bytes; the vocabulary joins some of them.
    expect(least).toBeGreaterThan(10);
    expect(least).toBeLessThan(60);
    for (let seed = 1; seed <= 5; seed++) {
      const r = await ask(seed, least);
      const c = r.choices[0]!;
      expect(c.finish_reason).toBe("stop");
      expect(validate(JSON.parse(c.message.content!))).toBe(true);
      expect(r.usage!.completion_tokens).toBe(least);
    }
    const short = await fetch(`${fx.server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${fx.server.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "x" }], max_tokens: least - 1, response_format: FORMAT }),
    });
    expect(short.status).toBe(400);
  }, 60_000);

  test("streamed, n = 3, with logprobs, at a tight budget: every choice closes its document", async () => {
    const stream = await fx.client.chat.completions.create({
      model: MODEL,
      messages: [{ role: "user", content: "Once upon a time" }],
      temperature: 1,
      seed: 3,
      n: 3,
      logprobs: true,
      max_tokens: 70,
      response_format: FORMAT,
      stream: true,
      stream_options: { include_usage: true },
    });
    const text = ["", "", ""];
    const finish: (string | null)[] = [null, null, null];
    const logprobs = [0, 0, 0];
    for await (const chunk of stream) {
      for (const c of chunk.choices) {
        text[c.index] += c.delta.content ?? "";
        finish[c.index] = c.finish_reason ?? finish[c.index];
        logprobs[c.index] += c.logprobs?.content?.length ?? 0;
      }
    }
    for (let i = 0; i < 3; i++) {
      expect(finish[i]).toBe("stop");
      expect(validate(JSON.parse(text[i]!))).toBe(true);
      expect(logprobs[i]).toBeGreaterThan(0);
    }
  }, 60_000);

  test("a model pushed to newlines and spaces writes a pretty-printed document, indented by depth", async () => {
    const bias: Record<string, number> = { [NEWLINE]: 100 };
    for (const id of SPACES) bias[id] = 30;
    const r = await ask(1, 400, { logit_bias: bias });
    const c = r.choices[0]!;
    expect(c.finish_reason).toBe("stop");
    const text = c.message.content!;
    expect(validate(JSON.parse(text))).toBe(true);
    if (process.env.SHOW) console.log(text);
    expect(text.startsWith("{\n")).toBe(true);
    expectIndentedByDepth(text);
  }, 60_000);

  test("a model pushed to whitespace everywhere is held to the layout and still finishes at max_tokens 120", async () => {
    const bias: Record<string, number> = {};
    for (const id of [NEWLINE, ...SPACES, ...OTHER_BLANKS]) bias[id] = 100;
    for (let seed = 1; seed <= 3; seed++) {
      const r = await ask(seed, 120, { logit_bias: bias });
      const c = r.choices[0]!;
      expect(c.finish_reason).toBe("stop");
      const text = c.message.content!;
      expect(validate(JSON.parse(text))).toBe(true);
      expect(text).toBe(text.trim());
      expect(text).not.toMatch(/[\r\v\f]/);
      expectIndentedByDepth(text);
    }
  }, 60_000);
});

describe.skipIf(!hasStories)("a budget too small for the shortest document: the 400 names what set it", () => {
  // The operator caps completions at 5 tokens, fewer than the issue's schema needs at least.
  const fx = serverFixture(
    async (dir) => {
      await importLlama2c(join(STORIES_DIR, "stories260K.bin"), join(STORIES_DIR, "tok512.bin"), { id: MODEL, outDir: join(dir, "stories"), variant: "fused" });
    },
    { limits: { maxTokensCap: 5 } },
  );
  const refusal = async (budget: Record<string, number>) => {
    const r = await fetch(`${fx.server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${fx.server.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "x" }], response_format: FORMAT, ...budget }),
    });
    expect(r.status).toBe(400);
    const { error } = (await r.json()) as { error: { message: string; param: string | null; code: string } };
    expect(error.code).toBe("max_tokens_too_small");
    return error;
  };

  test("no max_tokens: the operator's --max-tokens-cap set it, which is no parameter of the request", async () => {
    const err = await refusal({});
    expect(err.param).toBeNull();
    expect(err.message).toContain("at most 5 completion tokens");
    expect(err.message).toContain("--max-tokens-cap");
    expect(err.message).not.toContain("Set max_tokens");
  });

  test("max_completion_tokens is named as such, max_tokens as such", async () => {
    const completion = await refusal({ max_completion_tokens: 4 });
    expect(completion.param).toBe("max_completion_tokens");
    expect(completion.message).toStartWith("max_completion_tokens is 4,");
    expect(completion.message).toMatch(/Set max_completion_tokens to at least \d+\./);
    const legacy = await refusal({ max_tokens: 5 });
    expect(legacy.param).toBe("max_tokens");
    expect(legacy.message).toStartWith("max_tokens is 5,");
    expect(legacy.message).not.toContain("--max-tokens-cap");
  });
});

/**
 * Blanks outside strings are one space after ':' or ',', or a newline followed by the indent
 * unit (fixed by the first newline) times the depth there.
 */
function expectIndentedByDepth(text: string): void {
  let depth = 0;
  let inString = false;
  let unit: string | null = null;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i]!;
    if (inString) {
      if (ch === "\\") i++;
      else if (ch === '"') inString = false;
      continue;
    }
    if (ch === '"') inString = true;
    else if (ch === "{" || ch === "[") depth++;
    else if (ch === "}" || ch === "]") depth--;
    else if (ch === " ") expect([":", ","]).toContain(text[i - 1]);
    else if (ch === "\n") {
      let j = i + 1;
      while (text[j] === " " || text[j] === "\t") j++;
      const indent = text.slice(i + 1, j);
      const closing = text[j] === "}" || text[j] === "]";
      const level = closing ? depth - 1 : depth;
      unit ??= indent.slice(0, indent.length / Math.max(level, 1));
      expect(["  ", "    ", "\t"]).toContain(unit);
      expect(indent).toBe(unit.repeat(level));
      i = j - 1;
    }
  }
}
