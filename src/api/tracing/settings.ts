// What OpenTelemetry tracing is configured to do: serve's flags over OpenTelemetry's standard
// environment variables (the serve command's flags take them as their defaults), checked once at
// start so that a bad value is a clear error there rather than traces silently missing later.
// Tracing is off unless an OTLP endpoint is given. Only OTLP over HTTP with protobuf is spoken.
import { AlwaysOffSampler, AlwaysOnSampler, ParentBasedSampler, TraceIdRatioBasedSampler, type Sampler } from "@opentelemetry/sdk-trace";

/** What the operator set: serve's flags, each defaulting to its OpenTelemetry variable. */
export interface TracingOptions {
  /** --otlp-endpoint / OTEL_EXPORTER_OTLP_ENDPOINT: the collector's base URL (v1/traces is added). */
  endpoint?: string;
  /** --otlp-traces-endpoint / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: the full URL traces are posted to. */
  tracesEndpoint?: string;
  /** --otlp-headers / OTEL_EXPORTER_OTLP_HEADERS: `key=value,key2=value2`, values URL-encoded. */
  headers?: string;
  /** --service-name / OTEL_SERVICE_NAME (default "sluice"). */
  serviceName?: string;
  /** --traces-sampler / OTEL_TRACES_SAMPLER (default parentbased_always_on). */
  sampler?: string;
  /** --traces-sampler-arg / OTEL_TRACES_SAMPLER_ARG: the ratio of the traceidratio samplers. */
  samplerArg?: string;
  /** --trace-content: prompt and completion text (and the key's id) in spans. */
  traceContent?: boolean;
  /** Batching, for tests (else OTEL_BSP_SCHEDULE_DELAY and the other OTEL_BSP_ variables, else the SDK's defaults). */
  batch?: Partial<BatchSettings>;
  /** How long one export may take, retries included, for tests (else OTEL_EXPORTER_OTLP_TIMEOUT, else 10 s: the exporter reads it). */
  exportTimeoutMs?: number;
}

export interface BatchSettings {
  scheduledDelayMillis: number;
  maxQueueSize: number;
  maxExportBatchSize: number;
  exportTimeoutMillis: number;
}

export interface TracingSettings {
  /** Where spans are posted (OTLP/HTTP, protobuf). */
  url: string;
  headers: Record<string, string>;
  serviceName: string;
  sampler: Sampler;
  /** The sampler as configured, e.g. "parentbased_traceidratio (0.1)", for the start-up log line. */
  samplerName: string;
  traceContent: boolean;
  batch: BatchSettings;
  /** Absent: the exporter's own (OTEL_EXPORTER_OTLP_TIMEOUT, else 10 s). */
  exportTimeoutMs?: number;
}

export class TracingConfigError extends Error {}

/** The batching defaults of OpenTelemetry's specification (the SDK's own). */
const BATCH_DEFAULTS: BatchSettings = { scheduledDelayMillis: 5000, maxQueueSize: 2048, maxExportBatchSize: 512, exportTimeoutMillis: 30_000 };
const BATCH_ENV: Record<keyof BatchSettings, string> = {
  scheduledDelayMillis: "OTEL_BSP_SCHEDULE_DELAY",
  maxQueueSize: "OTEL_BSP_MAX_QUEUE_SIZE",
  maxExportBatchSize: "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
  exportTimeoutMillis: "OTEL_BSP_EXPORT_TIMEOUT",
};

const SAMPLERS = ["always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio"];

/** OTEL_EXPORTER_OTLP_HEADERS' format: comma-separated key=value pairs, URL-encoded. */
export function parseOtlpHeaders(text: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const pair of (text ?? "").split(",")) {
    if (pair.trim() === "") continue;
    const eq = pair.indexOf("=");
    if (eq <= 0) throw new TracingConfigError(`OTLP headers must be key=value pairs separated by commas; got ${JSON.stringify(pair.trim().slice(0, 40))}`);
    let key: string;
    let value: string;
    try {
      key = decodeURIComponent(pair.slice(0, eq).trim());
      value = decodeURIComponent(pair.slice(eq + 1).trim());
    } catch {
      throw new TracingConfigError(`an OTLP header is not valid URL encoding: ${JSON.stringify(pair.slice(0, eq).trim().slice(0, 40))}`);
    }
    if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(key)) throw new TracingConfigError(`${JSON.stringify(key.slice(0, 40))} is not a valid HTTP header name`);
    out[key.toLowerCase()] = value;
  }
  return out;
}

