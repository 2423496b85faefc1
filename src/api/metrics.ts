// GET /metrics: HTTP traffic (requests by route and status, latency, time to first token, tokens,
// errors, rate-limit refusals) and the engine's scheduler and KV gauges, in Prometheus' text format.
// Unauthenticated like /health: it carries counts and bytes, never prompts, keys or accounts.
import { heapSize } from "bun:jsc";
import type { Engine, GenerationTimings, ModelResidency, ModelStats, WorkerHealth } from "../engine/types.ts";

interface Metric {
  name: string;
  type: "gauge" | "counter";
  help: string;
  value: (s: ModelStats) => number;
}

const METRICS: Metric[] = [
  { name: "sluice_running_requests", type: "gauge", help: "Requests generating (prefill or decode).", value: (s) => s.runningRequests },
  { name: "sluice_running_sequences", type: "gauge", help: "Sequences (choices) holding a KV cache.", value: (s) => s.runningSequences },
  { name: "sluice_batch_size", type: "gauge", help: "Sequences in the last batched decode step.", value: (s) => s.lastBatchSize },
  { name: "sluice_queued_requests", type: "gauge", help: "Requests waiting for KV memory.", value: (s) => s.queuedRequests },
  { name: "sluice_queue_limit", type: "gauge", help: "Most requests that may wait before new ones get 503.", value: (s) => s.queueLimit },
  { name: "sluice_kv_budget_bytes", type: "gauge", help: "KV memory the model may use.", value: (s) => s.kvBudgetBytes },
  { name: "sluice_kv_used_bytes", type: "gauge", help: "KV memory reserved by sequences plus held by the prefix cache.", value: (s) => s.kvUsedBytes },
  { name: "sluice_prefix_cache_bytes", type: "gauge", help: "KV memory held by the prefix cache.", value: (s) => s.prefixCacheBytes },
  { name: "sluice_prefix_cache_entries", type: "gauge", help: "Prefixes in the prefix cache.", value: (s) => s.prefixCacheEntries },
  { name: "sluice_prefix_cache_hits_total", type: "counter", help: "Requests that reused a cached prefix.", value: (s) => s.prefixCacheHits },
  { name: "sluice_prefix_cache_reused_tokens_total", type: "counter", help: "Prompt tokens taken from the prefix cache.", value: (s) => s.prefixCacheReusedTokens },
  { name: "sluice_prompt_tokens_computed_total", type: "counter", help: "Prompt tokens run through the model.", value: (s) => s.promptTokensComputed },
  { name: "sluice_generated_tokens_total", type: "counter", help: "Tokens sampled.", value: (s) => s.generatedTokens },
  { name: "sluice_decode_steps_total", type: "counter", help: "Batched decode forward passes (verification runs included).", value: (s) => s.decodeSteps },
  { name: "sluice_rejected_busy_total", type: "counter", help: "Requests refused with 429: their account had its share of the queue waiting.", value: (s) => s.rejectedBusy },
  { name: "sluice_rejected_full_total", type: "counter", help: "Requests refused with 503: the model's queue was full.", value: (s) => s.rejectedFull },
  { name: "sluice_preemptions_total", type: "counter", help: "Running requests preempted for a higher priority or a fairer share (resumed later).", value: (s) => s.preemptions },
  { name: "sluice_recomputed_tokens_total", type: "counter", help: "Tokens computed again to resume preempted requests.", value: (s) => s.recomputedTokens },
  { name: "sluice_draft_tokens_total", type: "counter", help: "Speculated (prompt-lookup) tokens the model checked.", value: (s) => s.draftTokens },
  { name: "sluice_draft_accepted_tokens_total", type: "counter", help: "Speculated tokens the model accepted.", value: (s) => s.acceptedDraftTokens },
  { name: "sluice_grammar_cache_bytes", type: "gauge", help: "Compiled grammars kept for reuse.", value: (s) => s.grammarCacheBytes },
  { name: "sluice_schemas_compiled_total", type: "counter", help: "Schemas compiled to grammars (on the model's compile thread).", value: (s) => s.schemasCompiled },
  { name: "sluice_schemas_refused_total", type: "counter", help: "Schemas refused: unsupported, or over a compile limit.", value: (s) => s.schemasRefused },
  { name: "sluice_worker_heap_bytes", type: "gauge", help: "JavaScript heap of the model's worker thread.", value: (s) => s.workerHeapBytes },
  { name: "sluice_compile_heap_bytes", type: "gauge", help: "JavaScript heap of the model's schema compile thread.", value: (s) => s.compileHeapBytes },
  { name: "sluice_built_in_budget_tables_bytes", type: "gauge", help: "Token budget tables of json_object and the built-in formats, computed once per model.", value: (s) => s.builtInTablesBytes },
];

