// The admin API at /admin/v1/: JSON for operators' automation, authenticated by operator tokens
// (Authorization: Bearer sk-sluice-admin-…), rate limited per token, its errors in /v1's shape, its
// changes in the audit log under the token's label. Outside /v1: the public contract stays as it is.
import type { TSchema } from "@sinclair/typebox";
import type { Logger } from "../../log.ts";
import { ADMIN_TOKEN_PREFIX, auditedStore, StoreUnavailableError, type Store } from "../../store/index.ts";
import { readJsonText } from "../body.ts";
import { ApiError, badRequest, internalError, invalidApiKey, storeUnavailable } from "../errors.ts";
import { RateLimiter } from "../limits/rate-limiter.ts";
import { findProblem } from "../validate.ts";
import { ADMIN_ROUTES, type AdminResidency, type AdminRoute } from "./routes.ts";
import { openApiDocument } from "./openapi.ts";

export const ADMIN_BASE = "/admin/v1";
const MAX_BODY_BYTES = 256 * 1024;

export interface AdminApiOptions {
  store: Store;
  log: Logger;
  residency?: AdminResidency;
  /** Requests per minute per token (default 600). */
  requestsPerMinute?: number;
}

interface Compiled {
  route: AdminRoute;
  re: RegExp;
  names: string[];
}

/** '/models/{model}/prices' → a RegExp: {model} takes a model id with its slashes, other names one segment. */
function compile(route: AdminRoute): Compiled {
  const names: string[] = [];
  const src = route.path.replace(/\{([a-z]+)\}/g, (_, n: string) => {
    names.push(n);
    return n === "model" ? "(.+?)" : "([^/]+)";
  });
  return { route, re: new RegExp(`^${src}$`), names };
}

const COMPILED = ADMIN_ROUTES.map(compile);

const headerOf = (token: string | null) => {
  if (!token) throw invalidApiKey(`You didn't provide an admin token. Send it as 'Authorization: Bearer ${ADMIN_TOKEN_PREFIX}…' (create one with: sluice admin tokens create --label L).`);
  return token;
};

export function createAdminApi(opts: AdminApiOptions) {
  const limiter = new RateLimiter();
  const rpm = opts.requestsPerMinute ?? 600;
  const document = JSON.stringify(openApiDocument(ADMIN_ROUTES));

  async function authenticate(request: Request) {
    const header = request.headers.get("authorization");
    const m = header === null ? null : /^Bearer\s+(\S+)\s*$/i.exec(header);
    if (header !== null && !m) throw invalidApiKey("Malformed Authorization header: expected 'Bearer <admin token>'.");
    const token = await opts.store.adminTokens.authenticate(headerOf(m?.[1] ?? null));
    if (!token) throw invalidApiKey("Incorrect, revoked or unknown admin token. Create one with: sluice admin tokens create --label L.");
    return token;
  }

  async function handle(request: Request, client: string): Promise<Response> {
    const url = new URL(request.url);
    const path = url.pathname.slice(ADMIN_BASE.length) || "/";
    if (path === "/openapi.json" && (request.method === "GET" || request.method === "HEAD")) {
      return new Response(document, { headers: { "content-type": "application/json" } });
    }
    let matched: { route: AdminRoute; params: Record<string, string> } | null = null;
    const allowed: string[] = [];
    for (const c of COMPILED) {
      const m = c.re.exec(path);
      if (!m) continue;
      if (c.route.method !== request.method) {
        allowed.push(c.route.method);
        continue;
      }
      const params: Record<string, string> = {};
      try {
        c.names.forEach((n, i) => (params[n] = decodeURIComponent(m[i + 1]!)));
      } catch {
        throw badRequest("The URL's path is not valid percent-encoding.", null, "invalid_url");
      }
      matched = { route: c.route, params };
      break;
    }
    if (!matched) {
      if (allowed.length) {
        throw new ApiError(405, `Method ${request.method} is not allowed on ${url.pathname}; use ${allowed.join(", ")}.`, "invalid_request_error", null, "method_not_allowed", { allow: allowed.join(", ") });
      }
      throw new ApiError(404, `Invalid URL (${request.method} ${url.pathname}). The admin API's routes are described at ${ADMIN_BASE}/openapi.json.`, "invalid_request_error", null, "unknown_url");
    }
    const token = await authenticate(request);
    const ticket = limiter.admit([{ id: `admin:${token.id}`, limits: { requestsPerMinute: rpm, tokensPerMinute: null, maxConcurrent: null } }], 0, false);
    if (!ticket.ok) {
      const wait = Math.max(1, Math.ceil(ticket.retryAfterMs / 1000));
      throw new ApiError(429, `Rate limit reached for this admin token: ${rpm} requests per minute. Please try again in ${wait} s.`, "rate_limit_error", null, "rate_limit_exceeded", { "retry-after": String(wait) });
    }
    void opts.store.adminTokens.touch(token.id).catch(() => {});
    const { route, params } = matched;
    let body: unknown = undefined;
    if (route.body) body = await readBody(request, route.body);
    const actor = { kind: "admin_api" as const, name: token.label, source: client };
    const result = await route.handle({ store: auditedStore(opts.store, actor), actor, params, query: url.searchParams, body, residency: opts.residency });
    return Response.json(result, { status: route.status ?? 200 });
  }

  return {
    async fetch(request: Request, client?: string | null): Promise<Response> {
      try {
        return await handle(request, client ?? "unknown");
      } catch (e) {
        if (e instanceof ApiError) return e.toResponse();
        if (e instanceof StoreUnavailableError) return storeUnavailable().toResponse();
        opts.log.error("admin API error", { path: new URL(request.url).pathname, error: String((e as Error)?.stack ?? e) });
        return internalError().toResponse();
      }
    },
  };
}

async function readBody(request: Request, schema: TSchema): Promise<unknown> {
  const type = (request.headers.get("content-type") ?? "").split(";")[0]!.trim().toLowerCase();
  if (type !== "application/json") throw badRequest("Send the request body as JSON (Content-Type: application/json).", null, "invalid_body");
  const { value } = await readJsonText(request, MAX_BODY_BYTES);
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw badRequest("The request body must be a JSON object.", null, "invalid_body");
  const problem = findProblem(schema, value);
  if (problem) throw badRequest(problem.message, problem.param, "invalid_value");
  return value;
}
