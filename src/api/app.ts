// The Elysia application: wires routes to the store and the engine and turns every failure into
// an OpenAI-shaped error. Knows nothing of ONNX: it sees the engine only through engine/types.ts.
import { Elysia } from "elysia";
import type { Engine } from "../engine/types.ts";
import type { Logger } from "../log.ts";
import { StoreUnavailableError, type ApiKeyInfo, type CatalogModel, type Store } from "../store/index.ts";
import { authenticate } from "./auth.ts";
import { handleChat } from "./chat/handler.ts";
import { ApiError, internalError, modelNotFound, storeUnavailable } from "./errors.ts";
import { DEFAULT_REQUEST_LIMITS, type RequestLimits } from "./limits/request-limits.ts";
import { RateGuard } from "./limits/guard.ts";
import type { RequestScope } from "./limits/scope.ts";
import { HttpMetrics, metricsResponse, routeLabel, type RequestCounter } from "./metrics.ts";
import { Lifecycle } from "./lifecycle.ts";
import { allowedMethods, isUnsupportedRoute, SUPPORTED_SUMMARY } from "./routes.ts";
import type { ModelObject } from "./schemas.ts";
import type { Maybe } from "./maybe.ts";
import type { ChatForwarding } from "./chat/forwarding.ts";
import type { Tracing } from "./tracing/tracer.ts";

export interface ApiOptions {
  store: Store;
  engine: Engine;
  log: Logger;
  /** Public base URL without /v1 (e.g. https://llm.example.com); else derived from the Host. */
  publicUrl?: string;
  maxBodyBytes?: number;
  /** True once models are loaded and the server takes traffic. */
  ready: () => boolean;
  version: string;
  lifecycle?: Lifecycle;
  /** Request limits (body size, messages, max_tokens, wall time, idle streams); defaults otherwise. */
  limits?: Partial<RequestLimits>;
  metrics?: HttpMetrics;
  /** Per-account and per-key rate limits; one is made from the store when absent. */
  guard?: RateGuard;
  /** This process's node id: the requests it runs are registered in flight under it. */
  nodeId?: string;
  /** Several nodes on one database: forwarding of requests for models served elsewhere. */
  forwarding?: ChatForwarding;
  /** OpenTelemetry traces of chat requests (absent: off). */
  tracing?: Tracing;
  /** Where the account workspace is, for `GET /` (a browser pointed at the server's address). */
  workspaceUrl?: (request: Request) => string;
}

const escapeHtml = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

/** `GET /` in a browser: where the API and the workspace are, instead of a bare JSON 404. */
function rootPage(api: string, workspace: string | null): Response {
  const link = (u: string) => `<a href="${escapeHtml(u)}">${escapeHtml(u)}</a>`;
  const body = `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>Sluice</title></head>
<body style="font: 16px/1.5 system-ui, sans-serif; max-width: 40em; margin: 2em auto; padding: 0 1em">
<h1>Sluice</h1>
<p>This server speaks the OpenAI chat-completions API: point a client at the base URL <code>${escapeHtml(api)}</code> with an API key.</p>
${workspace ? `<p>Keys, usage, models and billing: the account workspace at ${link(workspace)}.</p>` : ""}
</body></html>`;
  return new Response(body, { headers: { "content-type": "text/html; charset=utf-8", "cache-control": "no-store", "x-content-type-options": "nosniff", "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'" } });
}

export const DEFAULT_MAX_BODY_BYTES = 20 * 1024 * 1024;

function modelObject(m: CatalogModel): ModelObject {
  return {
    id: m.id,
    object: "model",
    created: Math.floor(m.createdAt / 1000),
    owned_by: m.ownedBy,
    context_length: m.contextLength,
    max_model_len: m.contextLength,
    capabilities: { tools: m.supportsTools, structured_output: m.supportsStructured, images: m.supportsImages },
    sluice: { tool_format: m.toolFormat },
    pricing: {
      input_per_million_tokens: m.inputPricePerMTok,
      cached_input_per_million_tokens: m.cachedInputPricePerMTok ?? m.inputPricePerMTok,
      output_per_million_tokens: m.outputPricePerMTok,
    },
  };
}

function baseUrl(opts: ApiOptions, request: Request): string {
  if (opts.publicUrl) return opts.publicUrl.replace(/\/+$/, "");
  const url = new URL(request.url);
  const host = request.headers.get("host") ?? url.host;
  return `${url.protocol}//${host}`;
}

