// Structured output and tool calls on a random-weights model with the real Qwen3 tokenizer: only
// the grammar can make the output valid, so every response that finishes must parse and validate.
import { describe, expect, test } from "bun:test";
import Ajv from "ajv";
import OpenAI from "openai";
import { zodFunction, zodResponseFormat } from "openai/helpers/zod";
import { z } from "zod";
import { linkModelForSpec } from "../../helpers/models.ts";
import { batchInvariantNotes, capturedLog, serverFixture } from "../../helpers/server.ts";
import { weather } from "../../helpers/weather-tools.ts";

const MODEL = "synthetic/tiny-qwen3";
const ajv = new Ajv({ strict: false });
// Fused and batch-invariant: streamed answers are compared with whole ones token for token, and the
// second of a pair reuses the first's cached prompt and drafts from its answer (see tool-formats.test.ts).
const logged = capturedLog();
const fx = serverFixture((dir) => linkModelForSpec(dir, "qwen", { preset: "tiny-qwen3", seed: 7, id: MODEL, variant: "fused" }), { engine: { batchInvariant: true }, log: logged.log });

const SCHEMAS: Record<string, Record<string, unknown>> = {
  nested: {
    type: "object",
    properties: {
      name: { type: "string", maxLength: 12 },
      age: { type: "integer", minimum: 0, maximum: 120 },
      address: { type: "object", properties: { city: { type: "string", maxLength: 10 }, zip: { type: "string", pattern: "^[0-9]{5}$" } }, required: ["city", "zip"], additionalProperties: false },
      tags: { type: "array", items: { type: "string", maxLength: 6 }, minItems: 1, maxItems: 3 },
    },
    required: ["name", "age", "address", "tags"],
    additionalProperties: false,
  },
  enums: {
    type: "object",
    properties: {
      color: { enum: ["red", "green", "blue"] },
      size: { type: "string", enum: ["S", "M", "L", "XL"] },
      ok: { type: "boolean" },
      kind: { const: "shirt" },
      note: { type: ["string", "null"], maxLength: 8 },
    },
    required: ["color", "size", "ok", "kind", "note"],
    additionalProperties: false,
  },
  recursive: {
    $defs: { node: { type: "object", properties: { v: { type: "integer", minimum: 0, maximum: 9 }, kids: { type: "array", items: { $ref: "#/$defs/node" }, maxItems: 2 } }, required: ["v", "kids"], additionalProperties: false } },
    $ref: "#/$defs/node",
  },
};

async function jsonSchemaRun(schema: Record<string, unknown>, seed: number, stream: boolean) {
  const body = {
    model: MODEL,
    messages: [{ role: "user" as const, content: "Reply in JSON." }],
    temperature: 1,
    seed,
    max_tokens: 400,
    // The model's template can think first; a random model would think until the budget leaves
    // just room for the answer (tested in reasoning.test.ts): here only the answer is looked at.
    reasoning_effort: "none" as const,
    response_format: { type: "json_schema" as const, json_schema: { name: "out", schema, strict: true } },
  };
  if (!stream) {
    const r = await fx.client.chat.completions.create(body);
    return { text: r.choices[0]!.message.content!, finish: r.choices[0]!.finish_reason };
  }
  let text = "";
  let finish: string | null = null;
  for await (const c of await fx.client.chat.completions.create({ ...body, stream: true })) {
    text += c.choices[0]?.delta.content ?? "";
    finish = c.choices[0]?.finish_reason ?? finish;
  }
  return { text, finish };
}

