// HttpMetrics as Prometheus reads it: counters per route, method and status through the handles
// the hot path keeps, and latency histograms whose buckets are cumulative although each
// observation touches one slot.
import { expect, test } from "bun:test";
import { HttpMetrics } from "../../src/api/metrics.ts";

function value(text: string, series: string): number {
  const line = text.split("\n").find((l) => l.startsWith(series + " "));
  if (!line) throw new Error(`no series ${series} in:\n${text}`);
  return Number(line.slice(series.length + 1));
}

test("histogram buckets are cumulative, +Inf and _count equal the observations, _sum adds them", () => {
  const m = new HttpMetrics();
  const seconds = [0.0005, 0.001, 0.002, 0.004, 0.03, 0.3, 7, 400];
  for (const s of seconds) m.request("/v1/models", "GET", 200, s);
  const text = m.text();
  const h = (le: string) => value(text, `sluice_http_request_duration_seconds_bucket{route="/v1/models",le="${le}"}`);
  expect(h("0.001")).toBe(2); // 0.0005 and exactly 0.001
  expect(h("0.0025")).toBe(3);
  expect(h("0.005")).toBe(4);
  expect(h("0.05")).toBe(5);
  expect(h("0.5")).toBe(6);
  expect(h("10")).toBe(7);
  expect(h("300")).toBe(7); // 400 s is above the last finite bucket
  expect(h("+Inf")).toBe(8);
  expect(value(text, `sluice_http_request_duration_seconds_count{route="/v1/models"}`)).toBe(8);
  expect(value(text, `sluice_http_request_duration_seconds_sum{route="/v1/models"}`)).toBeCloseTo(seconds.reduce((a, b) => a + b, 0), 9);
  // Buckets never decrease.
  const buckets = text.split("\n").filter((l) => l.startsWith("sluice_http_request_duration_seconds_bucket")).map((l) => Number(l.split(" ")[1]));
  for (let i = 1; i < buckets.length; i++) expect(buckets[i]!).toBeGreaterThanOrEqual(buckets[i - 1]!);
});

test("a counter handle and request() count into the same series; label sets appear only once used", () => {
  const m = new HttpMetrics();
  const ok = m.counter("/v1/models", "GET", 200);
  m.counter("/v1/integrations", "GET", 200); // never used
  expect(m.text()).not.toContain('route="/v1/models"');
  ok.add(0.001);
  ok.add(0.001);
  m.request("/v1/models", "GET", 200, 0.001);
  m.request("/v1/models", "GET", 401, 0.001);
  m.request("/health", "GE\"T", 200, 0.001);
  const text = m.text();
  expect(text).not.toContain('route="/v1/integrations"');
  expect(value(text, 'sluice_http_requests_total{route="/v1/models",method="GET",status="200"}')).toBe(3);
  expect(value(text, 'sluice_http_requests_total{route="/v1/models",method="GET",status="401"}')).toBe(1);
  expect(value(text, 'sluice_http_requests_total{route="/health",method="GE\\"T",status="200"}')).toBe(1);
  expect(value(text, 'sluice_http_request_duration_seconds_count{route="/v1/models"}')).toBe(4);
});

test("a generation's times land in its model's histograms: end to end, queue, prefill, each gap between tokens, time per output token", () => {
  const m = new HttpMetrics();
  const t = 1_800_000_000_000;
  m.generationTimes("m/one", 1.7, {
    queue: { start: t, end: t + 300 },
    prefill: { start: t + 300, end: t + 340 },
    decode: { start: t + 340, end: t + 400 },
    interTokenSeconds: [0.012, 0.012, 0.036],
    timePerOutputTokenSeconds: [0.02],
    preemptions: 0,
  });
  // Cut short before its first token: its prefill says nothing of prompts and is left out.
  m.generationTimes("m/one", 0.2, { queue: { start: t, end: t + 2 }, prefill: { start: t + 2, end: t + 9 }, interTokenSeconds: [], timePerOutputTokenSeconds: [], preemptions: 0 });
  // An engine that does not measure: end to end only.
  m.generationTimes("m/two", 0.04, undefined);
  const text = m.text();
  const v = (series: string) => value(text, series);
  expect(v('sluice_request_duration_seconds_count{model="m/one"}')).toBe(2);
  expect(v('sluice_request_duration_seconds_bucket{model="m/one",le="1"}')).toBe(1);
  expect(v('sluice_request_duration_seconds_bucket{model="m/one",le="2.5"}')).toBe(2);
  expect(v('sluice_request_duration_seconds_sum{model="m/one"}')).toBeCloseTo(1.9, 9);
  expect(v('sluice_request_queue_seconds_count{model="m/one"}')).toBe(2);
  expect(v('sluice_request_queue_seconds_bucket{model="m/one",le="0.005"}')).toBe(1);
  expect(v('sluice_request_queue_seconds_bucket{model="m/one",le="0.25"}')).toBe(1);
  expect(v('sluice_request_queue_seconds_bucket{model="m/one",le="0.5"}')).toBe(2);
  expect(v('sluice_prefill_seconds_count{model="m/one"}')).toBe(1);
  expect(v('sluice_prefill_seconds_bucket{model="m/one",le="0.025"}')).toBe(0);
  expect(v('sluice_prefill_seconds_bucket{model="m/one",le="0.05"}')).toBe(1);
  expect(v('sluice_inter_token_latency_seconds_count{model="m/one"}')).toBe(3);
  expect(v('sluice_inter_token_latency_seconds_bucket{model="m/one",le="0.01"}')).toBe(0);
  expect(v('sluice_inter_token_latency_seconds_bucket{model="m/one",le="0.015"}')).toBe(2);
  expect(v('sluice_inter_token_latency_seconds_bucket{model="m/one",le="0.04"}')).toBe(3);
  expect(v('sluice_time_per_output_token_seconds_bucket{model="m/one",le="0.02"}')).toBe(1);
  expect(v('sluice_request_duration_seconds_count{model="m/two"}')).toBe(1);
  expect(text).not.toContain('sluice_request_queue_seconds_count{model="m/two"}');
  // Per model only: no account or key label on any of them.
  expect(text.split("\n").filter((l) => /^sluice_(request_|prefill|inter_token|time_per)/.test(l) && /account|key/.test(l))).toEqual([]);
});
