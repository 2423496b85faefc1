// Builds docs/grafana/sluice-dashboard.json, the Grafana dashboard of docs/OPERATIONS.md, from the
// panels below (each a PromQL query over what /metrics exposes; test/api/dashboard.test.ts checks
// every metric it names exists and that the JSON is this script's output):
//   bun docs/grafana/build.ts
import { writeFileSync } from "node:fs";
import { join } from "node:path";

interface Target {
  expr: string;
  legend: string;
}

interface Panel {
  title: string;
  description: string;
  unit: string;
  targets: Target[];
  /** Panel width in Grafana's 24 columns (default 8). */
  width?: number;
}

const rate = (metric: string, by = "model", filter = 'model=~"$model"') => `sum by (${by}) (rate(${metric}{${filter}}[$__rate_interval]))`;
const quantiles = (metric: string, qs = [0.5, 0.95, 0.99]): Target[] =>
  qs.map((q) => ({
    expr: `histogram_quantile(${q}, sum by (le, model) (rate(${metric}_bucket{model=~"$model"}[$__rate_interval])))`,
    legend: `p${Math.round(q * 100)} {{model}}`,
  }));
const CHAT = 'route="/v1/chat/completions"';

/** Rows of panels, top to bottom: traffic and errors, latency, the engine, memory and workers, tracing. */
export const ROWS: { title: string; panels: Panel[] }[] = [
  {
    title: "Traffic and errors",
    panels: [
      { title: "Chat requests by status", description: "Answers of /v1/chat/completions per second.", unit: "reqps", targets: [{ expr: rate("sluice_http_requests_total", "status", CHAT), legend: "{{status}}" }] },
      {
        title: "Chat error ratio (5xx)",
        description: "Share of chat answers that were server errors: queue full, model unavailable, internal.",
        unit: "percentunit",
        targets: [{ expr: `sum(rate(sluice_http_errors_total{${CHAT},status=~"5.."}[$__rate_interval])) / sum(rate(sluice_http_requests_total{${CHAT}}[$__rate_interval]))`, legend: "5xx ratio" }],
      },
      {
        title: "Refusals",
        description: "Queue full (503), an account over its share of a queue (429), rate limits (429).",
        unit: "reqps",
        targets: [
          { expr: rate("sluice_rejected_full_total"), legend: "queue full {{model}}" },
          { expr: rate("sluice_rejected_busy_total"), legend: "account queue share {{model}}" },
          { expr: "sum(rate(sluice_rate_limited_total[$__rate_interval]))", legend: "rate limited" },
        ],
      },
    ],
  },
  {
    title: "Latency",
    panels: [
      { title: "End to end", description: "From a generation's arrival to its last token, per model.", unit: "s", targets: quantiles("sluice_request_duration_seconds") },
      { title: "Time to first token", description: "From admission to the first token.", unit: "s", targets: quantiles("sluice_time_to_first_token_seconds") },
      { title: "Queue wait", description: "Waiting for KV memory before running: grows when a model is saturated.", unit: "s", targets: quantiles("sluice_request_queue_seconds") },
      { title: "Prefill", description: "From admission to the first token: reading the prompt.", unit: "s", targets: quantiles("sluice_prefill_seconds") },
      { title: "Inter-token latency", description: "Between a stream's consecutive tokens: what a reader sees as smooth or not.", unit: "s", targets: quantiles("sluice_inter_token_latency_seconds") },
      { title: "Time per output token", description: "Per choice: decode time over its tokens after the first.", unit: "s", targets: quantiles("sluice_time_per_output_token_seconds", [0.5, 0.95]) },
    ],
  },
  {
    title: "Engine",
    panels: [
      {
        title: "Tokens per second",
        description: "Generated and prompt tokens of finished generations.",
        unit: "short",
        targets: [
          { expr: rate("sluice_completion_tokens_total"), legend: "generated {{model}}" },
          { expr: rate("sluice_prompt_tokens_total"), legend: "prompt {{model}}" },
        ],
      },
      {
        title: "Running and queued requests",
        description: "Generating now, waiting for memory, and the queue's limit (past it: 503).",
        unit: "short",
        targets: [
          { expr: 'sum by (model) (sluice_running_requests{model=~"$model"})', legend: "running {{model}}" },
          { expr: 'sum by (model) (sluice_queued_requests{model=~"$model"})', legend: "queued {{model}}" },
          { expr: 'sum by (model) (sluice_queue_limit{model=~"$model"})', legend: "queue limit {{model}}" },
        ],
      },
      {
        title: "KV cache used",
        description: "KV memory reserved and held by the prefix cache, of the model's budget.",
        unit: "percentunit",
        targets: [{ expr: 'sum by (model) (sluice_kv_used_bytes{model=~"$model"}) / sum by (model) (sluice_kv_budget_bytes{model=~"$model"})', legend: "{{model}}" }],
      },
      {
        title: "Preemptions and recomputed tokens",
        description: "Running requests preempted for memory, and the tokens computed again to resume them.",
        unit: "short",
        targets: [
          { expr: rate("sluice_preemptions_total"), legend: "preemptions/s {{model}}" },
          { expr: rate("sluice_recomputed_tokens_total"), legend: "recomputed tokens/s {{model}}" },
        ],
      },
      {
        title: "Prefix cache and speculation",
        description: "Prompt tokens served from the prefix cache, and the share of drafted tokens the model accepted.",
        unit: "short",
        targets: [
          { expr: rate("sluice_prefix_cache_reused_tokens_total"), legend: "reused prompt tokens/s {{model}}" },
          { expr: `${rate("sluice_draft_accepted_tokens_total")} / ${rate("sluice_draft_tokens_total")}`, legend: "draft acceptance {{model}}" },
        ],
      },
      { title: "Batch size", description: "Sequences in the last batched decode step.", unit: "short", targets: [{ expr: 'sum by (model) (sluice_batch_size{model=~"$model"})', legend: "{{model}}" }] },
    ],
  },
  {
    title: "Memory and workers",
    panels: [
      {
        title: "Memory budget",
        description: "Weights and KV budgets of loaded models, of --memory-budget.",
        unit: "bytes",
        targets: [
          { expr: "sluice_memory_used_bytes", legend: "used" },
          { expr: "sluice_memory_budget_bytes", legend: "budget" },
        ],
      },
      {
        title: "Models loaded and available",
        description: "1 while loaded; 1 while its worker takes requests; 1 while in a crash loop.",
        unit: "short",
        targets: [
          { expr: 'sluice_model_resident{model=~"$model"}', legend: "resident {{model}}" },
          { expr: 'sluice_model_available{model=~"$model"}', legend: "available {{model}}" },
          { expr: 'sluice_model_crash_loop{model=~"$model"}', legend: "crash loop {{model}}" },
        ],
      },
      {
        title: "Loads, evictions, worker restarts",
        description: "Per hour: models loaded, unloaded to make room, and worker threads restarted after a crash.",
        unit: "short",
        targets: [
          { expr: 'sum by (model) (increase(sluice_model_loads_total{model=~"$model"}[1h]))', legend: "loads {{model}}" },
          { expr: 'sum by (model) (increase(sluice_model_evictions_total{model=~"$model"}[1h]))', legend: "evictions {{model}}" },
          { expr: 'sum by (model) (increase(sluice_model_worker_restarts_total{model=~"$model"}[1h]))', legend: "restarts {{model}}" },
        ],
      },
    ],
  },
  {
    title: "Tracing",
    panels: [
      {
        title: "Trace spans exported and dropped",
        description: "Spans the OTLP collector took, and those dropped: its queue full, or the export failed (the collector down).",
        unit: "short",
        width: 24,
        targets: [
          { expr: "sum(rate(sluice_trace_spans_exported_total[$__rate_interval]))", legend: "exported/s" },
          { expr: "sum by (reason) (rate(sluice_trace_spans_dropped_total[$__rate_interval]))", legend: "dropped/s {{reason}}" },
        ],
      },
    ],
  },
];

