// The Grafana dashboard of docs/OPERATIONS.md: the JSON in docs/grafana is its build script's
// output, and every metric its queries name is one that /metrics exposes (a renamed metric
// would otherwise leave a panel empty without a word).
import { expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { DASHBOARD_PATH, dashboardText, ROWS } from "../../docs/grafana/build.ts";
import { HttpMetrics, metricsText } from "../../src/api/metrics.ts";
import { tracingSettings } from "../../src/api/tracing/settings.ts";
import { Tracing } from "../../src/api/tracing/tracer.ts";
import type { Engine } from "../../src/engine/types.ts";
import { silentLogger } from "../../src/log.ts";

test("docs/grafana/sluice-dashboard.json is what docs/grafana/build.ts writes", () => {
  expect(readFileSync(DASHBOARD_PATH, "utf8")).toBe(dashboardText());
});

test("every metric the dashboard queries is exposed by /metrics", async () => {
  // An engine with the residency summary, as the server's: every family prints its HELP line.
  const engine = { stats: () => ({ models: [], workers: [] }), residency: () => ({ budgetBytes: 0, usedBytes: 0, models: [] }) } as unknown as Engine;
  const tracing = new Tracing(tracingSettings({ endpoint: "http://127.0.0.1:9" }, {})!, { version: "test", nodeId: "node_test" }, silentLogger());
  const text = metricsText(engine, new HttpMetrics(), tracing);
  await tracing.shutdown(100);
  const exposed = new Set([...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].flatMap(([, name, type]) => (type === "histogram" ? [`${name}_bucket`, `${name}_sum`, `${name}_count`] : [name!])));
  const queried = new Set(ROWS.flatMap((r) => r.panels.flatMap((p) => p.targets.flatMap((t) => [...t.expr.matchAll(/\b(sluice_[a-z_]+)\b/g)].map((m) => m[1]!)))));
  expect(queried.size).toBeGreaterThan(20);
  expect([...queried].filter((m) => !exposed.has(m))).toEqual([]);
  // The model variable reads a metric every served model has, loaded or not.
  expect(exposed.has("sluice_model_weights_bytes")).toBe(true);
});