/**
 * The URL traces go to: the traces endpoint as given, else the base endpoint with v1/traces added
 * (as the specification says for OTEL_EXPORTER_OTLP_ENDPOINT); null when neither is set.
 */
export function tracesUrl(endpoint: string | undefined, tracesEndpoint: string | undefined): string | null {
  const given = tracesEndpoint?.trim() || null;
  const base = endpoint?.trim() || null;
  const url = given ?? (base ? `${base.replace(/\/+$/, "")}/v1/traces` : null);
  if (url === null) return null;
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new TracingConfigError(`the OTLP endpoint ${JSON.stringify(url)} is not a URL`);
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") throw new TracingConfigError(`the OTLP endpoint must be http:// or https:// (OTLP over HTTP); got ${parsed.protocol}`);
  return parsed.href;
}

export function samplerOf(name: string | undefined, arg: string | undefined): { sampler: Sampler; name: string } {
  const chosen = (name?.trim() || "parentbased_always_on").toLowerCase();
  if (!SAMPLERS.includes(chosen)) throw new TracingConfigError(`unknown traces sampler ${JSON.stringify(chosen)}; use one of ${SAMPLERS.join(", ")}`);
  let ratio = 1;
  if (chosen.endsWith("traceidratio")) {
    ratio = arg === undefined || arg.trim() === "" ? 1 : Number(arg);
    if (!Number.isFinite(ratio) || ratio < 0 || ratio > 1) throw new TracingConfigError(`the traces sampler argument must be a ratio from 0 to 1; got ${JSON.stringify(arg)}`);
  }
  const root = chosen.endsWith("always_on") ? new AlwaysOnSampler() : chosen.endsWith("always_off") ? new AlwaysOffSampler() : new TraceIdRatioBasedSampler(ratio);
  const sampler = chosen.startsWith("parentbased_") ? new ParentBasedSampler({ root }) : root;
  return { sampler, name: chosen.endsWith("traceidratio") ? `${chosen} (${ratio})` : chosen };
}

function batchSettings(given: Partial<BatchSettings> | undefined, env: Record<string, string | undefined>): BatchSettings {
  const out = { ...BATCH_DEFAULTS };
  for (const k of Object.keys(BATCH_DEFAULTS) as (keyof BatchSettings)[]) {
    const raw = given?.[k] ?? env[BATCH_ENV[k]];
    if (raw === undefined || raw === "") continue;
    const v = Number(raw);
    if (!Number.isInteger(v) || v < (k === "scheduledDelayMillis" ? 0 : 1)) throw new TracingConfigError(`${BATCH_ENV[k]} must be a whole number${k === "scheduledDelayMillis" ? "" : " ≥ 1"}; got ${JSON.stringify(String(raw))}`);
    out[k] = v;
  }
  out.maxExportBatchSize = Math.min(out.maxExportBatchSize, out.maxQueueSize);
  return out;
}

/**
 * The settings, or null when tracing is off: no endpoint, or OTEL_SDK_DISABLED=true, or
 * OTEL_TRACES_EXPORTER=none. Throws TracingConfigError for a value it cannot honour.
 */
export function tracingSettings(o: TracingOptions, env: Record<string, string | undefined> = process.env): TracingSettings | null {
  if (/^true$/i.test(env.OTEL_SDK_DISABLED ?? "")) return null;
  const exporter = (env.OTEL_TRACES_EXPORTER ?? "").trim().toLowerCase();
  if (exporter === "none") return null;
  if (exporter !== "" && exporter !== "otlp") throw new TracingConfigError(`OTEL_TRACES_EXPORTER=${exporter} is not supported; traces go out as OTLP (otlp) or not at all (none)`);
  const url = tracesUrl(o.endpoint, o.tracesEndpoint);
  if (url === null) return null;
  for (const name of ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"]) {
    const p = env[name]?.trim();
    if (p) {
      if (p !== "http/protobuf") throw new TracingConfigError(`${name}=${p} is not supported: traces are sent as OTLP over HTTP with protobuf (http/protobuf)`);
      break;
    }
  }
  const { sampler, name } = samplerOf(o.sampler, o.samplerArg);
  return {
    url,
    headers: parseOtlpHeaders(o.headers),
    serviceName: o.serviceName?.trim() || "sluice",
    sampler,
    samplerName: name,
    traceContent: o.traceContent === true,
    batch: batchSettings(o.batch, env),
    ...(o.exportTimeoutMs !== undefined ? { exportTimeoutMs: o.exportTimeoutMs } : {}),
  };
}