const DATASOURCE = { type: "prometheus", uid: "${datasource}" };

export function dashboard(): Record<string, unknown> {
  const panels: Record<string, unknown>[] = [];
  let y = 0;
  let id = 1;
  for (const row of ROWS) {
    panels.push({ type: "row", title: row.title, id: id++, collapsed: false, gridPos: { h: 1, w: 24, x: 0, y }, panels: [] });
    y += 1;
    let x = 0;
    for (const p of row.panels) {
      const w = p.width ?? 8;
      if (x + w > 24) {
        x = 0;
        y += 8;
      }
      panels.push({
        type: "timeseries",
        id: id++,
        title: p.title,
        description: p.description,
        datasource: DATASOURCE,
        gridPos: { h: 8, w, x, y },
        fieldConfig: { defaults: { unit: p.unit, custom: { lineWidth: 1, fillOpacity: 10 } }, overrides: [] },
        options: { legend: { displayMode: "list", placement: "bottom" }, tooltip: { mode: "multi" } },
        targets: p.targets.map((t, i) => ({ datasource: DATASOURCE, expr: t.expr, legendFormat: t.legend, refId: String.fromCharCode(65 + i) })),
      });
      x += w;
    }
    y += 8;
  }
  return {
    title: "Sluice",
    uid: "sluice-overview",
    description: "Sluice's /metrics: traffic, latency per model (end to end, queue, prefill, inter-token, per output token), the engine, memory and tracing. See docs/OPERATIONS.md.",
    tags: ["sluice", "llm"],
    timezone: "browser",
    schemaVersion: 39,
    version: 1,
    editable: true,
    refresh: "30s",
    time: { from: "now-6h", to: "now" },
    templating: {
      list: [
        { name: "datasource", label: "Prometheus", type: "datasource", query: "prometheus", current: {}, hide: 0 },
        {
          name: "model",
          label: "Model",
          type: "query",
          datasource: DATASOURCE,
          query: { query: "label_values(sluice_model_weights_bytes, model)", refId: "models" },
          definition: "label_values(sluice_model_weights_bytes, model)",
          includeAll: true,
          multi: true,
          allValue: ".*",
          current: { text: "All", value: "$__all" },
          refresh: 2,
          hide: 0,
        },
      ],
    },
    panels,
  };
}

export const DASHBOARD_PATH = join(import.meta.dir, "sluice-dashboard.json");
export const dashboardText = () => JSON.stringify(dashboard(), null, 2) + "\n";

if (import.meta.main) {
  writeFileSync(DASHBOARD_PATH, dashboardText());
  console.log(`wrote ${DASHBOARD_PATH}`);
}
