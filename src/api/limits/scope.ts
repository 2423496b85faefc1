import type { RequestTrace } from "../tracing/request-trace.ts";

/** What the API learns about one request as it runs: for its headers, access log line, metrics and trace. */
export interface RequestScope {
  requestId: string;
  started: number;
  accountId: number | null;
  /** Extra response headers (the x-ratelimit-* ones). */
  headers: Record<string, string>;
  /** Its OpenTelemetry trace, when tracing is on and the route is traced. */
  trace?: RequestTrace;
}
