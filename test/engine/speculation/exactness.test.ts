// Speculative decoding changes nothing a client sees: the same requests through the scheduler
// with verification at every round ("always": drafts are checked whatever they cost) and with
// speculation off give the same events, token for token, greedy and seeded, alone and batched,
// on both KV caches (in place for GroupQueryAttention graphs, split or gathered; padded for
// standard ones), with every logits processor. Rejections must happen for that to mean anything:
// each model's counters show drafts both accepted and refused.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import type { GenerationEvent } from "../../../src/engine/types.ts";
import { importLlama2c } from "../../../src/modelkit/index.ts";
import { syntheticModel, tinyModelsRoot } from "../../helpers/models.ts";
import { hasStories, STORIES_DIR, tempDir } from "../../helpers/paths.ts";
import { comparable, SchedulerHarness, textOf, type TestRequest } from "./harness.ts";

if (!hasStories) console.warn(`skipping the stories260K speculation cases: ${STORIES_DIR} is absent`);

const PROMPTS = [
  "Once upon a time",
  "Lily and Tom went to the park. Lily and Tom went to the park. Lily and Tom",
  "One day",
  "The cat sat on the mat. The cat sat on the mat. The cat sat on the",
  "Tom had a red ball. He liked to play with the ball.",
  "Sue said hello",
  "A big dog and a small dog. A big dog and a small dog.",
  "The sun was hot",
];
const LENGTHS = [1, 2, 3, 9, 40, 150];

/**
 * Same events with speculation at every round and with it off, per choice (a choice may advance
 * by several tokens in a round, so choices' events interleave differently); logprob values to
 * float tolerance.
 */
function expectSameEvents(on: GenerationEvent[], off: GenerationEvent[]) {
  const byChoice = (events: GenerationEvent[]) => {
    const out = new Map<number, GenerationEvent[]>();
    for (const e of events) {
      const index = "index" in e ? e.index : -1;
      out.set(index, [...(out.get(index) ?? []), e]);
    }
    return [...out.entries()].sort((a, b) => a[0] - b[0]);
  };
  const [a, b] = [byChoice(on), byChoice(off)];
  expect(a.map(([i]) => i)).toEqual(b.map(([i]) => i));
  a.forEach(([, events], i) => expectSameChoiceEvents(events, b[i]![1]));
}

function expectSameChoiceEvents(on: GenerationEvent[], off: GenerationEvent[]) {
  const values: [number, number][] = [];
  const strip = (events: GenerationEvent[], into: number[]) =>
    comparable(events).map((e) => {
      const c = e as GenerationEvent;
      if (c.type !== "content" || !c.logprobs) return c;
      const logprobs = c.logprobs.map((l) => {
        into.push(l.logprob, ...l.top_logprobs.map((t) => t.logprob));
        return { ...l, logprob: 0, top_logprobs: l.top_logprobs.map((t) => ({ ...t, logprob: 0 })) };
      });
      return { ...c, logprobs };
    });
  const [a, b]: number[][] = [[], []];
  expect(strip(on, a)).toEqual(strip(off, b));
  a.forEach((x, i) => values.push([x, b[i]!]));
  for (const [x, y] of values) expect(Math.abs(x - y)).toBeLessThan(1e-3);
}

interface Pair {
  on: SchedulerHarness;
  off: SchedulerHarness;
}

async function pairFor(dir: string, id: string): Promise<Pair> {
  const runner = await SchedulerHarness.load(dir, id);
  return { on: new SchedulerHarness(runner, { speculate: "ngram", speculatePolicy: "always" }), off: new SchedulerHarness(runner, { speculate: "off" }) };
}

async function closePair(p: Pair | undefined) {
  if (!p) return;
  p.on.stop();
  p.off.stop();
  await p.on.runner.decoder.release();
}

/** Each request alone on both, in turn; returns the outcomes of the speculating one. */
async function same(p: Pair, requests: TestRequest[]): Promise<GenerationEvent[][]> {
  const out: GenerationEvent[][] = [];
  for (const r of requests) {
    const off = await p.off.run(r);
    const on = await p.on.run(r);
    expect(on.error).toBeUndefined();
    expect(off.error).toBeUndefined();
    expectSameEvents(on.events, off.events);
    out.push(on.events);
  }
  return out;
}

function expectDraftsAcceptedAndRefused(p: Pair) {
  const s = p.on.scheduler.stats();
  expect(s.acceptedDraftTokens).toBeGreaterThan(0);
  expect(s.draftTokens).toBeGreaterThan(s.acceptedDraftTokens);
  expect(p.off.scheduler.stats().draftTokens).toBe(0);
}

