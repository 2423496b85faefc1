// OpenTelemetry tracing of chat requests: the SDK's tracer provider, its batching span processor
// and the OTLP/HTTP protobuf exporter (@opentelemetry/sdk-trace, @opentelemetry/exporter-trace-
// otlp-proto). A request only adds finished spans to the batch; the batch is sent from a timer,
// one export at a time, so a slow or dead collector never holds a request up: while it is away
// the queue fills and further spans are dropped, and counted (the SDK's own self-observability
// counter, read here into /metrics). Nothing global is registered: the tracer and the
// propagator are used explicitly, so nothing else in the process is traced by accident.
import { createNoopMeter, ROOT_CONTEXT, SpanKind, trace, type Attributes, type Counter, type Meter, type MeterProvider } from "@opentelemetry/api";
import { ExportResultCode, W3CTraceContextPropagator, type ExportResult } from "@opentelemetry/core";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { detectResources, envDetector, resourceFromAttributes } from "@opentelemetry/resources";
import { BatchSpanProcessor, TracerProvider, type ReadableSpan, type SpanExporter } from "@opentelemetry/sdk-trace";
import { hostname } from "node:os";
import type { Logger } from "../../log.ts";
import { RequestTrace } from "./request-trace.ts";
import type { TracingSettings } from "./settings.ts";

/** What became of the spans handed to the exporter so far. */
export interface SpanCounts {
  exported: number;
  /** Dropped because the queue was full (the collector slower than the spans, or away). */
  droppedQueueFull: number;
  /** Dropped because their export failed (refused, unreachable, timed out). */
  droppedExportFailed: number;
}

/** The SDK's counter of spans its processor finished with, and why (semantic conventions' otel.sdk.* metrics). */
const PROCESSED = "otel.sdk.processor.span.processed";

/**
 * A meter provider that only listens to the batch processor's count of processed spans: its
 * error.type says how each batch ended (absent: exported; queue_full: dropped on arrival; else
 * the export's error).
 */
function processedSpans(onCount: (n: number, errorType: string | undefined) => void): MeterProvider {
  const noop = createNoopMeter();
  const meter: Meter = Object.create(noop);
  meter.createCounter = ((name: string, options?: unknown) => {
    if (name !== PROCESSED) return noop.createCounter(name, options as never);
    const counter: Counter = { add: (n: number, attributes?: Attributes) => onCount(n, attributes?.["error.type"] as string | undefined) };
    return counter;
  }) as Meter["createCounter"];
  return { getMeter: () => meter };
}

/** After a failed export, the next is not tried for this long (doubling while they keep failing, up to MAX). */
const BACKOFF_MS = 1000;
const MAX_BACKOFF_MS = 30_000;

/**
 * The exporter, paused after a failure. The batch processor starts the next export as soon as
 * one ends while a full batch waits; against a collector that refuses connections at once, that
 * was an HTTP request after another, on the HTTP thread (bench/tracing.ts measured it: the server
 * spent more CPU per request with the collector down than up). While paused, a batch fails at
 * once without touching the network: its spans are dropped and counted like any failed export's.
 */
class PausingExporter implements SpanExporter {
  private resumeAt = 0;
  private pause = 0;

  constructor(private readonly inner: SpanExporter) {}

  export(spans: ReadableSpan[], done: (result: ExportResult) => void): void {
    if (Date.now() < this.resumeAt) {
      const error = new Error("the collector failed the last export; paused");
      error.name = "CollectorPaused";
      return done({ code: ExportResultCode.FAILED, error });
    }
    this.inner.export(spans, (result) => {
      if (result.code === ExportResultCode.SUCCESS) this.pause = 0;
      else {
        this.pause = Math.min(MAX_BACKOFF_MS, this.pause === 0 ? BACKOFF_MS : this.pause * 2);
        this.resumeAt = Date.now() + this.pause;
      }
      done(result);
    });
  }

  shutdown(): Promise<void> {
    return this.inner.shutdown();
  }

  forceFlush(): Promise<void> {
    return this.inner.forceFlush?.() ?? Promise.resolve();
  }
}

export interface TracingIdentity {
  version: string;
  /** This process's node id: the resource's service.instance.id. */
  nodeId: string;
}

/** How often a collector that keeps failing is mentioned in the log. */
const WARN_EVERY_MS = 60_000;

