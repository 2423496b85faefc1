// GET /metrics: the engine's scheduler and KV gauges in Prometheus' text exposition format.
// Unauthenticated like /health: it carries counts and bytes, never prompts, keys or accounts.
import type { Engine, ModelStats } from "../engine/types.ts";

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
  { name: "sluice_queue_limit", type: "gauge", help: "Most requests that may wait before new ones get 429.", value: (s) => s.queueLimit },
  { name: "sluice_kv_budget_bytes", type: "gauge", help: "KV memory the model may use.", value: (s) => s.kvBudgetBytes },
  { name: "sluice_kv_used_bytes", type: "gauge", help: "KV memory reserved by sequences plus held by the prefix cache.", value: (s) => s.kvUsedBytes },
  { name: "sluice_prefix_cache_bytes", type: "gauge", help: "KV memory held by the prefix cache.", value: (s) => s.prefixCacheBytes },
  { name: "sluice_prefix_cache_entries", type: "gauge", help: "Prefixes in the prefix cache.", value: (s) => s.prefixCacheEntries },
  { name: "sluice_prefix_cache_hits_total", type: "counter", help: "Requests that reused a cached prefix.", value: (s) => s.prefixCacheHits },
  { name: "sluice_prefix_cache_reused_tokens_total", type: "counter", help: "Prompt tokens taken from the prefix cache.", value: (s) => s.prefixCacheReusedTokens },
  { name: "sluice_prompt_tokens_computed_total", type: "counter", help: "Prompt tokens run through the model.", value: (s) => s.promptTokensComputed },
  { name: "sluice_generated_tokens_total", type: "counter", help: "Tokens sampled.", value: (s) => s.generatedTokens },
  { name: "sluice_decode_steps_total", type: "counter", help: "Batched decode forward passes.", value: (s) => s.decodeSteps },
  { name: "sluice_rejected_busy_total", type: "counter", help: "Requests refused with 429 because the queue was full.", value: (s) => s.rejectedBusy },
];

const label = (v: string) => v.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");

export function metricsText(engine: Engine): string {
  const models = engine.stats?.().models ?? [];
  const lines: string[] = [];
  for (const m of METRICS) {
    lines.push(`# HELP ${m.name} ${m.help}`, `# TYPE ${m.name} ${m.type}`);
    for (const s of models) lines.push(`${m.name}{model="${label(s.model)}"} ${m.value(s)}`);
  }
  return lines.join("\n") + "\n";
}

export function metricsResponse(engine: Engine): Response {
  return new Response(metricsText(engine), { headers: { "content-type": "text/plain; version=0.0.4; charset=utf-8" } });
}
