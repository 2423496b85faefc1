// Single sign-on on two nodes sharing PostgreSQL, behind one public URL: a small load balancer
// sends the sign-in's start to node A and the provider's callback to node B, which finishes it
// (the pending sign-in is in the database), and the session it opens works on node A too. The
// provider is the real one (oidc-provider); its login form is filled over HTTP, a cookie jar
// standing in for the browser.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { startCluster, type ClusterNode, type TestCluster } from "../helpers/cluster.ts";
import { reserveOidcProvider, type TestOidcProvider } from "../helpers/oidc-provider.ts";
import { freePort, postgresMissing } from "../helpers/postgres.ts";

let c: TestCluster;
let a: ClusterNode;
let b: ClusterNode;
let provider: TestOidcProvider;
let balancer: ReturnType<typeof Bun.serve>;
const served: Record<string, string[]> = { a: [], b: [] };

/** Cookies per origin, every path: enough for one sign-in through the provider's pages. */
class Jar {
  private jars = new Map<string, Map<string, string>>();
  async fetch(url: string, init: RequestInit = {}): Promise<Response> {
    const origin = new URL(url).origin;
    const jar = this.jars.get(origin) ?? new Map<string, string>();
    this.jars.set(origin, jar);
    const headers = new Headers(init.headers);
    if (jar.size) headers.set("cookie", [...jar].map(([k, v]) => `${k}=${v}`).join("; "));
    const res = await fetch(url, { ...init, headers, redirect: "manual" });
    for (const cookie of res.headers.getSetCookie()) {
      const [pair, ...attrs] = cookie.split(";");
      const i = pair!.indexOf("=");
      const name = pair!.slice(0, i).trim();
      const value = pair!.slice(i + 1).trim();
      if (value === "" || attrs.some((x) => /max-age=0|expires=thu, 01 jan 1970/i.test(x.trim()))) jar.delete(name);
      else jar.set(name, value);
    }
    return res;
  }
  get(origin: string, name: string) {
    return this.jars.get(origin)?.get(name);
  }
}

const location = (res: Response, base: string) => {
  expect(res.status).toBeOneOf([302, 303]);
  return new URL(res.headers.get("location")!, base).href;
};

describe.skipIf(postgresMissing !== null)("single sign-on across two nodes", () => {
  beforeAll(async () => {
    provider = await reserveOidcProvider();
    const port = await freePort();
    const publicUrl = `http://127.0.0.1:${port}`;
    const sso = ["--public-url", publicUrl, "--oidc-issuer", provider.issuer, "--oidc-client-id", provider.clientId, "--oidc-account", "local", "--oidc-scopes", "openid email groups", "--oidc-operator-claim", "groups=sluice-admins"];
    const env = { SLUICE_OIDC_CLIENT_SECRET: provider.clientSecret };
    c = await startCluster([
      { models: {}, args: sso, env },
      { models: {}, args: sso, env },
    ]);
    [a, b] = c.nodes as [ClusterNode, ClusterNode];
    // The load balancer: the callback to B, everything else to A.
    balancer = Bun.serve({
      hostname: "127.0.0.1",
      port,
      async fetch(req) {
        const url = new URL(req.url);
        const node = url.pathname === "/workspace/oidc/callback" ? "b" : "a";
        served[node]!.push(url.pathname);
        const target = new URL(url.pathname + url.search, node === "a" ? a.url : b.url);
        return fetch(target, { method: req.method, headers: req.headers, body: req.body, redirect: "manual" });
      },
    });
    expect(a.banner).toContain(`register this redirect URI at the OpenID provider: ${publicUrl}/workspace/oidc/callback`);
    await provider.start([`${publicUrl}/workspace/oidc/callback`]);
  }, 120_000);
  afterAll(async () => {
    balancer?.stop(true);
    await c?.stop();
    await provider?.stop();
  });

  test("a sign-in begun on one node finishes on the other, and its session holds on both", async () => {
    const lb = `http://127.0.0.1:${balancer.port}`;
    const jar = new Jar();
    const toProvider = location(await jar.fetch(`${lb}/workspace/oidc/start`), lb);
    expect(toProvider).toStartWith(`${provider.issuer}/auth?`);
    expect(new URL(toProvider).searchParams.get("code_challenge_method")).toBe("S256");
    const interaction = location(await jar.fetch(toProvider), provider.issuer);
    const form = await (await jar.fetch(interaction)).text();
    const action = new URL(/<form[^>]*action="([^"]+)"/.exec(form)![1]!, provider.issuer).href;
    const submitted = await jar.fetch(action, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ prompt: "login", login: "alice", password: "any" }),
    });
    const resume = location(submitted, provider.issuer);
    const callback = location(await jar.fetch(resume), provider.issuer);
    expect(callback).toStartWith(`${lb}/workspace/oidc/callback?`);
    const done = await jar.fetch(callback);
    expect(location(done, lb)).toBe(`${lb}/workspace/keys`);
    expect(served.a).toEqual(["/workspace/oidc/start"]);
    expect(served.b).toEqual(["/workspace/oidc/callback"]);

    const session = jar.get(lb, "sluice_session")!;
    expect(session).toBeDefined();
    for (const node of [a, b]) {
      const me = await fetch(`${node.url}/workspace/api/me`, { headers: { cookie: `sluice_session=${session}` } });
      expect(me.status).toBe(200);
      expect(await me.json()).toMatchObject({ email: "alice@corp.example", role: "operator", account: "local" });
    }
    expect(c.sluice("users", "list")).toContain("alice@corp.example");
  }, 60_000);
});
