// OpenTelemetry traces of chat requests, received by a real OTLP/HTTP collector the test starts
// (it decodes the protobuf): a streamed request that brings a traceparent gives one trace under
// it, with the request's steps as spans linked to their parents and the GenAI attributes; its
// response names the trace. No prompt or completion text, and no key, reaches any span unless the
// server runs with --trace-content.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { linkModelForSpec } from "../helpers/models.ts";
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from "../helpers/otlp-receiver.ts";
import { tempDir } from "../helpers/paths.ts";
import { startTestServer, type TestServer } from "../helpers/server.ts";

const MODEL = "scripted/loop";
/** Only the schema test uses it: its first request waits for it to load. */
const COLD = "scripted/loop-cold";
/** The script loops "Hi there friend" for as long as max_tokens allows. */
const script = { chains: [["\n", "Hi", " there", " friend", "Hi"]] };
const MARKER = "zebra-quartz-7781";

let models: ReturnType<typeof tempDir>;
let collector: OtlpReceiver;
let plain: TestServer;
let content: TestServer;

beforeAll(async () => {
  models = tempDir("sluice-tracing-models-");
  await linkModelForSpec(models.path, "loop", { preset: "tiny-qwen3", id: MODEL, script });
  await linkModelForSpec(models.path, "loop-cold", { preset: "tiny-qwen3", id: COLD, script });
  collector = startOtlpReceiver();
  const tracing = { tracesEndpoint: `${collector.url}/v1/traces`, batch: { scheduledDelayMillis: 20 } };
  plain = await startTestServer({ modelsDir: models.path, tracing, engine: { speculate: "off" } });
  content = await startTestServer({ modelsDir: models.path, tracing: { ...tracing, traceContent: true, serviceName: "sluice-content" }, engine: { speculate: "off" } });
}, 120_000);

afterAll(async () => {
  await plain?.cleanup();
  await content?.cleanup();
  collector?.stop();
  models?.remove();
});

const randomHex = (bytes: number) => Buffer.from(crypto.getRandomValues(new Uint8Array(bytes))).toString("hex");

async function chat(server: TestServer, body: Record<string, unknown>, headers: Record<string, string> = {}) {
  const res = await fetch(`${server.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${server.key}`, "content-type": "application/json", ...headers },
    body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "Say hi" }], max_tokens: 7, temperature: 0, ...body }),
  });
  return { res, text: await res.text() };
}

/** The spans of a trace once its server span (the last to end) has arrived. */
const traceOf = async (traceId: string, names: string[] = []) => {
  await collector.waitFor((spans) => {
    const mine = spans.filter((s) => s.traceId === traceId);
    return mine.some((s) => s.kind === 2) && names.every((n) => mine.some((s) => s.name === n));
  });
  return collector.trace(traceId);
};

const one = (spans: ReceivedSpan[], name: string) => {
  const found = spans.filter((s) => s.name === name);
  expect(found.map((s) => s.name)).toEqual([name]);
  return found[0]!;
};

