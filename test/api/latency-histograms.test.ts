// The latency histograms through the real server, with a scripted model that makes exactly the
// tokens asked for (speculation off: one token per step): each request adds one observation of
// end-to-end, queue and prefill time, one gap per token after each choice's first, and one time
// per output token per choice, to its model's series alone.
import { expect, test } from "bun:test";
import { linkModelForSpec } from "../helpers/models.ts";
import { serverFixture } from "../helpers/server.ts";

const MODEL = "scripted/histograms";
const OTHER = "scripted/histograms-other";
const script = { chains: [["\n", "Hi", " there", " friend", "Hi"]] };

const fx = serverFixture(
  async (dir) => {
    await linkModelForSpec(dir, "hist", { preset: "tiny-qwen3", id: MODEL, script });
    await linkModelForSpec(dir, "hist-other", { preset: "tiny-qwen3", id: OTHER, script });
  },
  { engine: { speculate: "off" } },
);

async function scrape(): Promise<(series: string) => number> {
  const text = await (await fetch(`${fx.server.url}/metrics`)).text();
  return (series) => {
    const line = text.split("\n").find((l) => l.startsWith(`${series} `));
    return line ? Number(line.slice(series.length + 1)) : 0;
  };
}

const SERIES = ["sluice_request_duration_seconds", "sluice_request_queue_seconds", "sluice_prefill_seconds", "sluice_inter_token_latency_seconds", "sluice_time_per_output_token_seconds"];

test("each generation moves its model's histograms by its tokens: n=2 × 7 tokens gives 12 gaps and 2 times per token", async () => {
  const count = (read: (s: string) => number, model: string) => Object.fromEntries(SERIES.map((s) => [s, read(`${s}_count{model="${model}"}`)]));
  const before = await scrape();
  const r = await fx.client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "Say hi" }], max_tokens: 7, n: 2, temperature: 0 });
  expect(r.choices.map((c) => c.finish_reason)).toEqual(["length", "length"]);
  expect(r.usage!.completion_tokens).toBe(14);
  const stream = await fx.client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "Say hi" }], max_tokens: 4, temperature: 0, stream: true });
  for await (const _ of stream);
  const after = await scrape();
  const was = count(before, MODEL);
  const now = count(after, MODEL);
  expect(Object.fromEntries(SERIES.map((s) => [s, now[s]! - was[s]!]))).toEqual({
    sluice_request_duration_seconds: 2,
    sluice_request_queue_seconds: 2,
    sluice_prefill_seconds: 2,
    sluice_inter_token_latency_seconds: 2 * 6 + 3,
    sluice_time_per_output_token_seconds: 3,
  });
  // Sums are times, not counts: positive, and the gaps add up to no more than the requests took.
  expect(after(`sluice_inter_token_latency_seconds_sum{model="${MODEL}"}`)).toBeGreaterThan(0);
  expect(after(`sluice_inter_token_latency_seconds_sum{model="${MODEL}"}`)).toBeLessThan(2 * after(`sluice_request_duration_seconds_sum{model="${MODEL}"}`));
  // The other model's series did not move.
  expect(count(after, OTHER)).toEqual(count(before, OTHER));
});