interface ResidencyMetric {
  name: string;
  type: "gauge" | "counter";
  help: string;
  value: (m: ModelResidency) => number;
}

// Kept by the engine host for every model, loaded or not.
const RESIDENCY_METRICS: ResidencyMetric[] = [
  { name: "sluice_model_resident", type: "gauge", help: "1 while the model is loaded.", value: (m) => (m.state === "resident" ? 1 : 0) },
  { name: "sluice_model_memory_bytes", type: "gauge", help: "Memory the model holds of the budget (weights + KV budget) while loaded or loading.", value: (m) => (m.state === "unloaded" ? 0 : m.bytes) },
  { name: "sluice_model_weights_bytes", type: "gauge", help: "The model's weights, estimated from its ONNX files.", value: (m) => m.weightsBytes },
  { name: "sluice_model_loads_total", type: "counter", help: "Times the model was loaded.", value: (m) => m.loads },
  { name: "sluice_model_evictions_total", type: "counter", help: "Times the model was unloaded to make room for another.", value: (m) => m.evictions },
  { name: "sluice_model_last_load_seconds", type: "gauge", help: "How long the model's last load took.", value: (m) => (m.lastLoadMs ?? 0) / 1000 },
];

interface WorkerMetric {
  name: string;
  type: "gauge" | "counter";
  help: string;
  value: (w: WorkerHealth) => number;
}

// Supervision state: kept by the engine host, so it is there even while a worker is down. Loaded
// models only (residency's gauges cover the others).
const WORKER_METRICS: WorkerMetric[] = [
  { name: "sluice_model_available", type: "gauge", help: "1 when the model's worker takes requests; 0 while it restarts or is in a crash loop.", value: (w) => (w.state === "ready" ? 1 : 0) },
  { name: "sluice_model_crash_loop", type: "gauge", help: "1 while the model is unavailable after repeated worker crashes.", value: (w) => (w.state === "unavailable" ? 1 : 0) },
  { name: "sluice_model_worker_crashes_total", type: "counter", help: "Model worker threads that crashed or stopped responding.", value: (w) => w.crashes },
  { name: "sluice_model_worker_restarts_total", type: "counter", help: "Model worker threads started again after a crash.", value: (w) => w.restarts },
];

const label = (v: string) => v.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");

// Seconds; from a cached /v1/models answer up to a long generation.
const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];

/**
 * Seconds per token (inter-token latency, time per output token): a GPU's few milliseconds to a
 * CPU's fraction of a second for a large model, finely where streams are judged smooth or not.
 */
export const TOKEN_BUCKETS = [0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2.5, 5];

/** Seconds per request or step of one (end to end, queue, prefill): milliseconds to a long CPU generation. */
export const REQUEST_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1200];

class Histogram {
  /** Per bucket, not cumulative: an observation touches one slot; text() adds them up. */
  private readonly slots: number[];
  sum = 0;
  count = 0;
  constructor(private readonly buckets: readonly number[] = LATENCY_BUCKETS) {
    this.slots = new Array<number>(buckets.length + 1).fill(0);
  }
  observe(seconds: number): void {
    this.sum += seconds;
    this.count++;
    const buckets = this.buckets;
    let i = 0;
    while (i < buckets.length && seconds > buckets[i]!) i++;
    this.slots[i]!++;
  }
  lines(name: string, labels: string): string[] {
    const sep = labels ? "," : "";
    let below = 0;
    const out = this.buckets.map((b, i) => `${name}_bucket{${labels}${sep}le="${b}"} ${(below += this.slots[i]!)}`);
    out.push(`${name}_bucket{${labels}${sep}le="+Inf"} ${this.count}`, `${name}_sum{${labels}} ${this.sum}`, `${name}_count{${labels}} ${this.count}`);
    return out;
  }
}

/** One route, method and status: what a finished request counts itself into. */
export interface RequestCounter {
  /** Counts one request that took `seconds` to its response head. */
  add(seconds: number): void;
}

/** The route label of a path: a fixed set, so hostile paths cannot grow the series without bound. */
export function routeLabel(path: string): string {
  if (path === "/v1/models" || path === "/v1/chat/completions" || path === "/v1/integrations") return path;
  if (path.startsWith("/v1/models/")) return "/v1/models/{model}";
  if (path === "/health" || path === "/ready" || path === "/metrics") return path;
  if (path === "/workspace" || path.startsWith("/workspace/")) return "/workspace";
  if (path === "/admin/v1" || path.startsWith("/admin/v1/")) return "/admin/v1";
  if (path.startsWith("/v1/")) return "/v1/other";
  return "other";
}

