// A real OTLP/HTTP trace receiver for tests: an HTTP server on a free port that takes
// ExportTraceServiceRequest messages in protobuf at /v1/traces, as a collector does, and decodes
// them with the OpenTelemetry project's own generated protobufjs code (shipped in
// @opentelemetry/otlp-transformer up to 0.216, a dev dependency under the name
// opentelemetry-otlp-transformer-0.216; later versions encode by hand and ship no decoder).
import root from "opentelemetry-otlp-transformer-0.216/build/src/generated/root.js";

interface Decoder {
  decode(bytes: Uint8Array): unknown;
  toObject(message: unknown, options: Record<string, unknown>): unknown;
}
const ExportTraceServiceRequest = (root as unknown as { opentelemetry: { proto: { collector: { trace: { v1: { ExportTraceServiceRequest: Decoder } } } } } }).opentelemetry.proto
  .collector.trace.v1.ExportTraceServiceRequest;

export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  /** "" for a root span. */
  parentSpanId: string;
  name: string;
  /** OTLP's SpanKind: 1 internal, 2 server, 3 client. */
  kind: number;
  /** Epoch milliseconds (from the nanoseconds sent). */
  start: number;
  end: number;
  attributes: Record<string, unknown>;
  status: { code: number; message: string };
  /** The resource's attributes (service.name, service.instance.id, …). */
  resource: Record<string, unknown>;
  /** The whole span as decoded (events and links too), to search for text that must not be there. */
  raw: string;
}

interface AnyValue {
  stringValue?: string;
  boolValue?: boolean;
  intValue?: number;
  doubleValue?: number;
  arrayValue?: { values?: AnyValue[] };
  kvlistValue?: { values?: KeyValue[] };
}
interface KeyValue {
  key: string;
  value?: AnyValue;
}

function value(v: AnyValue | undefined): unknown {
  if (!v) return null;
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.doubleValue !== undefined) return v.doubleValue;
  if (v.arrayValue) return (v.arrayValue.values ?? []).map(value);
  if (v.kvlistValue) return attributes(v.kvlistValue.values);
  return null;
}

function attributes(kvs: KeyValue[] | undefined): Record<string, unknown> {
  return Object.fromEntries((kvs ?? []).map((kv) => [kv.key, value(kv.value)]));
}

const hex = (b: unknown) => (b instanceof Uint8Array && b.length ? Buffer.from(b).toString("hex") : "");

/** Decodes one ExportTraceServiceRequest body into its spans. */
export function decodeTraces(body: Uint8Array): ReceivedSpan[] {
  const message = ExportTraceServiceRequest.decode(body);
  const o = ExportTraceServiceRequest.toObject(message, { longs: Number, bytes: Uint8Array, defaults: false }) as {
    resourceSpans?: { resource?: { attributes?: KeyValue[] }; scopeSpans?: { spans?: Record<string, unknown>[] }[] }[];
  };
  const out: ReceivedSpan[] = [];
  for (const rs of o.resourceSpans ?? []) {
    const resource = attributes(rs.resource?.attributes);
    for (const ss of rs.scopeSpans ?? []) {
      for (const s of ss.spans ?? []) {
        const status = (s.status ?? {}) as { code?: number; message?: string };
        out.push({
          traceId: hex(s.traceId),
          spanId: hex(s.spanId),
          parentSpanId: hex(s.parentSpanId),
          name: String(s.name),
          kind: Number(s.kind ?? 0),
          start: Number(s.startTimeUnixNano) / 1e6,
          end: Number(s.endTimeUnixNano) / 1e6,
          attributes: attributes(s.attributes as KeyValue[] | undefined),
          status: { code: status.code ?? 0, message: status.message ?? "" },
          resource,
          raw: JSON.stringify(s),
        });
      }
    }
  }
  return out;
}

export interface OtlpReceiver {
  /** Base URL (OTEL_EXPORTER_OTLP_ENDPOINT's form); traces go to `${url}/v1/traces`. */
  url: string;
  spans: ReceivedSpan[];
  /** Export requests received, and those with a body that did not decode. */
  requests: number;
  undecodable: number;
  /** The spans of one trace. */
  trace(traceId: string): ReceivedSpan[];
  /** Resolves once `ready(spans)` holds, polling; throws after `ms`. */
  waitFor(ready: (spans: ReceivedSpan[]) => boolean, ms?: number): Promise<ReceivedSpan[]>;
  stop(): void;
}

export function startOtlpReceiver(): OtlpReceiver {
  const r: OtlpReceiver = {
    url: "",
    spans: [],
    requests: 0,
    undecodable: 0,
    trace: (traceId) => r.spans.filter((s) => s.traceId === traceId),
    async waitFor(ready, ms = 20_000) {
      const until = Date.now() + ms;
      while (!ready(r.spans)) {
        if (Date.now() > until) throw new Error(`the collector did not get the spans expected within ${ms} ms; it has: ${r.spans.map((s) => s.name).join(", ")}`);
        await Bun.sleep(20);
      }
      return r.spans;
    },
    stop: () => void server.stop(true),
  };
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(req) {
      const path = new URL(req.url).pathname;
      if (req.method !== "POST" || path !== "/v1/traces") return new Response("not found", { status: 404 });
      r.requests++;
      if (!(req.headers.get("content-type") ?? "").startsWith("application/x-protobuf")) return new Response("protobuf only", { status: 415 });
      try {
        r.spans.push(...decodeTraces(new Uint8Array(await req.arrayBuffer())));
      } catch {
        r.undecodable++;
        return new Response("undecodable", { status: 400 });
      }
      // An empty ExportTraceServiceResponse: everything accepted.
      return new Response(new Uint8Array(0), { headers: { "content-type": "application/x-protobuf" } });
    },
  });
  r.url = `http://127.0.0.1:${server.port}`;
  return r;
}

/** A port nothing listens on (bound, then released): a collector that is down. */
export function closedPort(): number {
  const s = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = s.port;
  s.stop(true);
  return port;
}
