// The account workspace: a server-rendered web application at /workspace/, separate from the
// public API. `createWorkspace(...).fetch` answers any request under /workspace; the server mounts
// it on the API's port or on a port of its own.
import type { SessionInfo, User } from "../store/index.ts";
import { ASSETS } from "./assets.ts";
import { faviconResponse } from "./favicon.ts";
import { clearFlash, FLASH_COOKIE, readFlash, redirectWithFlash } from "./flash.ts";
import { BodyError, cookies, json, readFields, redirect, SESSION_COOKIE, sameToken } from "./http.ts";
import { BASE } from "./layout.ts";
import { adminRoutes } from "./pages/admin.ts";
import { apiRoutes } from "./pages/api.ts";
import { billingRoutes } from "./pages/billing.ts";
import { errorPage, notFoundPage } from "./pages/errors.ts";
import { hubPullRoutes } from "./pages/hub-pull.ts";
import { integrationRoutes } from "./pages/integrations.ts";
import { keyRoutes } from "./pages/keys.ts";
import { modelRoutes } from "./pages/models.ts";
import { residencyRoutes } from "./pages/residency.ts";
import { signInRoutes } from "./pages/signin.ts";
import { usageRoutes } from "./pages/usage.ts";
import { compile, match, type BaseCtx, type SignedCtx, type WorkspaceOptions } from "./router.ts";

export type { WorkspaceOptions } from "./router.ts";
export { BASE as WORKSPACE_PATH } from "./layout.ts";

export interface Workspace {
  /** Answers a request whose path starts with /workspace, or /favicon.ico; `client` is the peer address for throttling. */
  fetch(request: Request, client?: string | null): Promise<Response>;
}

/** As serve's --body-timeout-seconds by default. */
const DEFAULT_BODY_TIMEOUT_MS = 30_000;

const ROUTES = [...signInRoutes, ...keyRoutes, ...usageRoutes, ...modelRoutes, ...integrationRoutes, ...billingRoutes, ...adminRoutes, ...residencyRoutes, ...hubPullRoutes, ...apiRoutes].map(compile);

export function createWorkspace(opts: WorkspaceOptions): Workspace {
  const { store, log } = opts;

  async function signedIn(request: Request): Promise<{ user: User; session: SessionInfo } | null> {
    const token = cookies(request).get(SESSION_COOKIE);
    if (!token) return null;
    const session = await store.sessions.get(token);
    if (!session) return null;
    const user = await store.users.get(session.userId);
    return user ? { user, session } : null;
  }

  async function handle(request: Request, client: string): Promise<Response> {
    const url = new URL(request.url);
    // Browsers ask for /favicon.ico at the root of whatever origin they show, the API's included.
    if ((url.pathname === "/favicon.ico" || url.pathname === `${BASE}/favicon.ico`) && (request.method === "GET" || request.method === "HEAD")) return faviconResponse();
    if (url.pathname === BASE) return redirect(`${BASE}/`);
    if (!url.pathname.startsWith(`${BASE}/`)) return new Response("Not found", { status: 404 });
    const path = url.pathname.slice(BASE.length);
    const isApi = path.startsWith("/api/");

    if (path.startsWith("/assets/") && (request.method === "GET" || request.method === "HEAD")) {
      const asset = ASSETS[path.slice("/assets/".length)];
      if (!asset) return new Response("Not found", { status: 404 });
      return new Response(asset.body, {
        headers: { "content-type": asset.type, "cache-control": "public, max-age=31536000, immutable", "x-content-type-options": "nosniff" },
      });
    }

    const base: BaseCtx = {
      request,
      url,
      params: {},
      opts,
      store,
      client,
      flash: null,
      field: () => "",
      fields: () => [],
    };
    const who = await signedIn(request);
    // A page after a form's redirect shows what the form had to say, once.
    if (request.method === "GET" && !isApi) base.flash = await readFlash(request, who?.session.csrfToken ?? null);

    if (path === "/") return redirect(who ? `${BASE}/keys` : `${BASE}/signin`);

    const found = match(ROUTES, request.method, path);
    if (found === null) return isApi ? json({ error: "not found" }, 404) : who ? notFoundPage({ ...base, ...who }) : notFoundPage(base);
    if (found === "method") return isApi ? json({ error: "method not allowed" }, 405) : errorPage(base, 405, "Method not allowed", "This page does not accept that method.");
    const { route, params } = found;
    base.params = params;

    if (request.method === "POST") {
      let fields: Map<string, string[]>;
      try {
        fields = await readFields(request, opts.bodyTimeoutMs ?? DEFAULT_BODY_TIMEOUT_MS);
      } catch (e) {
        if (!(e instanceof BodyError)) throw e;
        const res = isApi ? json({ error: e.message }, e.status) : errorPage(base, e.status, e.status === 408 ? "Request timeout" : "Bad request", e.message);
        // What is left of a late body is never read: the connection ends with this answer.
        if (e.status === 408) res.headers.set("connection", "close");
        return res;
      }
      base.fields = (n) => fields.get(n) ?? [];
      base.field = (n) => (fields.get(n)?.[0] ?? "").trim();
    }

    if (route.access === "public") return route.handle(base);

    if (!who) {
      if (isApi) return json({ error: "sign in first" }, 401);
      return request.method === "GET" ? redirect(`${BASE}/signin`) : redirectWithFlash(base, `${BASE}/signin`, { error: "Your session has ended. Sign in again." });
    }
    const ctx: SignedCtx = { ...base, ...who };
    if (route.access === "operator" && who.user.role !== "operator") {
      return isApi ? json({ error: "operators only" }, 403) : errorPage(ctx, 403, "Forbidden", "This page is for operators.");
    }
    // Every state-changing request carries the session's CSRF token, in the form or a header.
    if (request.method === "POST") {
      const sent = base.field("_csrf") || request.headers.get("x-csrf-token");
      if (!sameToken(sent, who.session.csrfToken)) {
        log.warn("workspace request refused: missing or wrong CSRF token", { path });
        return isApi ? json({ error: "missing or wrong CSRF token" }, 403) : errorPage(ctx, 403, "Refused", "The form was not sent from this workspace (missing or wrong CSRF token). Reload the page and try again.");
      }
    }
    return route.handle(ctx);
  }

  return {
    async fetch(request, client) {
      try {
        const res = await handle(request, client ?? "unknown");
        // A flash is shown by the first page that reads it, and only by that one.
        if (request.method === "GET" && res.status === 200 && cookies(request).has(FLASH_COOKIE) && (res.headers.get("content-type") ?? "").startsWith("text/html")) {
          res.headers.append("set-cookie", clearFlash(request));
        }
        return request.method === "HEAD" ? new Response(null, { status: res.status, headers: res.headers }) : res;
      } catch (e) {
        log.error("workspace error", { path: new URL(request.url).pathname, error: String((e as Error)?.stack ?? e) });
        return new Response("The workspace had an error.", { status: 500, headers: { "content-type": "text/plain; charset=utf-8" } });
      }
    },
  };
}
