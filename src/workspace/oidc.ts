// Workspace sign-in through an OpenID provider: the authorization code flow with PKCE, through
// panva's openid-client (v6, over oauth4webapi: OpenID-certified, kept up, no dependency but jose's
// author's own code, and written for the web's fetch and WebCrypto, so it runs on Bun as it is).
// The library checks the state, the nonce, the issuer, the audience, the expiry and, with
// enableNonRepudiationChecks, the ID token's signature against the provider's published keys.
// What this module adds: where a sign-in waits between the two legs (the store, so any node can
// finish it, once), which claims decide who signs in, and the operator rule.
import * as oidc from "openid-client";
import type { Logger } from "../log.ts";
import type { Store, UserRole } from "../store/index.ts";
import { issuerAllowsHttp, type ClaimRule } from "./oidc-rules.ts";

/** How long a sign-in may stay at the provider (its login form, a second factor) before it is void. */
export const OIDC_LOGIN_TTL_MS = 10 * 60_000;

/** The path of the callback under the workspace: the redirect URI ends with it. */
export const OIDC_CALLBACK_PATH = "/oidc/callback";

export interface OidcSettings {
  /** The issuer URL; its /.well-known/openid-configuration is read at the first sign-in. */
  issuer: string;
  clientId: string;
  /** Absent: a public client, which proves itself by PKCE alone. */
  clientSecret?: string;
  /** Shown as "Sign in with <name>". */
  providerName: string;
  /** Space-separated; must include openid and email. */
  scopes: string;
  /** Users the provider vouches for whose email no user has are created in this account; absent: refused. */
  account?: string;
  /** Makes a user an operator at each sign-in when this matches, a member when it does not; absent: roles are left alone. */
  operatorClaim?: ClaimRule;
  /** The redirect URI registered at the provider (the server's public URL + /workspace/oidc/callback). */
  redirectUri: () => string;
}

/** What the provider vouched for, after every check. */
export interface OidcIdentity {
  issuer: string;
  subject: string;
  email: string | null;
  emailVerified: boolean;
  /** The ID token's claims over the userinfo endpoint's (the signed token wins where both say). */
  claims: Record<string, unknown>;
}

/** A sign-in that cannot go on; the message is for the person signing in (no secret in it). */
export class OidcSignInError extends Error {
  constructor(
    message: string,
    readonly status = 403,
  ) {
    super(message);
  }
}

/**
 * An audit hook (issue 39's audit log lands on another branch): called after SSO created a user or
 * changed a user's role, so the lead can record it there. Workspace option `ssoAudit`.
 */
export type SsoAuditEvent =
  | { action: "user.created"; userId: number; email: string; account: string; role: UserRole; via: "oidc"; issuer: string; subject: string }
  | { action: "user.role_changed"; userId: number; email: string; before: UserRole; after: UserRole; via: "oidc"; issuer: string; subject: string };

export interface OidcClient {
  readonly settings: OidcSettings;
  /** A new sign-in: the provider's authorization URL, and the state the browser must bring back. */
  begin(): Promise<{ url: URL; state: string }>;
  /** The callback's query checked and the code exchanged: who signed in. Throws OidcSignInError. */
  finish(callbackQuery: URLSearchParams, state: string): Promise<OidcIdentity>;
  /** Reads the provider's configuration now (at start), so a wrong issuer shows in the log before anyone signs in. */
  discover(): Promise<boolean>;
}