export class Tracing {
  readonly traceContent: boolean;
  readonly settings: TracingSettings;
  private readonly provider: TracerProvider;
  private readonly tracer;
  private readonly propagator = new W3CTraceContextPropagator();
  private readonly counts: SpanCounts = { exported: 0, droppedQueueFull: 0, droppedExportFailed: 0 };
  private lastWarning = 0;

  constructor(settings: TracingSettings, identity: TracingIdentity, log: Logger) {
    this.settings = settings;
    this.traceContent = settings.traceContent;
    // service.name as configured over OTEL_RESOURCE_ATTRIBUTES' over this process's defaults.
    const resource = resourceFromAttributes({
      "service.version": identity.version,
      "service.instance.id": identity.nodeId,
      "host.name": hostname(),
    })
      .merge(detectResources({ detectors: [envDetector] }))
      .merge(resourceFromAttributes({ "service.name": settings.serviceName }));
    const exporter = new PausingExporter(new OTLPTraceExporter({ url: settings.url, headers: settings.headers, timeoutMillis: settings.exportTimeoutMs }));
    const counted = processedSpans((n, errorType) => {
      if (errorType === undefined) this.counts.exported += n;
      else if (errorType === "queue_full") this.counts.droppedQueueFull += n;
      else this.counts.droppedExportFailed += n;
      if (errorType !== undefined && Date.now() - this.lastWarning > WARN_EVERY_MS) {
        this.lastWarning = Date.now();
        log.warn("trace spans dropped: the OTLP collector did not take them (counted in sluice_trace_spans_dropped_total)", {
          endpoint: settings.url,
          reason: errorType,
          spans: n,
        });
      }
    });
    const processor = new BatchSpanProcessor({ exporter, ...settings.batch, selfObsMeterProvider: counted });
    this.provider = new TracerProvider({ resource, sampler: settings.sampler, spanProcessors: [processor] });
    this.tracer = this.provider.getTracer("sluice", identity.version);
  }

  /**
   * The trace of a request that arrived at `startedAt` (performance.now()): its server span, a
   * child of the request's traceparent when it brings one.
   */
  start(request: Request, startedAt: number, route: string): RequestTrace {
    const parent = request.headers.has("traceparent") ? this.propagator.extract(ROOT_CONTEXT, request.headers, headerGetter) : ROOT_CONTEXT;
    const url = new URL(request.url);
    const span = this.tracer.startSpan(
      `${request.method} ${route}`,
      {
        kind: SpanKind.SERVER,
        startTime: startedAt,
        attributes: {
          "http.request.method": request.method,
          "http.route": route,
          "url.path": url.pathname,
          "url.scheme": url.protocol.replace(":", ""),
          "server.address": url.hostname,
          ...(url.port ? { "server.port": Number(url.port) } : {}),
          ...(request.headers.has("user-agent") ? { "user_agent.original": request.headers.get("user-agent")!.slice(0, 256) } : {}),
        },
      },
      parent,
    );
    return new RequestTrace(this.tracer, span, trace.setSpan(parent, span), this.propagator, this.traceContent);
  }

  spanCounts(): SpanCounts {
    return { ...this.counts };
  }

  /** Sends what is batched now (tests, and shutdown). */
  async flush(): Promise<void> {
    await this.provider.forceFlush();
  }

  /** Sends what is batched, waiting at most `timeoutMs` for a collector that does not answer. */
  async shutdown(timeoutMs = 3000): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([this.provider.shutdown().catch(() => {}), new Promise<void>((r) => (timer = setTimeout(r, timeoutMs)))]);
    clearTimeout(timer);
  }

  /** /metrics lines: spans exported and dropped. */
  metricsLines(): string[] {
    const c = this.counts;
    return [
      "# HELP sluice_trace_spans_exported_total Trace spans the OTLP collector accepted.",
      "# TYPE sluice_trace_spans_exported_total counter",
      `sluice_trace_spans_exported_total ${c.exported}`,
      "# HELP sluice_trace_spans_dropped_total Trace spans dropped: the export queue was full (queue_full) or their export failed (export_failed).",
      "# TYPE sluice_trace_spans_dropped_total counter",
      `sluice_trace_spans_dropped_total{reason="queue_full"} ${c.droppedQueueFull}`,
      `sluice_trace_spans_dropped_total{reason="export_failed"} ${c.droppedExportFailed}`,
    ];
  }
}

const headerGetter = {
  get: (carrier: Headers, key: string) => carrier.get(key) ?? undefined,
  keys: (carrier: Headers) => {
    const keys: string[] = [];
    carrier.forEach((_v, k) => keys.push(k));
    return keys;
  },
};