describe("traces of chat requests", () => {
  test("a streamed request with a traceparent: one trace under it, each step a span under its parent, GenAI attributes", async () => {
    const traceId = randomHex(16);
    const parentId = randomHex(8);
    const { res, text } = await chat(plain, { stream: true, stream_options: { include_usage: true } }, { traceparent: `00-${traceId}-${parentId}-01`, "x-request-id": "trace-test-1" });
    expect(res.status).toBe(200);
    // The response names the trace it continued.
    expect(res.headers.get("x-trace-id")).toBe(traceId);
    expect(res.headers.get("traceresponse")).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`));
    const usage = text
      .split("\n\n")
      .filter((e) => e.startsWith("data: {"))
      .map((e) => JSON.parse(e.slice(6)))
      .find((c) => c.usage)!.usage as { prompt_tokens: number; completion_tokens: number };
    expect(usage.completion_tokens).toBe(7);

    const spans = await traceOf(traceId, [`chat ${MODEL}`, "sluice.decode"]);
    const server = one(spans, "POST /v1/chat/completions");
    expect(server.parentSpanId).toBe(parentId);
    expect(server.kind).toBe(2);
    expect(server.attributes["http.response.status_code"]).toBe(200);
    expect(server.attributes["http.route"]).toBe("/v1/chat/completions");
    expect(server.attributes["sluice.request_id"]).toBe("trace-test-1");
    expect(server.resource["service.name"]).toBe("sluice");
    expect(server.resource["service.instance.id"]).toBe(plain.nodeId);
    expect(res.headers.get("traceresponse")).toContain(server.spanId);

    const auth = one(spans, "sluice.authenticate");
    const admit = one(spans, "sluice.admit");
    const gen = one(spans, `chat ${MODEL}`);
    for (const s of [auth, admit, gen]) expect(s.parentSpanId).toBe(server.spanId);
    const steps = ["sluice.prompt", "sluice.queue", "sluice.prefill", "sluice.decode"].map((n) => one(spans, n));
    for (const s of steps) expect(s.parentSpanId).toBe(gen.spanId);
    // In order, each within the request's span (clocks of two threads: a millisecond of slack).
    const [prompt, queue, prefill, decode] = steps as [ReceivedSpan, ReceivedSpan, ReceivedSpan, ReceivedSpan];
    expect(queue.start).toBeGreaterThanOrEqual(prompt.end - 1);
    expect(prefill.start).toBeCloseTo(queue.end, 3);
    expect(decode.start).toBeCloseTo(prefill.end, 3);
    expect(server.start).toBeLessThanOrEqual(auth.start + 1);
    expect(server.end).toBeGreaterThanOrEqual(decode.end - 1);
    expect(spans.every((s) => s.traceId === traceId)).toBe(true);

    expect(gen.attributes).toMatchObject({
      "gen_ai.operation.name": "chat",
      "gen_ai.request.model": MODEL,
      "gen_ai.response.model": MODEL,
      "gen_ai.response.id": "chatcmpl-trace-test-1",
      "gen_ai.request.max_tokens": 7,
      "gen_ai.request.temperature": 0,
      "gen_ai.request.stream": true,
      "gen_ai.usage.input_tokens": usage.prompt_tokens,
      "gen_ai.usage.output_tokens": 7,
      "gen_ai.usage.cache_read.input_tokens": 0,
      "gen_ai.usage.reasoning.output_tokens": 0,
      "gen_ai.response.finish_reasons": ["length"],
      "sluice.request_id": "trace-test-1",
    });
    expect(decode.attributes["gen_ai.usage.output_tokens"]).toBe(7);
    // Unsampled parents are honoured too: the trace id still comes back, nothing is recorded.
    const quiet = randomHex(16);
    const r2 = await chat(plain, {}, { traceparent: `00-${quiet}-${randomHex(8)}-00` });
    expect(r2.res.headers.get("x-trace-id")).toBe(quiet);
    expect(r2.res.headers.get("traceresponse")).toEndWith("-00");
  });

  test("a request that waits for its model to load and has a schema: the load and the compilation are spans too", async () => {
    const { res } = await chat(plain, {
      model: COLD,
      response_format: { type: "json_schema", json_schema: { name: "greeting", schema: { type: "object", properties: { word: { type: "string" } }, required: ["word"] } } },
    });
    expect(res.status).toBe(200);
    const traceId = res.headers.get("x-trace-id")!;
    const spans = await traceOf(traceId, [`chat ${COLD}`, "sluice.model_load", "sluice.schema_compile"]);
    const gen = one(spans, `chat ${COLD}`);
    const load = one(spans, "sluice.model_load");
    const compile = one(spans, "sluice.schema_compile");
    expect(load.parentSpanId).toBe(gen.spanId);
    expect(compile.parentSpanId).toBe(gen.spanId);
    expect(compile.start).toBeGreaterThanOrEqual(load.end - 1);
    expect(gen.attributes["gen_ai.output.type"]).toBe("json");
    // A second request finds it loaded: no load span.
    const again = await chat(plain, { model: COLD });
    const later = await traceOf(again.res.headers.get("x-trace-id")!, [`chat ${COLD}`]);
    expect(later.some((s) => s.name === "sluice.model_load")).toBe(false);
  }, 60_000); // a cold load and a compilation: seconds on a busy machine, past the default 5 s

  test("a refused request is traced with its error code: a bad key fails authentication", async () => {
    const res = await fetch(`${plain.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: "Bearer sk-sluice-not-a-key", "content-type": "application/json" },
      body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hi" }] }),
    });
    expect(res.status).toBe(401);
    const spans = await traceOf(res.headers.get("x-trace-id")!, ["sluice.authenticate"]);
    const server = one(spans, "POST /v1/chat/completions");
    expect(server.attributes["http.response.status_code"]).toBe(401);
    expect(server.attributes["error.type"]).toBe("invalid_api_key");
    expect(one(spans, "sluice.authenticate").status.code).toBe(2);
  });
});