/** Counters and histograms the API updates as requests finish. */
export class HttpMetrics {
  /** Request counts by label set, in cells a RequestCounter holds on to. */
  private readonly requests = new Map<string, { n: number }>();
  private readonly latency = new Map<string, Histogram>();
  private readonly ttft = new Map<string, Histogram>();
  /** Per model (a bounded set: the operator's), never per account or key. */
  private readonly e2e = new Map<string, Histogram>();
  private readonly queue = new Map<string, Histogram>();
  private readonly prefill = new Map<string, Histogram>();
  private readonly interToken = new Map<string, Histogram>();
  private readonly perToken = new Map<string, Histogram>();
  private readonly promptTokens = new Map<string, number>();
  private readonly completionTokens = new Map<string, number>();
  private readonly errors = new Map<string, number>();
  private readonly rateLimited = new Map<string, number>();
  private readonly generations = new Map<string, number>();

  private static inc(m: Map<string, number>, k: string, by = 1): void {
    m.set(k, (m.get(k) ?? 0) + by);
  }

  private readonly counters = new Map<string, RequestCounter>();

  /**
   * The counter for a route, method and status, made once per combination: a hot route keeps
   * its handle and pays two increments per request instead of building label strings.
   */
  counter(route: string, method: string, status: number): RequestCounter {
    const raw = `${route} ${method} ${status}`;
    let c = this.counters.get(raw);
    if (c) return c;
    const key = `route="${label(route)}",method="${label(method.slice(0, 16))}",status="${status}"`;
    // Both made at the first request, so a label set never shows with a zero count.
    let cell: { n: number } | undefined;
    let histogram: Histogram | undefined;
    const requests = this.requests;
    const latency = this.latency;
    c = {
      add(seconds) {
        if (!cell) {
          cell = requests.get(key);
          if (!cell) requests.set(key, (cell = { n: 0 }));
          histogram = latency.get(route);
          if (!histogram) latency.set(route, (histogram = new Histogram()));
        }
        cell.n++;
        histogram!.observe(seconds);
      },
    };
    // Methods are client-chosen: past a bound, combinations are still counted, just not kept.
    if (this.counters.size < 4096) this.counters.set(raw, c);
    return c;
  }

  request(route: string, method: string, status: number, seconds: number): void {
    this.counter(route, method, status).add(seconds);
  }

  /** An error answer: its HTTP status and OpenAI code (a fixed vocabulary). */
  error(route: string, status: number, code: string | null): void {
    HttpMetrics.inc(this.errors, `route="${label(route)}",status="${status}",code="${label(code ?? "none")}"`);
    if (status === 429 && code === "rate_limit_exceeded") HttpMetrics.inc(this.rateLimited, `route="${label(route)}"`);
  }

  private static histogram(m: Map<string, Histogram>, key: string, buckets?: readonly number[]): Histogram {
    let h = m.get(key);
    if (!h) m.set(key, (h = new Histogram(buckets)));
    return h;
  }

  firstToken(model: string, seconds: number): void {
    HttpMetrics.histogram(this.ttft, model).observe(seconds);
  }

  /**
   * A generation this node ran, at its end: `seconds` from its arrival, and where the engine's
   * time went (queue, prefill, the gaps between tokens).
   */
  generationTimes(model: string, seconds: number, timings: GenerationTimings | undefined): void {
    HttpMetrics.histogram(this.e2e, model, REQUEST_BUCKETS).observe(seconds);
    if (!timings) return;
    if (timings.queue) HttpMetrics.histogram(this.queue, model, REQUEST_BUCKETS).observe((timings.queue.end - timings.queue.start) / 1000);
    // Only a prefill that gave a token: one cut short says nothing of how long prompts take.
    if (timings.prefill && timings.decode) HttpMetrics.histogram(this.prefill, model, REQUEST_BUCKETS).observe((timings.prefill.end - timings.prefill.start) / 1000);
    const itl = HttpMetrics.histogram(this.interToken, model, TOKEN_BUCKETS);
    for (const s of timings.interTokenSeconds) itl.observe(s);
    const tpot = HttpMetrics.histogram(this.perToken, model, TOKEN_BUCKETS);
    for (const s of timings.timePerOutputTokenSeconds) tpot.observe(s);
  }

  /** A generation that ended (however), with its tokens. */
  generation(model: string, status: string, promptTokens: number, completionTokens: number): void {
    const m = `model="${label(model)}"`;
    HttpMetrics.inc(this.promptTokens, m, promptTokens);
    HttpMetrics.inc(this.completionTokens, m, completionTokens);
    HttpMetrics.inc(this.generations, `${m},status="${label(status)}"`);
  }

