/** What the API learns about one request as it runs: for its headers, access log line and metrics. */
export interface RequestScope {
  requestId: string;
  started: number;
  accountId: number | null;
  /** Extra response headers (the x-ratelimit-* ones). */
  headers: Record<string, string>;
}
