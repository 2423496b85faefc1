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
