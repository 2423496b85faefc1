// Tracing's configuration from serve's flags and OpenTelemetry's standard variables: off unless an
// endpoint is given, the traces URL as the specification derives it, headers in their variable's
// format, the six standard samplers, and a clear error for anything it cannot honour.
import { expect, test } from "bun:test";
import { parseOtlpHeaders, samplerOf, tracesUrl, tracingSettings, TracingConfigError } from "../../src/api/tracing/settings.ts";

test("off without an endpoint, or when the SDK or the traces exporter is switched off", () => {
  expect(tracingSettings({}, {})).toBeNull();
  expect(tracingSettings({ endpoint: "http://c:4318" }, { OTEL_SDK_DISABLED: "true" })).toBeNull();
  expect(tracingSettings({ endpoint: "http://c:4318" }, { OTEL_TRACES_EXPORTER: "none" })).toBeNull();
  expect(tracingSettings({ endpoint: "http://c:4318" }, {})?.url).toBe("http://c:4318/v1/traces");
});

test("the traces URL: the traces endpoint as given, else the base endpoint with v1/traces", () => {
  expect(tracesUrl("http://c:4318", undefined)).toBe("http://c:4318/v1/traces");
  expect(tracesUrl("http://c:4318/", undefined)).toBe("http://c:4318/v1/traces");
  expect(tracesUrl("https://c/otlp", undefined)).toBe("https://c/otlp/v1/traces");
  expect(tracesUrl("http://c:4318", "http://d:9999/custom")).toBe("http://d:9999/custom");
  expect(tracesUrl(undefined, undefined)).toBeNull();
  expect(() => tracesUrl("grpc://c:4317", undefined)).toThrow(TracingConfigError);
  expect(() => tracesUrl("not a url", undefined)).toThrow(/not a URL/);
});

test("headers: comma-separated key=value pairs, URL-decoded; a malformed one is refused", () => {
  expect(parseOtlpHeaders("api-key=abc%20def, X-Tenant=t1")).toEqual({ "api-key": "abc def", "x-tenant": "t1" });
  expect(parseOtlpHeaders("")).toEqual({});
  expect(() => parseOtlpHeaders("novalue")).toThrow(/key=value/);
  expect(() => parseOtlpHeaders("bad name=1")).toThrow(/header name/);
});

test("samplers: the six standard ones, a ratio for the traceidratio ones, anything else refused", () => {
  expect(samplerOf(undefined, undefined).name).toBe("parentbased_always_on");
  expect(samplerOf("traceidratio", "0.25").name).toBe("traceidratio (0.25)");
  expect(samplerOf("parentbased_traceidratio", undefined).name).toBe("parentbased_traceidratio (1)");
  expect(samplerOf("always_off", undefined).sampler.toString()).toContain("AlwaysOff");
  expect(samplerOf("parentbased_always_off", undefined).sampler.toString()).toContain("ParentBased");
  expect(() => samplerOf("sometimes", undefined)).toThrow(/unknown traces sampler/);
  expect(() => samplerOf("traceidratio", "2")).toThrow(/ratio from 0 to 1/);
});

test("batching from the OTEL_BSP_ variables; protocols other than http/protobuf are refused by name", () => {
  const s = tracingSettings({ endpoint: "http://c:4318" }, { OTEL_BSP_SCHEDULE_DELAY: "250", OTEL_BSP_MAX_QUEUE_SIZE: "100", OTEL_BSP_MAX_EXPORT_BATCH_SIZE: "500" })!;
  expect(s.batch).toEqual({ scheduledDelayMillis: 250, maxQueueSize: 100, maxExportBatchSize: 100, exportTimeoutMillis: 30_000 });
  expect(() => tracingSettings({ endpoint: "http://c:4318" }, { OTEL_BSP_MAX_QUEUE_SIZE: "lots" })).toThrow(/OTEL_BSP_MAX_QUEUE_SIZE/);
  expect(() => tracingSettings({ endpoint: "http://c:4318" }, { OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" })).toThrow(/OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported/);
  // The traces-specific variable decides over the general one.
  expect(tracingSettings({ endpoint: "http://c:4318" }, { OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: "http/protobuf", OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" })).not.toBeNull();
  expect(() => tracingSettings({ endpoint: "http://c:4318" }, { OTEL_TRACES_EXPORTER: "zipkin" })).toThrow(/not supported/);
  expect(tracingSettings({ endpoint: "http://c:4318", serviceName: " ", traceContent: true }, {})).toMatchObject({ serviceName: "sluice", traceContent: true });
});