  text(): string {
    const lines: string[] = [];
    const counter = (name: string, help: string, m: Map<string, number>) => {
      lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} counter`);
      for (const [k, v] of m) lines.push(`${name}{${k}} ${v}`);
    };
    const histogram = (name: string, help: string, m: Map<string, Histogram>, key: string) => {
      lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} histogram`);
      for (const [k, h] of m) lines.push(...h.lines(name, `${key}="${label(k)}"`));
    };
    lines.push("# HELP sluice_http_requests_total HTTP requests answered, by route, method and status.", "# TYPE sluice_http_requests_total counter");
    for (const [k, cell] of this.requests) lines.push(`sluice_http_requests_total{${k}} ${cell.n}`);
    histogram("sluice_http_request_duration_seconds", "Time to the response head (a stream's body may run longer).", this.latency, "route");
    counter("sluice_http_errors_total", "Error answers by route, status and OpenAI error code.", this.errors);
    counter("sluice_rate_limited_total", "Requests refused by a per-account or per-key rate limit.", this.rateLimited);
    histogram("sluice_time_to_first_token_seconds", "From admission to the first generated token.", this.ttft, "model");
    histogram("sluice_request_duration_seconds", "Generations this node ran, from the request's arrival to its last token (however it ended).", this.e2e, "model");
    histogram("sluice_request_queue_seconds", "Time a generation waited in its model's queue for KV memory before it first ran.", this.queue, "model");
    histogram("sluice_prefill_seconds", "From a generation's admission to its first token: reading the prompt (in chunks between other requests' steps).", this.prefill, "model");
    histogram("sluice_inter_token_latency_seconds", "Between consecutive tokens of a choice, as the model made them (a step that gives several counts once).", this.interToken, "model");
    histogram("sluice_time_per_output_token_seconds", "Per choice of two tokens or more: its time from first to last token over the tokens after the first.", this.perToken, "model");
    counter("sluice_prompt_tokens_total", "Prompt tokens of finished generations.", this.promptTokens);
    counter("sluice_completion_tokens_total", "Completion tokens of finished generations.", this.completionTokens);
    counter("sluice_generations_total", "Generations by how they ended (ok, cancelled, time_limit, idle_timeout, error, …).", this.generations);
    return lines.join("\n") + "\n";
  }
}

export function metricsText(engine: Engine, http?: HttpMetrics, tracing?: { metricsLines(): string[] }): string {
  const stats = engine.stats?.();
  const models = stats?.models ?? [];
  const lines: string[] = http ? [http.text().trimEnd()] : [];
  for (const m of METRICS) {
    lines.push(`# HELP ${m.name} ${m.help}`, `# TYPE ${m.name} ${m.type}`);
    for (const s of models) lines.push(`${m.name}{model="${label(s.model)}"} ${m.value(s)}`);
  }
  lines.push(
    "# HELP sluice_host_device_bytes_total Bytes of host memory handed to the model's runs or taken from them, and copied into or out of its KV cache's memory: what crosses PCIe on a GPU (--ort-binding node hands every run its whole KV cache).",
    "# TYPE sluice_host_device_bytes_total counter",
  );
  for (const s of models) {
    lines.push(
      `sluice_host_device_bytes_total{model="${label(s.model)}",direction="to_device"} ${s.hostToDeviceBytes}`,
      `sluice_host_device_bytes_total{model="${label(s.model)}",direction="to_host"} ${s.deviceToHostBytes}`,
    );
  }
  const residency = engine.residency?.();
  if (residency) {
    lines.push("# HELP sluice_memory_budget_bytes Memory for the weights and KV budgets of loaded models (serve --memory-budget).", "# TYPE sluice_memory_budget_bytes gauge", `sluice_memory_budget_bytes ${residency.budgetBytes}`);
    lines.push("# HELP sluice_memory_used_bytes Of the memory budget, what loaded (and loading) models hold.", "# TYPE sluice_memory_used_bytes gauge", `sluice_memory_used_bytes ${residency.usedBytes}`);
    for (const m of RESIDENCY_METRICS) {
      lines.push(`# HELP ${m.name} ${m.help}`, `# TYPE ${m.name} ${m.type}`);
      for (const r of residency.models) lines.push(`${m.name}{model="${label(r.model)}"} ${m.value(r)}`);
    }
  }
  if (tracing) lines.push(...tracing.metricsLines());
  lines.push("# HELP sluice_process_heap_bytes JavaScript heap of the HTTP thread.", "# TYPE sluice_process_heap_bytes gauge", `sluice_process_heap_bytes ${heapSize()}`);
  for (const m of WORKER_METRICS) {
    lines.push(`# HELP ${m.name} ${m.help}`, `# TYPE ${m.name} ${m.type}`);
    for (const w of stats?.workers ?? []) lines.push(`${m.name}{model="${label(w.model)}"} ${m.value(w)}`);
  }
  return lines.join("\n") + "\n";
}

export function metricsResponse(engine: Engine, http?: HttpMetrics, tracing?: { metricsLines(): string[] }): Response {
  return new Response(metricsText(engine, http, tracing), { headers: { "content-type": "text/plain; version=0.0.4; charset=utf-8" } });
}
