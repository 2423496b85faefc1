// The Elysia application: wires routes to the store and the engine and turns every failure into
// an OpenAI-shaped error. Knows nothing of ONNX: it sees the engine only through engine/types.ts.
import { Elysia } from "elysia";
import type { Engine } from "../engine/types.ts";
import type { Logger } from "../log.ts";
import type { CatalogModel, Store } from "../store/index.ts";
import { authenticate } from "./auth.ts";
import { handleChat } from "./chat/handler.ts";
import { ApiError, internalError, modelNotFound } from "./errors.ts";
import { metricsResponse } from "./metrics.ts";
import { Lifecycle } from "./lifecycle.ts";
import { allowedMethods, isUnsupportedRoute, SUPPORTED_SUMMARY } from "./routes.ts";
import type { ModelObject } from "./schemas.ts";

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
    pricing: { input_per_million_tokens: m.inputPricePerMTok, output_per_million_tokens: m.outputPricePerMTok },
  };
}

function baseUrl(opts: ApiOptions, request: Request): string {
  if (opts.publicUrl) return opts.publicUrl.replace(/\/+$/, "");
  const url = new URL(request.url);
  const host = request.headers.get("host") ?? url.host;
  return `${url.protocol}//${host}`;
}

let requestCounter = 0;
const newRequestId = () =>
  `${Date.now().toString(36)}${(requestCounter++ % 1679616).toString(36).padStart(4, "0")}${Math.random().toString(36).slice(2, 8)}`;

export function createApi(opts: ApiOptions) {
  const { store, log } = opts;
  const maxBodyBytes = opts.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  const fingerprint = `fp_sluice_${opts.version}`;
  const lifecycle = opts.lifecycle ?? new Lifecycle();

  return new Elysia()
    .derive(({ request }) => {
      const supplied = request.headers.get("x-request-id");
      const requestId = supplied && /^[A-Za-z0-9._:-]{1,128}$/.test(supplied) ? supplied : newRequestId();
      return { requestId, started: performance.now() };
    })
    .onBeforeHandle(({ path, requestId }) => {
      // While draining, liveness and readiness still answer; nothing new is started.
      if (lifecycle.draining && path !== "/health" && path !== "/ready") {
        return new ApiError(503, "The server is shutting down; retry on another instance.", "service_unavailable", null, "shutting_down", {
          "retry-after": "1",
        }).toResponse({ "x-request-id": requestId });
      }
    })
    .onAfterHandle(({ set, requestId }) => {
      set.headers["x-request-id"] = requestId;
    })
    .onError(({ code, error, request, requestId, path }) => {
      const rid = requestId ?? newRequestId();
      const headers = { "x-request-id": rid };
      if (error instanceof ApiError) return error.toResponse(headers);
      if (code === "NOT_FOUND") {
        const pathname = new URL(request.url).pathname;
        if (isUnsupportedRoute(pathname)) {
          return new ApiError(
            404,
            `${request.method} ${pathname} is not supported by this server. ${SUPPORTED_SUMMARY}`,
            "invalid_request_error",
            null,
            "unsupported_endpoint",
          ).toResponse(headers);
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
          ).toResponse(headers);
        }
        return new ApiError(
          404,
          `Invalid URL (${request.method} ${pathname}). ${SUPPORTED_SUMMARY}`,
          "invalid_request_error",
          null,
          "unknown_url",
        ).toResponse(headers);
      }
      if (code === "PARSE") {
        return new ApiError(400, "The request body could not be parsed.", "invalid_request_error", null, "invalid_body").toResponse(headers);
      }
      log.error("unhandled error", { request_id: rid, path, error: String((error as Error)?.stack ?? error) });
      return internalError().toResponse(headers);
    })
    .get("/health", () => ({ status: "ok" }))
    .get("/metrics", () => metricsResponse(opts.engine))
    .get("/ready", ({ set }) => {
      const storeOk = store.healthy();
      const ready = storeOk && opts.ready() && !lifecycle.draining;
      if (!ready) set.status = 503;
      return { ready, store: storeOk, models: store.catalog.listServed().length };
    })
    .get("/v1/integrations", ({ request }) => {
      const base = baseUrl(opts, request);
      return {
        object: "integrations",
        base_url: `${base}/v1`,
        models: store.catalog.listServed().map((m) => m.id),
        api_key_env: "OPENAI_API_KEY",
        docs: `${base}/workspace/integrations`,
      };
    })
    .get("/v1/models", ({ request }) => {
      const key = authenticate(store, request);
      return { object: "list", data: store.catalog.listForAccount(key.accountId).map(modelObject) };
    })
    .get("/v1/models/*", ({ request, params }) => {
      const key = authenticate(store, request);
      const id = decodeURIComponent(params["*"]);
      const m = store.catalog.getForAccount(key.accountId, id);
      if (!m) throw modelNotFound(id);
      return modelObject(m);
    })
    .post("/v1/chat/completions", ({ request, requestId }) =>
      handleChat({ store, engine: opts.engine, log, maxBodyBytes, systemFingerprint: fingerprint, lifecycle }, request, requestId),
      { parse: "none" },
    );
}

export type Api = ReturnType<typeof createApi>;
