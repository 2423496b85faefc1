// serve's OpenTelemetry flags. Each defaults to OpenTelemetry's own environment variable, so a
// deployment configured the standard way needs no flag; a flag wins over its variable.
import type { TracingOptions } from "../api/tracing/settings.ts";
import type { CommandArgs, OptionSpec } from "./framework.ts";

export const TRACE_OPTIONS: OptionSpec[] = [
  { name: "otlp-endpoint", type: "string", help: "OTLP/HTTP collector base URL for traces of chat requests, e.g. http://localhost:4318 (v1/traces is added; unset: no tracing)", env: "OTEL_EXPORTER_OTLP_ENDPOINT" },
  { name: "otlp-traces-endpoint", type: "string", help: "The full URL traces are posted to (over --otlp-endpoint), e.g. http://localhost:4318/v1/traces", env: "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" },
  { name: "otlp-headers", type: "string", help: "Headers for the collector, key=value pairs separated by commas (values URL-encoded)", env: "OTEL_EXPORTER_OTLP_HEADERS" },
  { name: "service-name", type: "string", help: "service.name of the traces", default: "sluice", env: "OTEL_SERVICE_NAME" },
  { name: "traces-sampler", type: "string", help: "always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio", default: "parentbased_always_on", env: "OTEL_TRACES_SAMPLER" },
  { name: "traces-sampler-arg", type: "string", help: "The ratio (0 to 1) of the traceidratio samplers", env: "OTEL_TRACES_SAMPLER_ARG" },
  { name: "trace-content", type: "boolean", help: "Put prompt and completion text (and the API key's id) in spans (off: never traced)" },
];

const str = (v: string | boolean | undefined) => (typeof v === "string" && v !== "" ? v : undefined);

export function traceOptionsOf(args: CommandArgs): TracingOptions {
  return {
    endpoint: str(args.values["otlp-endpoint"]),
    tracesEndpoint: str(args.values["otlp-traces-endpoint"]),
    headers: str(args.values["otlp-headers"]),
    serviceName: str(args.values["service-name"]),
    sampler: str(args.values["traces-sampler"]),
    samplerArg: str(args.values["traces-sampler-arg"]),
    traceContent: args.values["trace-content"] === true,
  };
}