const root = tempDir("sluice-speculation-");
afterAll(() => root.remove());

const MODELS: { name: string; build: () => Promise<string> }[] = [
  ...(hasStories
    ? (["fused", "standard"] as const).map((variant) => ({
        name: `stories260K ${variant}`,
        build: async () => {
          const out = join(root.path, `stories-${variant}`);
          await importLlama2c(join(STORIES_DIR, "stories260K.bin"), join(STORIES_DIR, "tok512.bin"), { id: `stories-${variant}`, outDir: out, variant });
          return out;
        },
      }))
    : []),
  // A random-weights model in each layout, and a float16 one (its in-place cache takes the new
  // positions gathered from GroupQueryAttention's presents, one row per verification run).
  ...(["fused", "standard"] as const).map((variant) => ({
    name: `tiny-bytes ${variant}`,
    build: () => syntheticModel(tinyModelsRoot(), `spec-tiny-${variant}`, { preset: "tiny-bytes", id: `spec-tiny-${variant}`, variant, seed: 11 }),
  })),
  {
    name: "tiny-bytes fused float16",
    build: () => syntheticModel(tinyModelsRoot(), "spec-tiny-half", { preset: "tiny-bytes", id: "spec-tiny-half", variant: "fused", dtype: "float16", seed: 11 }),
  },
];

for (const model of MODELS) {
  describe(`speculation on ${model.name}`, () => {
    let p: Pair;
    beforeAll(async () => {
      p = await pairFor(await model.build(), model.name);
    }, 120_000);
    afterAll(() => closePair(p));

    test("greedy: the same events alone, over many prompts and lengths", async () => {
      const requests = PROMPTS.flatMap((content, i) => [{ content, maxTokens: LENGTHS[i % LENGTHS.length] }, { content, maxTokens: 150 }]);
      const outs = await same(p, requests);
      expect(outs.some((e) => textOf(e).length > 40)).toBe(true);
      expectDraftsAcceptedAndRefused(p);
    }, 120_000);

    test("greedy: the same events batched (rows of different widths in one verification run)", async () => {
      const requests = PROMPTS.map((content, i) => ({ content, maxTokens: 20 + ((i * 37) % 90) }));
      const alone: GenerationEvent[][] = [];
      for (const r of requests) alone.push((await p.off.run(r)).events);
      const started = await Promise.all(requests.map((r) => p.on.start(r)));
      const together = await Promise.all(started.map((s) => s.done));
      together.forEach((o, i) => expectSameEvents(o.events, alone[i]!));
    }, 120_000);

    test("seeded sampling: the same tokens, with top_p, top_k, min_p and n = 3", async () => {
      const requests: TestRequest[] = PROMPTS.slice(0, 4).flatMap((content, i) => [
        { content, maxTokens: 60, sampling: { temperature: 0.8, topP: 0.95, seed: 100 + i } },
        { content, maxTokens: 60, sampling: { temperature: 1.2, topK: 20, minP: 0.02, seed: 200 + i } },
        { content, maxTokens: 30, n: 3, sampling: { temperature: 0.7, seed: 300 + i } },
      ]);
      await same(p, requests);
    }, 120_000);
  });
}