describe("no prompt text, completion text or key in spans unless --trace-content", () => {
  const body = {
    messages: [
      { role: "system", content: `You are ${MARKER}-system.` },
      { role: "user", content: `Tell me about ${MARKER}-user.` },
    ],
    tools: [{ type: "function", function: { name: "lookup", description: `Looks ${MARKER}-tool up`, parameters: { type: "object", properties: {} } } }],
    tool_choice: "none",
    stop: [`${MARKER}-stop`],
    user: `${MARKER}-enduser`,
    metadata: { note: `${MARKER}-meta` },
    max_tokens: 5,
  };

  test("off: the spans carry counts and ids, never the conversation, the answer or the key", async () => {
    const { res, text } = await chat(plain, body);
    expect(res.status).toBe(200);
    const answer = JSON.parse(text).choices[0].message.content as string;
    expect(answer).toBe("Hi there friendHi there");
    const spans = await traceOf(res.headers.get("x-trace-id")!, [`chat ${MODEL}`, "sluice.decode"]);
    expect(spans.length).toBeGreaterThanOrEqual(7);
    for (const s of spans) {
      expect(s.raw).not.toContain(MARKER);
      expect(s.raw).not.toContain("there friend");
      expect(s.raw).not.toContain(plain.key);
      expect(s.raw).not.toContain(plain.key.slice(0, 16));
    }
    const gen = one(spans, `chat ${MODEL}`);
    expect(gen.attributes["gen_ai.input.messages"]).toBeUndefined();
    expect(gen.attributes["gen_ai.output.messages"]).toBeUndefined();
    expect(one(spans, "POST /v1/chat/completions").attributes["sluice.api_key.id"]).toBeUndefined();
  });

  test("on: the conversation and the answer are in the GenAI span (the key's id too, never the key)", async () => {
    const { res, text } = await chat(content, body);
    expect(res.status).toBe(200);
    const answer = JSON.parse(text).choices[0].message.content as string;
    const spans = await traceOf(res.headers.get("x-trace-id")!, [`chat ${MODEL}`]);
    const gen = one(spans, `chat ${MODEL}`);
    expect(gen.resource["service.name"]).toBe("sluice-content");
    const input = JSON.parse(String(gen.attributes["gen_ai.input.messages"]));
    expect(input).toEqual([
      { role: "system", parts: [{ type: "text", content: `You are ${MARKER}-system.` }] },
      { role: "user", parts: [{ type: "text", content: `Tell me about ${MARKER}-user.` }] },
    ]);
    expect(JSON.parse(String(gen.attributes["gen_ai.output.messages"]))).toEqual([{ role: "assistant", parts: [{ type: "text", content: answer }], finish_reason: "length" }]);
    expect(String(gen.attributes["gen_ai.tool.definitions"])).toContain(`${MARKER}-tool`);
    expect(gen.attributes["gen_ai.request.stop_sequences"]).toEqual([`${MARKER}-stop`]);
    expect(String(one(spans, "POST /v1/chat/completions").attributes["sluice.api_key.id"])).toMatch(/\S/);
    for (const s of spans) expect(s.raw).not.toContain(content.key);
  });
});
