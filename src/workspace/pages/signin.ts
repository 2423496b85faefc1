// Sign-in and sign-out. The sign-in form is protected by a double-submit token (cookie + field);
// failures are counted per email and per client in SQLite, so throttling survives restarts.
import { randomBase62 } from "../../store/keys.ts";
import { html } from "../html.ts";
import { clearFlash, redirectWithFlash } from "../flash.ts";
import { clearCookie, cookies, PRE_COOKIE, redirect, SESSION_COOKIE, sameToken, setCookie } from "../http.ts";
import { bare, BASE, htmlResponse } from "../layout.ts";
import type { BaseCtx, Route, SignedCtx } from "../router.ts";

export const DEFAULT_THROTTLE = { windowMs: 15 * 60_000, perEmail: 5, perClient: 30 };
export const DEFAULT_SESSION_TTL_MS = 12 * 3600_000;

function form(c: BaseCtx): Response {
  const opts = { email: c.flash?.fields?.email, error: c.flash?.error };
  const token = randomBase62(32);
  const body = html`<div class="signin">
  <h1>Sign in</h1>
  <p class="lead">Sluice account workspace: API keys, usage, models and billing.</p>
  ${opts.error ? html`<div class="notice error" role="alert">${opts.error}</div>` : ""}
  <form class="panel" method="post" action="${BASE}/signin">
    <input type="hidden" name="_csrf" value="${token}">
    <div class="field"><label for="email">Email</label><input id="email" name="email" type="email" autocomplete="username" required value="${opts.email ?? ""}" autofocus></div>
    <div class="field"><label for="password">Password</label><input id="password" name="password" type="password" autocomplete="current-password" required></div>
    <button type="submit">Sign in</button>
  </form>
  <p class="muted">No account yet? Ask an operator of this server to create one for you.</p>
</div>`;
  return htmlResponse(bare("Sign in", body), 200, {
    "set-cookie": setCookie(c.request, PRE_COOKIE, token, { sameSite: "Strict", maxAgeSeconds: 3600 }),
  });
}

export const signInRoutes: Route[] = [
  { method: "GET", path: "/signin", access: "public", handle: form },
  {
    method: "POST",
    path: "/signin",
    access: "public",
    async handle(c) {
      // Every answer is a redirect: a reload after a failed sign-in shows the form again and
      // sends no password a second time.
      const again = (error: string, email = "") => redirectWithFlash(c, `${BASE}/signin`, { error, fields: { email } });
      if (!sameToken(cookies(c.request).get(PRE_COOKIE), c.field("_csrf"))) return again("The sign-in form expired. Please try again.");
      const email = c.field("email");
      const password = c.fields("password")[0] ?? "";
      const t = c.opts.throttle ?? DEFAULT_THROTTLE;
      const failures = await c.store.signIns.failures(email, c.client, Date.now() - t.windowMs);
      if (failures.email >= t.perEmail || failures.client >= t.perClient) {
        c.opts.log.warn("workspace sign-in throttled", { client: c.client });
        const minutes = Math.ceil(t.windowMs / 60_000);
        return again(`Too many failed sign-ins. Try again in ${minutes} minutes.`, email);
      }
      const user = email && password ? await c.store.users.verify(email, password) : null;
      if (!user) {
        await c.store.signIns.recordFailure(email || "(empty)", c.client);
        return again("Wrong email or password.", email);
      }
      await c.store.signIns.clear(email);
      await c.store.sessions.purgeExpired();
      const ttl = c.opts.sessionTtlMs ?? DEFAULT_SESSION_TTL_MS;
      const { token } = await c.store.sessions.create(user.id, ttl);
      return redirect(`${BASE}/keys`, {
        "set-cookie": [
          setCookie(c.request, SESSION_COOKIE, token, { maxAgeSeconds: Math.floor(ttl / 1000) }),
          clearCookie(c.request, PRE_COOKIE),
          clearFlash(c.request),
        ],
      });
    },
  },
  {
    method: "POST",
    path: "/signout",
    access: "user",
    async handle(c: SignedCtx) {
      const token = cookies(c.request).get(SESSION_COOKIE);
      if (token) await c.store.sessions.destroy(token);
      return redirect(`${BASE}/signin`, { "set-cookie": clearCookie(c.request, SESSION_COOKIE) });
    },
  },
];