describe("every logits processor under speculation (tiny-bytes fused)", () => {
  let p: Pair;
  beforeAll(async () => {
    const dir = await syntheticModel(tinyModelsRoot(), "spec-tiny-fused", { preset: "tiny-bytes", id: "spec-tiny-fused", variant: "fused", seed: 11 });
    p = await pairFor(dir, "spec-tiny-fused");
  }, 120_000);
  afterAll(() => closePair(p));
  const content = PROMPTS[1]!;

  test("presence and frequency penalties count the tokens as of each position", async () => {
    await same(p, [
      { content, maxTokens: 80, sampling: { presencePenalty: 0.8, frequencyPenalty: 0.6 } },
      { content, maxTokens: 80, sampling: { temperature: 0.9, frequencyPenalty: 1.5, seed: 5 } },
      { content, maxTokens: 80, sampling: { presencePenalty: -1, frequencyPenalty: -0.5 } },
    ]);
    expectDraftsAcceptedAndRefused(p);
  }, 60_000);

  test("logit_bias", async () => {
    const greedy = (await p.off.run({ content, maxTokens: 30 })).events;
    expect(textOf(greedy).length).toBeGreaterThan(0);
    await same(p, [
      { content, maxTokens: 60, sampling: { logitBias: { 100: 5, 101: -100, 300: 3 } } },
      { content, maxTokens: 60, sampling: { temperature: 1, seed: 9, logitBias: { 120: 4, 121: 4 } } },
    ]);
  }, 60_000);

  test("stop strings end the answer at the same place, never past it", async () => {
    const text = textOf((await p.off.run({ content, maxTokens: 60 })).events);
    // Stops taken from the middle of the greedy text, and ones that never occur.
    const stops = [text.slice(10, 13), text.slice(25, 27), "zzzqqq"].filter((s) => s.length > 0);
    const outs = await same(p, [{ content, maxTokens: 60, stop: stops.slice(0, 1) }, { content, maxTokens: 60, stop: stops }, { content, maxTokens: 60, stop: ["zzzqqq"] }]);
    expect(textOf(outs[0]!).length).toBeLessThan(text.length);
  }, 60_000);

  test("logprobs: one entry per accepted token, as without speculation", async () => {
    const outs = await same(p, [
      { content, maxTokens: 50, logprobs: true, topLogprobs: 5 },
      { content, maxTokens: 50, logprobs: true, topLogprobs: 0, sampling: { temperature: 1, seed: 3 } },
    ]);
    for (const events of outs) {
      const entries = events.flatMap((e) => (e.type === "content" ? (e.logprobs ?? []) : []));
      const finish = events.find((e) => e.type === "finish") as Extract<GenerationEvent, { type: "finish" }>;
      // The end token is counted but carries no entry.
      expect(entries.length === finish.completionTokens || entries.length === finish.completionTokens - 1).toBe(true);
    }
  }, 60_000);

  test("max_tokens: each verified position has its own remaining budget", async () => {
    await same(p, [1, 2, 3, 4, 5, 8, 9, 10].map((maxTokens) => ({ content, maxTokens })));
    await same(p, [1, 2, 3, 7].map((maxTokens) => ({ content, maxTokens, n: 2, sampling: { temperature: 1, seed: maxTokens } })));
  }, 60_000);

  test("structured output: the grammar advances over the accepted tokens only", async () => {
    const schema = {
      type: "object",
      properties: { name: { type: "string", maxLength: 12 }, tags: { type: "array", items: { enum: ["a", "b", "c"] }, maxItems: 4 } },
      required: ["name", "tags"],
      additionalProperties: false,
    };
    const outs = await same(p, [
      { content, maxTokens: 120, responseFormat: { type: "json_schema", json_schema: { name: "out", schema, strict: true } } },
      { content, maxTokens: 120, responseFormat: { type: "json_schema", json_schema: { name: "out", schema, strict: true } }, sampling: { temperature: 1, seed: 4 } },
      { content, maxTokens: 80, responseFormat: { type: "json_object" }, sampling: { temperature: 0.8, seed: 6 } },
    ] as TestRequest[]);
    expect(() => JSON.parse(textOf(outs[0]!))).not.toThrow();
  }, 60_000);

  test("structured output at tight budgets: each verified position masks with its own remaining budget", async () => {
    const schema = { type: "object", properties: { name: { type: "string" }, n: { type: "integer" } }, required: ["name", "n"], additionalProperties: false };
    const responseFormat = { type: "json_schema", json_schema: { name: "out", schema, strict: true } };
    let completed = 0;
    for (const maxTokens of [6, 9, 12, 15, 18, 24, 32]) {
      for (const sampling of [{}, { temperature: 1, seed: maxTokens }]) {
        const r = { content, maxTokens, responseFormat, sampling } as TestRequest;
        // A budget below the shortest document is refused at admission, with or without speculation alike.
        const [off, on] = await Promise.all([p.off.run(r).catch((e: Error) => e), p.on.run(r).catch((e: Error) => e)]);
        if (off instanceof Error || on instanceof Error) {
          expect(String(on)).toBe(String(off));
          continue;
        }
        expectSameEvents(on.events, off.events);
        const finish = on.events.find((e) => e.type === "finish") as { reason: string };
        if (finish.reason === "stop") {
          expect(() => JSON.parse(textOf(on.events))).not.toThrow();
          completed++;
        }
      }
    }
    expect(completed).toBeGreaterThan(4);
  }, 60_000);

  test("tool calls: forced and strict, the same calls and arguments", async () => {
    const tools = [
      {
        type: "function" as const,
        function: { name: "lookup", parameters: { type: "object", properties: { q: { type: "string", maxLength: 10 } }, required: ["q"], additionalProperties: false }, strict: true },
      },
    ];
    const outs = await same(p, [
      { content, maxTokens: 100, tools, toolChoice: "required" },
      { content, maxTokens: 100, tools, toolChoice: { type: "function", function: { name: "lookup" } }, sampling: { temperature: 1, seed: 8 } },
    ] as TestRequest[]);
    expect(outs[0]!.some((e) => e.type === "tool_call")).toBe(true);
  }, 60_000);
});
