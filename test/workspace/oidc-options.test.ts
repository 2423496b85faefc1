// serve's single sign-on flags as the command line and the environment give them, and the
// operator rule's syntax (docs/SSO.md).
import { describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseCommand, UsageError } from "../../src/cli/framework.ts";
import { parseOidcOptions } from "../../src/cli/oidc-options.ts";
import { serveCommand } from "../../src/cli/serve.ts";
import { emailVerified } from "../../src/workspace/oidc.ts";
import { checkIssuerUrl, claimMatches, parseClaimRule } from "../../src/workspace/oidc-rules.ts";
import { tempDir } from "../helpers/paths.ts";

const parse = (argv: string[], env: Record<string, string> = {}) => parseOidcOptions(parseCommand(serveCommand, argv, env));
const ISSUER = ["--oidc-issuer", "https://id.example.com/realms/acme", "--oidc-client-id", "sluice"];

describe("the operator rule", () => {
  test("CLAIM=VALUE against lists, strings, words and nested claims", () => {
    const groups = parseClaimRule("groups=sluice-admins");
    expect(claimMatches(groups, { groups: ["staff", "sluice-admins"] })).toBe(true);
    expect(claimMatches(groups, { groups: ["staff"] })).toBe(false);
    expect(claimMatches(groups, { groups: "sluice-admins" })).toBe(true);
    expect(claimMatches(groups, {})).toBe(false);
    const nested = parseClaimRule("realm_access.roles=operator");
    expect(claimMatches(nested, { realm_access: { roles: ["operator"] } })).toBe(true);
    expect(claimMatches(nested, { realm_access: ["operator"] })).toBe(false);
    expect(claimMatches(nested, { "realm_access.roles": ["operator"] })).toBe(false);
    expect(claimMatches(parseClaimRule("scp=admin"), { scp: "read admin" })).toBe(true);
    expect(claimMatches(parseClaimRule("admin=true"), { admin: true })).toBe(true);
    // Only the first = separates: a value may hold one (an LDAP group's DN).
    expect(parseClaimRule("memberof=cn=admins,dc=acme")).toMatchObject({ path: ["memberof"], value: "cn=admins,dc=acme" });
    for (const bad of ["groups", "=x", "groups=", "a..b=x"]) expect(() => parseClaimRule(bad)).toThrow(/CLAIM=VALUE/);
  });

  test("issuers are https, or http on a loopback address only", () => {
    expect(() => checkIssuerUrl("https://accounts.google.com")).not.toThrow();
    expect(() => checkIssuerUrl("http://127.0.0.1:9000")).not.toThrow();
    expect(() => checkIssuerUrl("http://id.example.com")).toThrow(/https/);
    expect(() => checkIssuerUrl("id.example.com")).toThrow(/not a URL/);
  });
});

test("an email is verified by email_verified true, or by Entra's xms_edov where email_verified is absent", () => {
  expect(emailVerified({ email_verified: true })).toBe(true);
  for (const v of [false, "true", 1, null]) expect(emailVerified({ email_verified: v })).toBe(false);
  expect(emailVerified({})).toBe(false);
  expect(emailVerified({ xms_edov: true })).toBe(true);
  expect(emailVerified({ email_verified: false, xms_edov: true })).toBe(false);
});

describe("serve's --oidc-* flags", () => {
  test("off without an issuer; the other flags and --no-password-sign-in need one", () => {
    expect(parse([])).toEqual({ passwordSignIn: true });
    expect(() => parse(["--oidc-client-id", "x"])).toThrow(new UsageError("--oidc-client-id needs --oidc-issuer"));
    expect(() => parse(["--no-password-sign-in"])).toThrow(/needs --oidc-issuer/);
    expect(() => parse(["--oidc-issuer", "https://id.example.com"])).toThrow(/--oidc-client-id is required/);
    expect(() => parse([...ISSUER, "--oidc-scopes", "openid profile"])).toThrow(/openid and email/);
    expect(() => parse([...ISSUER, "--oidc-operator-claim", "groups"])).toThrow(/--oidc-operator-claim: expected CLAIM=VALUE/);
  });

  test("every flag, and the secret from SLUICE_OIDC_CLIENT_SECRET or a file", () => {
    const d = tempDir();
    try {
      const file = join(d.path, "secret");
      writeFileSync(file, "from-the-file\n");
      const got = parse([...ISSUER, "--oidc-client-secret-file", file, "--oidc-account", "corp", "--oidc-operator-claim", "groups=admins", "--oidc-provider-name", "Keycloak", "--no-password-sign-in"]);
      expect(got.passwordSignIn).toBe(false);
      expect(got.oidc).toMatchObject({ clientSecret: "from-the-file", account: "corp", providerName: "Keycloak", scopes: "openid email profile", operatorClaim: { path: ["groups"], value: "admins" } });
      expect(parse(ISSUER, { SLUICE_OIDC_CLIENT_SECRET: "from-env" }).oidc?.clientSecret).toBe("from-env");
      // Settings read SLUICE_<OPTION>; switches, --no-password-sign-in among them, are command line only.
      expect(parse([], { SLUICE_OIDC_ISSUER: "https://id.example.com", SLUICE_OIDC_CLIENT_ID: "c", SLUICE_NO_PASSWORD_SIGN_IN: "1" })).toMatchObject({ passwordSignIn: true, oidc: { clientId: "c" } });
      expect(parse(["--no-password-sign-in"], { SLUICE_OIDC_ISSUER: "https://id.example.com", SLUICE_OIDC_CLIENT_ID: "c" })).toMatchObject({ passwordSignIn: false });
      expect(() => parse([...ISSUER, "--oidc-client-secret-file", file], { SLUICE_OIDC_CLIENT_SECRET: "x" })).toThrow(/not both/);
      expect(() => parse([...ISSUER, "--oidc-client-secret-file", join(d.path, "absent")])).toThrow(/cannot read/);
      // No secret: a public client (PKCE alone).
      expect(parse(ISSUER).oidc?.clientSecret).toBeUndefined();
    } finally {
      d.remove();
    }
  });
});