describe("response_format", () => {
  for (const [name, schema] of Object.entries(SCHEMAS)) {
    test(`json_schema '${name}': every finished response parses and validates; streamed equals whole`, async () => {
      const validate = ajv.compile(schema);
      let finished = 0;
      for (let seed = 1; seed <= 6; seed++) {
        const whole = await jsonSchemaRun(schema, seed, false);
        const streamed = await jsonSchemaRun(schema, seed, true);
        expect(streamed).toEqual(whole);
        // Exact because the model loaded with the rewrite that makes it so.
        expect(batchInvariantNotes(logged.lines, MODEL)).toEqual([expect.stringContaining("batch-invariant: canonical attention")]);
        if (whole.finish !== "stop") continue;
        finished++;
        const value = JSON.parse(whole.text);
        if (!validate(value)) throw new Error(`seed ${seed}: ${whole.text} fails ${JSON.stringify(validate.errors)}`);
      }
      // The budget (400 tokens) holds a document, so every answer is one.
      expect(finished).toBe(6);
    }, 60_000);
  }

  test("json_object: any JSON object", async () => {
    let finished = 0;
    for (let seed = 1; seed <= 6; seed++) {
      const r = await fx.client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "JSON please" }], temperature: 1, seed, max_tokens: 80, reasoning_effort: "none", response_format: { type: "json_object" } });
      if (r.choices[0]!.finish_reason !== "stop") continue;
      finished++;
      const v = JSON.parse(r.choices[0]!.message.content!);
      expect(typeof v === "object" && v !== null && !Array.isArray(v)).toBe(true);
    }
    expect(finished).toBe(6);
  }, 60_000);

  test("a string of 400 to 2,000 characters compiles with its token budget at the default --max-schema-seconds: a budget at the shortest answer ends in one, one token less is a 400", async () => {
    const schema = { type: "object", properties: { story: { type: "string", minLength: 400, maxLength: 2000 } }, required: ["story"], additionalProperties: false };
    const format = { type: "json_schema" as const, json_schema: { name: "story", schema, strict: true } };
    const ask = (maxTokens: number, seed = 1) =>
      fetch(`${fx.server.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${fx.server.key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "Tell a story." }], temperature: 1, seed, max_tokens: maxTokens, reasoning_effort: "none", response_format: format }),
      });
    // Its budget tables were refused past the time limit (schema_too_complex) before counted strings were solved per chain.
    const refused = await ask(3);
    expect(refused.status).toBe(400);
    const err = ((await refused.json()) as { error: { message: string; code: string } }).error;
    expect(err.code).toBe("max_tokens_too_small");
    const least = Number(/takes (\d+) tokens/.exec(err.message)![1]);
    expect(least).toBeGreaterThan(3);
    expect((await ask(least - 1)).status).toBe(400);
    for (const [seed, budget] of [[1, least], [2, least], [3, 160]] as const) {
      const r = (await (await ask(budget, seed)).json()) as { choices: { message: { content: string }; finish_reason: string }[]; usage: { completion_tokens: number } };
      expect(r.choices[0]!.finish_reason).toBe("stop");
      expect(r.usage.completion_tokens).toBeLessThanOrEqual(budget);
      const story: string = JSON.parse(r.choices[0]!.message.content).story;
      expect([...story].length).toBeGreaterThanOrEqual(400);
      expect([...story].length).toBeLessThanOrEqual(2000);
    }
  }, 60_000);

  test("unsupported constraining keywords are a 400 naming them; annotations are accepted", async () => {
    const res = await fetch(`${fx.server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${fx.server.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "x" }], response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "object", not: { required: ["a"] } } } } }),
    });
    expect(res.status).toBe(400);
    const err = ((await res.json()) as { error: { message: string; param: string } }).error;
    expect(err.message).toContain('"not"');
    expect(err.param).toBe("response_format.json_schema.schema");
    const ok = await fx.client.chat.completions.create({
      model: MODEL,
      messages: [{ role: "user", content: "x" }],
      max_tokens: 50,
      response_format: { type: "json_schema", json_schema: { name: "x", schema: { $schema: "https://json-schema.org/draft/2020-12/schema", $id: "x", title: "T", description: "d", examples: [true], default: true, $comment: "c", type: "boolean" } } },
    });
    if (ok.choices[0]!.finish_reason === "stop") expect(typeof JSON.parse(ok.choices[0]!.message.content!)).toBe("boolean");
  });

  test("the openai client's chat.completions.parse with a zod schema", async () => {
    const Person = z.object({ name: z.string().max(10), mood: z.enum(["happy", "sad"]), age: z.number().int().min(0).max(99) });
    let parsedOnce = false;
    for (let seed = 1; seed <= 5 && !parsedOnce; seed++) {
      const r = await fx.client.chat.completions.parse({ model: MODEL, messages: [{ role: "user", content: "A person" }], seed, temperature: 1, max_tokens: 200, response_format: zodResponseFormat(Person, "person") });
      if (r.choices[0]!.finish_reason !== "stop") continue;
      const p = r.choices[0]!.message.parsed!;
      expect(Person.parse(p)).toEqual(p);
      parsedOnce = true;
    }
    expect(parsedOnce).toBe(true);
  }, 60_000);
});

// get_time here is not strict (the tool matrix's is): its calls are held by tool_choice alone.
const time = { type: "function" as const, function: { name: "get_time", parameters: { type: "object", properties: { tz: { type: "string", maxLength: 8 } }, required: ["tz"], additionalProperties: false } } };