export function createOidcClient(settings: OidcSettings, store: Store, log: Logger): OidcClient {
  let config: Promise<oidc.Configuration> | null = null;
  // Discovered once, at the first sign-in; a failure is not kept, so the next sign-in tries again.
  const configuration = () =>
    (config ??= oidc
      .discovery(
        new URL(settings.issuer),
        settings.clientId,
        undefined,
        // client_secret_basic: the method OpenID Connect assumes when a client registers none.
        settings.clientSecret ? oidc.ClientSecretBasic(settings.clientSecret) : oidc.None(),
        { execute: [oidc.enableNonRepudiationChecks, ...(issuerAllowsHttp(settings.issuer) ? [oidc.allowInsecureRequests] : [])] },
      )
      .catch((e) => {
        config = null;
        log.error("OpenID provider discovery failed", { issuer: settings.issuer, error: describe(e) });
        throw new OidcSignInError(`${settings.providerName} cannot be reached just now. Try again in a moment.`, 503);
      }));

  return {
    settings,
    discover: () =>
      configuration().then(
        () => (log.info("OpenID provider ready", { issuer: settings.issuer }), true),
        () => false,
      ),
    async begin() {
      const c = await configuration();
      const state = oidc.randomState();
      const nonce = oidc.randomNonce();
      const codeVerifier = oidc.randomPKCECodeVerifier();
      await store.oidcLogins.begin(state, { nonce, codeVerifier }, OIDC_LOGIN_TTL_MS);
      const url = oidc.buildAuthorizationUrl(c, {
        redirect_uri: settings.redirectUri(),
        scope: settings.scopes,
        code_challenge: await oidc.calculatePKCECodeChallenge(codeVerifier),
        code_challenge_method: "S256",
        state,
        nonce,
      });
      return { url, state };
    },
    async finish(query, state) {
      const c = await configuration();
      const pending = await store.oidcLogins.take(state);
      if (!pending) throw new OidcSignInError("This sign-in has expired or was already used. Please start again.", 400);
      // The redirect URI as registered, with the provider's answer: what the code was issued for,
      // whatever host or proxy the browser came through.
      const callback = new URL(settings.redirectUri());
      callback.search = query.toString();
      let tokens;
      try {
        tokens = await oidc.authorizationCodeGrant(c, callback, {
          pkceCodeVerifier: pending.codeVerifier,
          expectedNonce: pending.nonce,
          expectedState: state,
          idTokenExpected: true,
        });
      } catch (e) {
        log.warn("OpenID sign-in refused", { issuer: settings.issuer, error: describe(e) });
        throw new OidcSignInError(`${settings.providerName} did not confirm this sign-in (${describe(e)}).`);
      }
      const idClaims = tokens.claims()!;
      let userinfo: Record<string, unknown> = {};
      // Code-flow ID tokens often carry only the subject; email and groups come from userinfo
      // (whose subject the library checks against the token's).
      if (c.serverMetadata().userinfo_endpoint) {
        try {
          userinfo = await oidc.fetchUserInfo(c, tokens.access_token, idClaims.sub);
        } catch (e) {
          log.warn("OpenID userinfo request failed", { issuer: settings.issuer, error: describe(e) });
          throw new OidcSignInError(`${settings.providerName} did not say who signed in (${describe(e)}).`);
        }
      }
      const claims: Record<string, unknown> = { ...userinfo, ...idClaims };
      return {
        issuer: idClaims.iss,
        subject: idClaims.sub,
        email: typeof claims.email === "string" && claims.email !== "" ? claims.email : null,
        emailVerified: emailVerified(claims),
        claims,
      };
    },
  };
}

/**
 * Whether the provider vouches for the email: email_verified true (a boolean: absent, "true" or
 * anything else is not). Microsoft Entra ID never sends email_verified for organisational accounts;
 * its optional claim xms_edov (the email's domain is verified by the tenant) stands in for it
 * there, only where email_verified is absent.
 */
export function emailVerified(claims: Record<string, unknown>): boolean {
  if ("email_verified" in claims) return claims.email_verified === true;
  return claims.xms_edov === true;
}

/**
 * A library error as one line: openid-client wraps oauth4webapi's precise error ("JWT signature
 * verification failed", "unexpected JWT \"nonce\" claim value") in a general one, so the innermost
 * message is the one that says what was wrong; its code and the provider's error code follow.
 */
function describe(e: unknown): string {
  let inner = e;
  while (inner instanceof Error && inner.cause instanceof Error) inner = inner.cause;
  if (!(inner instanceof Error)) return String(inner);
  const code = (inner as { code?: unknown }).code ?? (e as { code?: unknown }).code;
  const error = (inner as { error?: unknown }).error ?? (e as { error?: unknown }).error;
  return [inner.message, typeof error === "string" ? error : null, typeof code === "string" ? code : null].filter(Boolean).join(" · ");
}
