// The public route table: what exists, with which methods. Used to answer 405 with `Allow` for a
// known path and a plain 404 for anything else.

export const UNSUPPORTED_ROUTES = ["/v1/responses", "/v1/messages", "/v1/embeddings", "/v1/rerank", "/v1/completions"];

export const SUPPORTED_SUMMARY =
  "Sluice serves GET /v1/models, GET /v1/models/{model}, POST /v1/chat/completions and GET /v1/integrations.";

const KNOWN: { match: (path: string) => boolean; methods: string[] }[] = [
  { match: (p) => p === "/v1/models", methods: ["GET"] },
  { match: (p) => p.startsWith("/v1/models/") && p.length > "/v1/models/".length, methods: ["GET"] },
  { match: (p) => p === "/v1/chat/completions", methods: ["POST"] },
  { match: (p) => p === "/v1/integrations", methods: ["GET"] },
  { match: (p) => p === "/health", methods: ["GET"] },
  { match: (p) => p === "/ready", methods: ["GET"] },
];

/** The methods a known path allows, or null for an unknown path. */
export function allowedMethods(path: string): string[] | null {
  const route = KNOWN.find((r) => r.match(path));
  return route ? [...route.methods, ...(route.methods.includes("GET") ? ["HEAD"] : [])] : null;
}

export function isUnsupportedRoute(path: string): boolean {
  return UNSUPPORTED_ROUTES.some((r) => path === r || path.startsWith(r + "/"));
}