// A random prefix per process and a counter: unique across restarts and instances, and cheap
// (it is made for every request that does not bring its own id).
const ID_PREFIX = Date.now().toString(36) + [...crypto.getRandomValues(new Uint8Array(6))].map((b) => (b % 36).toString(36)).join("");
// Starting at 36^4 keeps the counter part at least five digits wide without padding each id.
let requestCounter = 36 ** 4;
const newRequestId = () => ID_PREFIX + (requestCounter++).toString(36);

export function createApi(opts: ApiOptions) {
  const { store, log } = opts;
  const limits: RequestLimits = { ...DEFAULT_REQUEST_LIMITS, maxBodyBytes: opts.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES, ...opts.limits };
  const maxBodyBytes = limits.maxBodyBytes;
  const fingerprint = `fp_sluice_${opts.version}`;
  const lifecycle = opts.lifecycle ?? new Lifecycle();
  const metrics = opts.metrics ?? new HttpMetrics();
  const guard = opts.guard ?? new RateGuard(store);
  const nodeId = opts.forwarding?.nodeId ?? opts.nodeId ?? "local";

  /** One access log line and the request metrics per answer: never keys, prompts or query strings. */
  const observe = (request: Request, scope: RequestScope | undefined, status: number, errorCode?: string | null) => {
    const url = request.url;
    const from = url.indexOf("/", url.indexOf("//") + 2);
    const q = url.indexOf("?", from);
    const pathname = from < 0 ? "/" : url.slice(from, q < 0 ? undefined : q);
    const route = routeLabel(pathname);
    const seconds = scope ? (performance.now() - scope.started) / 1000 : 0;
    metrics.request(route, request.method, status, seconds);
    if (status >= 400) metrics.error(route, status, errorCode ?? null);
    scope?.trace?.answered(status, errorCode);
    log.info("request", {
      request_id: scope?.requestId ?? null,
      method: request.method,
      route,
      path: pathname.slice(0, 256),
      status,
      latency_ms: Math.round(seconds * 1e4) / 10,
      account_id: scope?.accountId ?? null,
    });
  };
  // The /v1/models answer per account, valid while the store's cache generation stays the same
  // (any change of catalog, access, keys or limits moves it, from this process or another). Kept
  // as a Response to clone: a clone shares the body and copies the headers natively, cheaper than
  // building a Response and its headers from JavaScript for every request.
  const modelLists = new Map<number | string, Response>();
  let modelListsAt = -1;
  /** The key's models: its account's, narrowed to the key's own list when it has one. */
  const modelList = (key: ApiKeyInfo): Maybe<Response> => {
    const generation = store.cacheGeneration();
    if (generation !== modelListsAt) {
      modelLists.clear();
      modelListsAt = generation;
    }
    const only = key.models;
    // Keys with a list of their own are cached per key (a list change moves the generation).
    const slot = only === null ? key.accountId : `key:${key.id}`;
    const template = modelLists.get(slot);
    if (template !== undefined) return template.clone();
    return store.catalog.listForAccount(key.accountId).then((all) => {
      const models = only === null ? all : all.filter((m) => only.includes(m.id));
      const body = JSON.stringify({ object: "list", data: models.map(modelObject) });
      const made = new Response(body, { headers: { "content-type": "application/json" } });
      // Kept only if nothing changed while the list was read.
      if (store.cacheGeneration() === modelListsAt && modelListsAt === generation) {
        if (modelLists.size >= 1024) modelLists.clear();
        modelLists.set(slot, made);
      }
      return made.clone();
    });
  };
  /** Authenticates, notes the account for the access log, and counts the request against its rate limits. */
  // Written out rather than through then(): the cached case makes no closure and no promise.
  const admitted = (request: Request, scope: RequestScope): Maybe<ApiKeyInfo> => {
    const key = authenticate(store, request);
    return key instanceof Promise ? key.then((k) => admitKey(k, scope)) : admitKey(key, scope);
  };
  const admitKey = (key: ApiKeyInfo, scope: RequestScope): Maybe<ApiKeyInfo> => {
    scope.accountId = key.accountId;
    const ticket = guard.admit(key, 0, false, scope);
    return ticket instanceof Promise ? ticket.then(() => key) : key;
  };

  const newScope = (request: Request): RequestScope => {
    const supplied = request.headers.get("x-request-id");
    const requestId = supplied && /^[A-Za-z0-9._:-]{1,128}$/.test(supplied) ? supplied : newRequestId();
    return { requestId, started: performance.now(), accountId: null, headers: {} };
  };
  const shuttingDown = () =>
    new ApiError(503, "The server is shutting down; retry on another instance.", "service_unavailable", null, "shutting_down", { "retry-after": "1" });

  /** An ApiError for any failure: the store being down is a 503, anything unknown a logged 500. */
  const asKnownError = (e: unknown, requestId: string, path: string): ApiError => {
    if (e instanceof ApiError) return e;
    if (e instanceof StoreUnavailableError) {
      log.warn("database unavailable", { request_id: requestId, path, error: e.message });
      return storeUnavailable();
    }
    log.error("unhandled error", { request_id: requestId, path, error: String((e as Error)?.stack ?? e) });
    return internalError();
  };

  let modelsOk: RequestCounter | null = null;
  /**
   * GET /v1/models straight from Bun's router, without Elysia's per-request hooks: the route
   * clients poll most. The same steps as the hooks: request id, draining, authentication, rate
   * limits, headers, one access line and the metrics.
   */
  const fastModelList = (request: Request): Maybe<Response> => {
    const scope = newScope(request);
    try {
      if (lifecycle.draining) throw shuttingDown();
      const key = admitted(request, scope);
      const res = key instanceof Promise ? key.then((k) => modelList(k)) : modelList(key);
      if (!(res instanceof Promise)) return modelsAnswered(request, scope, res);
      return res.then(
        (r) => modelsAnswered(request, scope, r),
        (e) => modelsFailed(request, scope, e),
      );
    } catch (e) {
      return modelsFailed(request, scope, e);
    }
  };
  const modelsFailed = (request: Request, scope: RequestScope, e: unknown): Response => {
    const failure = asKnownError(e, scope.requestId, "/v1/models");
    observe(request, scope, failure.status, failure.code);
    return failure.toResponse({ ...scope.headers, "x-request-id": scope.requestId });
  };
  const modelsAnswered = (request: Request, scope: RequestScope, res: Response): Response => {
    const headers = res.headers;
    headers.set("x-request-id", scope.requestId);
    for (const k in scope.headers) headers.set(k, scope.headers[k]!);
    // The access line and metrics of `observe`, with what this route already knows (its path and
    // label; Bun's router matched the path exactly) instead of parsing the URL again.
    const seconds = (performance.now() - scope.started) / 1000;
    const method = request.method;
    (method === "GET" ? (modelsOk ??= metrics.counter("/v1/models", "GET", 200)) : metrics.counter("/v1/models", method, 200)).add(seconds);
    // The same access line `observe` writes, serialised here: every value's type is known.
    log.json(
      "info",
      "request",
      `{"request_id":${JSON.stringify(scope.requestId)},"method":${method === "GET" ? '"GET"' : JSON.stringify(method)},"route":"/v1/models","path":"/v1/models","status":200,"latency_ms":${Math.round(seconds * 1e4) / 10},"account_id":${scope.accountId}}`,
    );
    return res;
  };

  // Bun's own routes take precedence over Elysia's for the same path and method when listening;
  // `api.handle()` (no listener) still goes through the Elysia route below, to the same answer.
  return new Elysia({ serve: { routes: { "/v1/models": { GET: fastModelList } } } })
    .derive(({ request }) => {
      const scope = newScope(request);
      return { requestId: scope.requestId, started: scope.started, scope };
    })
    .onBeforeHandle(({ path, requestId, request, scope }) => {
      // While draining, liveness and readiness still answer; nothing new is started.
      if (lifecycle.draining && path !== "/health" && path !== "/ready") {
        observe(request, scope, 503, "shutting_down");
        return shuttingDown().toResponse({ "x-request-id": requestId });
      }
    })
    .onAfterHandle((ctx) => {
      const { set, requestId, scope, request } = ctx;
      const value = (ctx as { responseValue?: unknown }).responseValue;
      if (value instanceof Response) {
        // Set on the Response itself: going through set.headers makes Elysia copy the answer.
        value.headers.set("x-request-id", requestId);
        for (const k in scope.headers) value.headers.set(k, scope.headers[k]!);
        observe(request, scope, value.status);
        return;
      }
      set.headers["x-request-id"] = requestId;
      for (const k in scope.headers) set.headers[k] = scope.headers[k]!;
      observe(request, scope, typeof set.status === "number" ? set.status : 200);
    })
    .onError((ctx) => {
      const { code, error, request, path } = ctx;
      // Absent when routing failed before the derive step (an unknown URL): made here, so that
      // the access line carries the id the answer does.
      const scope = (ctx as { scope?: RequestScope }).scope ?? newScope(request);
      const rid = scope.requestId;
      const headers = { ...scope.headers, "x-request-id": rid };
      const failure = asApiError();
      observe(request, scope, failure.status, failure.code);
      return failure.toResponse(headers);
      function asApiError(): ApiError {
        if (error instanceof ApiError) return error;
        if (code === "NOT_FOUND") {
          const pathname = new URL(request.url).pathname;
          if (isUnsupportedRoute(pathname)) {
            return new ApiError(
              404,
              `${request.method} ${pathname} is not supported by this server. ${SUPPORTED_SUMMARY}`,
              "invalid_request_error",
              null,
              "unsupported_endpoint",
            );
          }
          const allowed = allowedMethods(pathname);
          if (allowed) {
            return new ApiError(
              405,
              `Method ${request.method} is not allowed on ${pathname}; use ${allowed.join(", ")}.`,
              "invalid_request_error",
              null,
              "method_not_allowed",
              { allow: allowed.join(", ") },
            );
          }
          return new ApiError(
            404,
            `Invalid URL (${request.method} ${pathname}). ${SUPPORTED_SUMMARY}`,
            "invalid_request_error",
            null,
            "unknown_url",
          );
        }
        if (code === "PARSE") {
          return new ApiError(400, "The request body could not be parsed.", "invalid_request_error", null, "invalid_body");
        }
        return asKnownError(error, rid, path);
      }
    })
    .get("/", ({ request }) => {
      const base = baseUrl(opts, request);
      const workspace = opts.workspaceUrl?.(request) ?? null;
      if ((request.headers.get("accept") ?? "").includes("text/html")) return rootPage(`${base}/v1`, workspace);
      throw new ApiError(404, `Invalid URL (GET /). ${SUPPORTED_SUMMARY} The base URL is ${base}/v1${workspace ? `; the account workspace is at ${workspace}` : ""}.`, "invalid_request_error", null, "unknown_url");
    })
    .get("/health", () => ({ status: "ok" }))
    .get("/metrics", () => metricsResponse(opts.engine, metrics, opts.tracing))
    .get("/ready", async ({ set }) => {
      const storeOk = await store.healthy();
      const ready = storeOk && opts.ready() && !lifecycle.draining;
      if (!ready) set.status = 503;
      return { ready, store: storeOk, models: storeOk ? (await store.catalog.listServed()).length : null };
    })
    .get("/v1/integrations", async ({ request }) => {
      const base = baseUrl(opts, request);
      return {
        object: "integrations",
        base_url: `${base}/v1`,
        models: (await store.catalog.listServed()).map((m) => m.id),
        api_key_env: "OPENAI_API_KEY",
        docs: `${base}/workspace/integrations`,
      };
    })
    .get("/v1/models", async ({ request, scope }) => {
      const key = await admitted(request, scope);
      return modelList(key);
    })
    .get("/v1/models/*", async ({ request, params, scope }) => {
      const key = await admitted(request, scope);
      let id: string;
      try {
        id = decodeURIComponent(params["*"]);
      } catch {
        throw modelNotFound(params["*"].slice(0, 256));
      }
      const m = await store.catalog.getForAccount(key.accountId, id);
      if (!m || (key.models !== null && !key.models.includes(m.id))) throw modelNotFound(id);
      return modelObject(m);
    })
    .post(
      "/v1/chat/completions",
      ({ request, requestId, scope }) => {
        if (opts.tracing) {
          // From the request's arrival; its response (error or not) names the trace.
          scope.trace = opts.tracing.start(request, scope.started, "/v1/chat/completions");
          Object.assign(scope.headers, scope.trace.responseHeaders());
        }
        return handleChat(
          { store, engine: opts.engine, log, maxBodyBytes, systemFingerprint: fingerprint, lifecycle, guard, limits, metrics, nodeId, forwarding: opts.forwarding },
          request,
          requestId,
          scope,
        );
      },
      { parse: "none" },
    );
}

export type Api = ReturnType<typeof createApi>;
