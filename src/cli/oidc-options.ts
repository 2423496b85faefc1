// serve's single sign-on flags: the workspace signs in through an OpenID provider (see
// docs/SSO.md). The client secret is best given by file or SLUICE_OIDC_CLIENT_SECRET: a command
// line is visible to every user of the machine in ps.
import { readFileSync } from "node:fs";
import type { ServeOptions } from "../server.ts";
import { checkIssuerUrl, parseClaimRule } from "../workspace/oidc-rules.ts";
import { UsageError, type CommandArgs, type OptionSpec } from "./framework.ts";

export const OIDC_OPTIONS: OptionSpec[] = [
  { name: "oidc-issuer", type: "string", help: "Sign in to the workspace through this OpenID provider (its issuer URL, e.g. https://keycloak.example.com/realms/acme); see docs/SSO.md" },
  { name: "oidc-client-id", type: "string", help: "With --oidc-issuer: the client id registered at the provider" },
  { name: "oidc-client-secret-file", type: "string", help: "With --oidc-issuer: a file holding the client secret (none and no SLUICE_OIDC_CLIENT_SECRET: a public client, PKCE only)" },
  { name: "oidc-client-secret", type: "string", help: "With --oidc-issuer: the client secret (prefer the variable or --oidc-client-secret-file: a command line shows in ps)" },
  { name: "oidc-provider-name", type: "string", help: 'The sign-in button says "Sign in with NAME"', default: "SSO" },
  { name: "oidc-scopes", type: "string", help: "Scopes asked for (space-separated; add e.g. groups where the provider sends groups only on request)", default: "openid email profile" },
  { name: "oidc-account", type: "string", help: "Create users the provider vouches for in this account when no user has their email (unset: only existing users may sign in)" },
  { name: "oidc-operator-claim", type: "string", help: "CLAIM=VALUE: the user is an operator while the claim holds VALUE (a list containing it, or equal to it), else a member, set at each sign-in, e.g. groups=sluice-admins or realm_access.roles=operator (unset: roles stay as the CLI sets them)" },
  { name: "oidc-redirect-uri", type: "string", help: "The redirect URI registered at the provider (default: --public-url, else the workspace's address, + /workspace/oidc/callback)" },
  { name: "no-password-sign-in", type: "boolean", help: "Turn the workspace's email and password sign-in off (needs --oidc-issuer)" },
];

const str = (v: string | boolean | undefined) => (typeof v === "string" && v.trim() !== "" ? v.trim() : undefined);

export function parseOidcOptions(args: CommandArgs): Pick<ServeOptions, "oidc" | "passwordSignIn"> {
  const issuer = str(args.values["oidc-issuer"]);
  const passwordSignIn = args.values["no-password-sign-in"] !== true;
  if (!issuer) {
    const stray = OIDC_OPTIONS.find((o) => o.name.startsWith("oidc-") && o.default === undefined && str(args.values[o.name]) !== undefined);
    if (stray) throw new UsageError(`--${stray.name} needs --oidc-issuer`);
    if (!passwordSignIn) throw new UsageError("--no-password-sign-in needs --oidc-issuer: no one could sign in to the workspace");
    return { passwordSignIn };
  }
  try {
    checkIssuerUrl(issuer);
  } catch (e) {
    throw new UsageError(`--oidc-issuer: ${(e as Error).message}`);
  }
  const clientId = str(args.values["oidc-client-id"]);
  if (!clientId) throw new UsageError("--oidc-client-id is required with --oidc-issuer");
  const file = str(args.values["oidc-client-secret-file"]);
  const given = str(args.values["oidc-client-secret"]);
  if (file && given) throw new UsageError("give the client secret once: --oidc-client-secret-file or --oidc-client-secret (SLUICE_OIDC_CLIENT_SECRET), not both");
  let clientSecret = given;
  if (file) {
    try {
      clientSecret = readFileSync(file, "utf8").trim();
    } catch (e) {
      throw new UsageError(`--oidc-client-secret-file: cannot read ${file}: ${(e as Error).message}`);
    }
    if (!clientSecret) throw new UsageError(`--oidc-client-secret-file: ${file} is empty`);
  }
  const scopes = str(args.values["oidc-scopes"]) ?? "openid email profile";
  const words = scopes.split(/\s+/);
  if (!words.includes("openid") || !words.includes("email")) throw new UsageError("--oidc-scopes must include openid and email: users are matched by their email");
  let operatorClaim;
  const rule = str(args.values["oidc-operator-claim"]);
  if (rule) {
    try {
      operatorClaim = parseClaimRule(rule);
    } catch (e) {
      throw new UsageError(`--oidc-operator-claim: ${(e as Error).message}`);
    }
  }
  const redirectUri = str(args.values["oidc-redirect-uri"]);
  if (redirectUri && !/^https?:\/\/[^/\s]+\/\S*$/.test(redirectUri)) throw new UsageError("--oidc-redirect-uri must be an http(s) URL");
  return {
    passwordSignIn,
    oidc: {
      issuer,
      clientId,
      clientSecret,
      providerName: str(args.values["oidc-provider-name"]) ?? "SSO",
      scopes: words.join(" "),
      account: str(args.values["oidc-account"]),
      operatorClaim,
      redirectUri,
    },
  };
}
