// Single sign-on: /oidc/start sends the browser to the OpenID provider, /oidc/callback brings it
// back. The state travels twice, in the provider's redirect and in a cookie of this browser, and
// both must agree: a callback made for someone else's browser (login CSRF) opens nothing. Who may
// sign in: a user whose email the provider says is verified; a new one is created in the
// configured account. With an operator rule, the role follows the provider at every sign-in.
import { auditedStore, type User, type UserRole } from "../../store/index.ts";
import { clearCookie, cookies, redirect, sameToken, setCookie } from "../http.ts";
import { OIDC_CALLBACK_PATH, OIDC_LOGIN_TTL_MS, OidcSignInError, type OidcIdentity } from "../oidc.ts";
import { claimMatches } from "../oidc-rules.ts";
import type { BaseCtx, Route } from "../router.ts";
import { notFoundPage } from "./errors.ts";
import { signInPage, startSession } from "./signin.ts";

/** Holds the state of the sign-in this browser began, until the provider sends it back. */
export const OIDC_COOKIE = "sluice_oidc";

async function signInUser(c: BaseCtx, who: OidcIdentity): Promise<User> {
  // What SSO changes goes to the audit log as done by the person signing in, through the provider.
  const audited = auditedStore(c.store, { kind: "workspace", name: `${who.email} (single sign-on, ${who.issuer})`, source: c.client ?? null });
  const oidc = c.opts.oidc!;
  const { settings } = oidc;
  if (!who.email) throw new OidcSignInError(`${settings.providerName} did not give an email address for you (ask for the email scope).`);
  if (!who.emailVerified) throw new OidcSignInError(`${settings.providerName} has not verified your email address ${who.email}, so it cannot be matched to a workspace user.`);
  const role: UserRole | null = settings.operatorClaim ? (claimMatches(settings.operatorClaim, who.claims) ? "operator" : "member") : null;
  const existing = await c.store.users.getByEmail(who.email);
  if (!existing) {
    if (!settings.account) throw new OidcSignInError(`No workspace user has the email ${who.email}. Ask an operator of this server to add you.`);
    const account = await c.store.accounts.get(settings.account);
    if (!account) {
      c.opts.log.error("the account for new SSO users does not exist", { account: settings.account });
      throw new OidcSignInError(`No workspace user has the email ${who.email}, and the account for new users is missing. Ask an operator of this server.`, 500);
    }
    const user = await audited.users.create({ accountId: account.id, email: who.email, password: null, role: role ?? "member" });
    c.opts.log.info("workspace user created by single sign-on", { user: user.id, account: account.name, role: user.role });
    // In the audit log already (users.create); the hook tells an embedding program too.
    await c.opts.ssoAudit?.({ action: "user.created", userId: user.id, email: user.email, account: account.name, role: user.role, via: "oidc", issuer: who.issuer, subject: who.subject });
    return user;
  }
  if (role && role !== existing.role) {
    await audited.users.setRole(existing.id, role);
    c.opts.log.info("workspace role changed by single sign-on", { user: existing.id, before: existing.role, after: role, rule: settings.operatorClaim!.text });
    // In the audit log already (users.setRole); the hook tells an embedding program too.
    await c.opts.ssoAudit?.({ action: "user.role_changed", userId: existing.id, email: existing.email, before: existing.role, after: role, via: "oidc", issuer: who.issuer, subject: who.subject });
    return { ...existing, role };
  }
  return existing;
}

const refused = (c: BaseCtx, e: OidcSignInError) => {
  const res = signInPage(c, { status: e.status, error: e.message });
  res.headers.append("set-cookie", clearCookie(c.request, OIDC_COOKIE));
  return res;
};

export const ssoRoutes: Route[] = [
  {
    method: "GET",
    path: "/oidc/start",
    access: "public",
    async handle(c) {
      if (!c.opts.oidc) return notFoundPage(c);
      try {
        const { url, state } = await c.opts.oidc.begin();
        return redirect(url.href, { "set-cookie": setCookie(c.request, OIDC_COOKIE, state, { maxAgeSeconds: OIDC_LOGIN_TTL_MS / 1000 }) });
      } catch (e) {
        if (e instanceof OidcSignInError) return refused(c, e);
        throw e;
      }
    },
  },
  {
    method: "GET",
    path: OIDC_CALLBACK_PATH,
    access: "public",
    async handle(c) {
      const oidc = c.opts.oidc;
      if (!oidc) return notFoundPage(c);
      const query = c.url.searchParams;
      const state = query.get("state");
      try {
        const error = query.get("error");
        if (error) {
          // The provider refused (the person cancelled, or may not use this client): its words.
          const description = query.get("error_description");
          throw new OidcSignInError(`${oidc.settings.providerName} did not sign you in: ${description ? `${description} (${error})` : error}.`);
        }
        if (!state || !sameToken(cookies(c.request).get(OIDC_COOKIE), state)) {
          c.opts.log.warn("SSO callback refused: its state is not the one this browser was sent with", { client: c.client });
          throw new OidcSignInError("This sign-in was not started from this browser. Please start again.");
        }
        const user = await signInUser(c, await oidc.finish(query, state));
        return startSession(c, user.id, [OIDC_COOKIE]);
      } catch (e) {
        if (e instanceof OidcSignInError) return refused(c, e);
        throw e;
      }
    },
  },
];