describe("tool calls", () => {
  test("tool_choice required: every finished response is a valid call of a listed tool; streamed deltas reassemble", async () => {
    const validate = { get_weather: ajv.compile(weather.function.parameters), get_time: ajv.compile(time.function.parameters) };
    let calls = 0;
    for (let seed = 1; seed <= 6; seed++) {
      const body = { model: MODEL, messages: [{ role: "user" as const, content: "Weather in Oslo?" }], tools: [weather, time], tool_choice: "required" as const, temperature: 1, seed, max_tokens: 120 };
      const r = await fx.client.chat.completions.create(body);
      const choice = r.choices[0]!;
      if (choice.finish_reason === "length") continue;
      expect(choice.finish_reason).toBe("tool_calls");
      expect(choice.message.tool_calls!.length).toBeGreaterThan(0);
      for (const call of choice.message.tool_calls!) {
        if (call.type !== "function") throw new Error("not a function call");
        expect(call.id).toMatch(/^call_[0-9A-Za-z]{24}$/);
        const name = call.function.name as keyof typeof validate;
        expect(Object.keys(validate)).toContain(name);
        expect(validate[name](JSON.parse(call.function.arguments))).toBe(true);
        calls++;
      }
      // Streaming: ids and names first, then argument fragments, reassembling to the same calls.
      const assembled: { name: string; arguments: string }[] = [];
      let finish: string | null = null;
      let content = "";
      for await (const c of await fx.client.chat.completions.create({ ...body, stream: true })) {
        const d = c.choices[0];
        if (!d) continue;
        content += d.delta.content ?? "";
        finish = d.finish_reason ?? finish;
        for (const t of d.delta.tool_calls ?? []) {
          if (t.id) {
            expect(t.function?.name).toBeTruthy();
            assembled[t.index] = { name: t.function!.name!, arguments: "" };
          }
          assembled[t.index]!.arguments += t.function?.arguments ?? "";
        }
      }
      expect(finish).toBe("tool_calls");
      expect(content).not.toContain("<tool_call>");
      expect(assembled).toEqual(choice.message.tool_calls!.map((c) => ({ name: (c as { function: { name: string } }).function.name, arguments: (c as { function: { arguments: string } }).function.arguments })));
    }
    expect(calls).toBeGreaterThanOrEqual(6);
  }, 90_000);

  test("a named tool_choice calls exactly that function", async () => {
    const r = await fx.client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "time?" }], tools: [weather, time], tool_choice: { type: "function", function: { name: "get_time" } }, temperature: 0, max_tokens: 200 });
    const c = r.choices[0]!;
    if (c.finish_reason !== "length") {
      expect(c.message.tool_calls).toHaveLength(1);
      const call = c.message.tool_calls![0] as { function: { name: string; arguments: string } };
      expect(call.function.name).toBe("get_time");
      expect(typeof JSON.parse(call.function.arguments).tz).toBe("string");
    }
  });

  test("tool_choice none: no tool calls, ever", async () => {
    for (let seed = 1; seed <= 3; seed++) {
      const r = await fx.client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "x" }], tools: [weather], tool_choice: "none", temperature: 1, seed, max_tokens: 30, logit_bias: { 151657: 100 } });
      expect(r.choices[0]!.message.tool_calls).toBeUndefined();
      expect(r.choices[0]!.finish_reason).not.toBe("tool_calls");
    }
  });

  test("the openai client's zodFunction tool helpers", async () => {
    const tool = zodFunction({ name: "lookup", parameters: z.object({ q: z.string().max(8) }) });
    let parsed = 0;
    for (let seed = 1; seed <= 6 && parsed === 0; seed++) {
      const body = { model: MODEL, messages: [{ role: "user" as const, content: "look it up" }], tools: [tool], tool_choice: "required" as const, parallel_tool_calls: false, temperature: 1, seed, max_tokens: 200 };
      // parse() refuses truncated answers; a random-weights model sometimes runs out of tokens.
      const raw = await fx.client.chat.completions.create(body);
      if (raw.choices[0]!.finish_reason === "length") continue;
      const r = await fx.client.chat.completions.parse(body);
      const call = r.choices[0]!.message.tool_calls![0]! as { function: { name: string; parsed_arguments: { q: string } } };
      expect(call.function.name).toBe("lookup");
      expect(typeof call.function.parsed_arguments.q).toBe("string");
      expect(r.choices[0]!.message.tool_calls).toHaveLength(1);
      parsed++;
    }
    expect(parsed).toBe(1);
  });

  test("assistant tool_calls and tool results in the history are accepted", async () => {
    const r = await fx.client.chat.completions.create({
      model: MODEL,
      max_tokens: 5,
      tools: [weather],
      messages: [
        { role: "user", content: "Weather?" },
        { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Oslo","unit":"C"}' } }] },
        { role: "tool", tool_call_id: "call_1", content: "12 degrees" },
      ],
    });
    expect(r.choices[0]!.finish_reason).toBeDefined();
  });
});
