// A real OpenID provider for the SSO tests: panva's oidc-provider (the certified Node.js
// implementation) with its development login form, run in a child process by oidc-provider.ts.
// argv: port, client id, client secret, redirect URIs (comma-separated). Prints "ready <issuer>" once it listens.
//
// Its users (the login is the subject; any password signs in):
//   alice, bob, dave: verified emails; alice and dave are in the group sluice-admins.
//   carol: an email that is not verified.
//   mallory-sig: the ID token for mallory is re-signed with another key under the provider's key id.
//   mallory-nonce: the ID token's nonce is replaced, and the token signed again with the real key.
// The last two are done at the token endpoint, after the provider answered, so everything else about
// the exchange is as a real provider sends it.
import { exportJWK, generateKeyPair, SignJWT, decodeJwt, decodeProtectedHeader, importJWK, type JWK } from "jose";
import Provider from "oidc-provider";

const [portArg, clientId, clientSecret, redirectUris] = process.argv.slice(2);
const port = Number(portArg);
const issuer = `http://127.0.0.1:${port}`;

interface Person {
  email: string;
  email_verified: boolean;
  groups: string[];
  name: string;
}
const PEOPLE: Record<string, Person> = {
  alice: { email: "alice@corp.example", email_verified: true, groups: ["staff", "sluice-admins"], name: "Alice" },
  bob: { email: "bob@corp.example", email_verified: true, groups: ["staff"], name: "Bob" },
  dave: { email: "dave@acme.example", email_verified: true, groups: ["sluice-admins"], name: "Dave" },
  carol: { email: "carol@corp.example", email_verified: false, groups: ["staff"], name: "Carol" },
  "mallory-sig": { email: "mallory-sig@corp.example", email_verified: true, groups: ["sluice-admins"], name: "Mallory" },
  "mallory-nonce": { email: "mallory-nonce@corp.example", email_verified: true, groups: ["sluice-admins"], name: "Mallory" },
};

async function rsaJwk(kid: string): Promise<JWK> {
  const { privateKey } = await generateKeyPair("RS256", { extractable: true });
  return { ...(await exportJWK(privateKey)), kid, alg: "RS256", use: "sig" };
}
const signing = await rsaJwk("provider-key");
const rogue = await rsaJwk("provider-key"); // the same key id: only the signature tells them apart

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: clientId!,
      client_secret: clientSecret!,
      redirect_uris: redirectUris!.split(","),
      grant_types: ["authorization_code"],
      response_types: ["code"],
      token_endpoint_auth_method: "client_secret_basic",
    },
  ],
  jwks: { keys: [signing] },
  cookies: { keys: ["test-cookie-key-0123456789abcdef"] },
  pkce: { required: () => true },
  claims: { openid: ["sub"], email: ["email", "email_verified"], profile: ["name"], groups: ["groups"] },
  scopes: ["openid", "email", "profile", "groups"],
  features: { devInteractions: { enabled: true } },
  async findAccount(_ctx, sub) {
    const person = PEOPLE[sub];
    if (!person) return undefined;
    return { accountId: sub, claims: async () => ({ sub, ...person }) };
  },
  // The workspace is a first-party client: the consent a real deployment configures once.
  async loadExistingGrant(ctx) {
    const existing = ctx.oidc.session!.grantIdFor(ctx.oidc.client!.clientId);
    if (existing) return ctx.oidc.provider.Grant.find(existing);
    const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client!.clientId, accountId: ctx.oidc.session!.accountId! });
    grant.addOIDCScope("openid email profile groups");
    await grant.save();
    return grant;
  },
});

provider.use(async (ctx, next) => {
  await next();
  if (ctx.path !== "/token" || ctx.status !== 200) return;
  const body = ctx.body as { id_token?: string };
  if (!body?.id_token) return;
  const claims = decodeJwt(body.id_token);
  const header = decodeProtectedHeader(body.id_token);
  if (claims.sub === "mallory-sig") {
    body.id_token = await new SignJWT(claims).setProtectedHeader(header as { alg: string }).sign(await importJWK(rogue, "RS256"));
  } else if (claims.sub === "mallory-nonce") {
    body.id_token = await new SignJWT({ ...claims, nonce: "not-the-nonce-sent" }).setProtectedHeader(header as { alg: string }).sign(await importJWK(signing, "RS256"));
  }
});

provider.listen(port, "127.0.0.1");
console.log(`ready ${issuer}`);
