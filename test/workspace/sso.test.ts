// Single sign-on against a real OpenID provider (panva's oidc-provider, started by the test), in
// Chromium through the provider's own login form: users created in the configured account or
// matched by verified email, the operator role from a group claim, and what must be refused: an
// unverified email, an ID token signed by another key, a wrong nonce, a callback from another
// browser, with a forged state, or played twice. A second server has password sign-in off.
// Skipped, with a message, when chromium is absent.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import type { Browser, BrowserContext, Page } from "playwright-core";
import type { SsoAuditEvent } from "../../src/workspace/index.ts";
import { parseClaimRule } from "../../src/workspace/oidc-rules.ts";
import { reserveOidcProvider, type TestOidcProvider } from "../helpers/oidc-provider.ts";
import { REPO, tempDir } from "../helpers/paths.ts";
import { startTestServer, type TestServer } from "../helpers/server.ts";
import { PASSWORD, WorkspaceClient } from "./helpers.ts";

const CHROMIUM = "/usr/bin/chromium";
const hasChromium = existsSync(CHROMIUM);
if (!hasChromium) console.log(`SSO browser tests skipped: ${CHROMIUM} is absent (apt-get install -y chromium)`);

const PROVIDER = "Test IdP";
const SHOTS = join(REPO, "test-output", "workspace");
let provider: TestOidcProvider;
let server: TestServer; // SSO and passwords
let ssoOnly: TestServer; // SSO, password sign-in off
let browser: Browser;
const audit: SsoAuditEvent[] = [];
const models = tempDir("sluice-models-");

beforeAll(async () => {
  if (!hasChromium) return;
  mkdirSync(SHOTS, { recursive: true });
  provider = await reserveOidcProvider();
  const oidc = {
    issuer: provider.issuer,
    clientId: provider.clientId,
    clientSecret: provider.clientSecret,
    providerName: PROVIDER,
    scopes: "openid email profile groups",
    account: "corp",
    operatorClaim: parseClaimRule("groups=sluice-admins"),
  };
  server = await startTestServer({
    modelsDir: models.path,
    oidc,
    ssoAudit: (e) => void audit.push(e),
    async prepareData(store) {
      await store.accounts.create("corp");
      const acme = await store.accounts.create("acme");
      // Dave already has a user (with a password) in another account: SSO finds him by email.
      await store.users.create({ accountId: acme.id, email: "Dave@acme.example", password: PASSWORD });
    },
  });
  ssoOnly = await startTestServer({
    modelsDir: models.path,
    oidc,
    passwordSignIn: false,
    async prepareData(store) {
      const corp = await store.accounts.create("corp");
      await store.users.create({ accountId: corp.id, email: "bob@corp.example", password: PASSWORD });
    },
  });
  await provider.start([server.oidcRedirectUri!, ssoOnly.oidcRedirectUri!]);
  const { chromium } = await import("playwright-core");
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await server?.cleanup();
  await ssoOnly?.cleanup();
  await provider?.stop();
  models.remove();
});

/** A fresh browser (no cookies at the provider or here) that reaches nothing but this machine. */
async function freshContext(): Promise<BrowserContext> {
  const context = await browser.newContext();
  // The provider's development pages @import a web font: nothing leaves the machine.
  await context.route(/^https?:\/\/(?!127\.0\.0\.1[:/])/, (route) => route.abort());
  return context;
}

/** From the workspace's sign-in page through the provider's login form; resolves on the page it ends on. */
async function ssoSignIn(context: BrowserContext, base: string, login: string, opts: { seeCallback?: (url: string) => void } = {}): Promise<Page> {
  const page = await context.newPage();
  // The provider's redirect back to the workspace, as the browser followed it.
  if (opts.seeCallback) page.on("request", (r) => void (r.url().includes("/workspace/oidc/callback?") && opts.seeCallback!(r.url())));
  await page.goto(`${base}/workspace/signin`);
  await page.getByRole("link", { name: `Sign in with ${PROVIDER}` }).click();
  await page.waitForURL(`${provider.issuer}/**`);
  await page.locator('input[name="login"]').fill(login);
  await page.locator('input[name="password"]').fill("any password");
  await page.getByRole("button", { name: "Sign-in" }).click();
  await page.waitForURL(`${base}/workspace/**`);
  return page;
}

async function sessionCookie(context: BrowserContext): Promise<string | undefined> {
  return (await context.cookies()).find((c) => c.name === "sluice_session")?.value;
}

const alert = (page: Page) => page.getByRole("alert").textContent();

describe.skipIf(!hasChromium)("single sign-on in chromium, against oidc-provider", () => {
  test("the sign-in page offers the provider beside the password form", async () => {
    const res = await fetch(`${server.url}/workspace/signin`);
    const body = await res.text();
    expect(body).toContain(`Sign in with ${PROVIDER}`);
    expect(body).toContain('name="password"');
    expect(server.oidcRedirectUri).toBe(`${server.url}/workspace/oidc/callback`);
    // At a phone's width and a desktop's, both fit.
    const context = await freshContext();
    const page = await context.newPage();
    for (const width of [390, 1280]) {
      await page.setViewportSize({ width, height: 800 });
      await page.goto(`${server.url}/workspace/signin`);
      expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(width);
      await expect(page.getByRole("link", { name: `Sign in with ${PROVIDER}` }).isVisible()).resolves.toBe(true);
      await page.screenshot({ path: join(SHOTS, `sso-signin-${width}.png`), fullPage: true });
    }
    await context.close();
  }, 60_000);

  test("a new user whose group makes them an operator is created in the configured account", async () => {
    const context = await freshContext();
    const page = await ssoSignIn(context, server.url, "alice");
    expect(page.url()).toBe(`${server.url}/workspace/keys`);
    expect(await sessionCookie(context)).toBeDefined();
    const alice = (await server.store.users.getByEmail("alice@corp.example"))!;
    expect(alice.accountName).toBe("corp");
    expect(alice.role).toBe("operator");
    await expect(page.getByRole("navigation", { name: "Workspace" }).getByRole("link", { name: "Admin" }).isVisible()).resolves.toBe(true);
    // No password signs in as a user the provider created.
    expect(await server.store.users.verify("alice@corp.example", "")).toBeNull();
    expect(audit).toContainEqual(expect.objectContaining({ action: "user.created", userId: alice.id, account: "corp", role: "operator", subject: "alice" }));
    // And in the audit log, by the person through the provider.
    const created = (await server.store.audit.list({ target: "user:alice@corp.example" })).find((e) => e.action === "users.create");
    expect(created?.actor).toStartWith("alice@corp.example (single sign-on, ");
    expect(await server.store.audit.verify()).toMatchObject({ ok: true });
    await context.close();
  }, 60_000);

  test("without the group a new user is a member; an existing user is matched by email and follows the claim", async () => {
    const context = await freshContext();
    const page = await ssoSignIn(context, server.url, "bob");
    expect(page.url()).toBe(`${server.url}/workspace/keys`);
    const bob = (await server.store.users.getByEmail("bob@corp.example"))!;
    expect([bob.accountName, bob.role]).toEqual(["corp", "member"]);
    await expect(page.getByRole("navigation", { name: "Workspace" }).getByRole("link", { name: "Admin" }).count()).resolves.toBe(0);
    await context.close();

    const before = await server.store.users.getByEmail("dave@acme.example");
    expect(before!.role).toBe("member");
    const second = await freshContext();
    await ssoSignIn(second, server.url, "dave");
    const dave = (await server.store.users.getByEmail("dave@acme.example"))!;
    expect(dave.id).toBe(before!.id);
    expect([dave.accountName, dave.role]).toEqual(["acme", "operator"]);
    expect(audit).toContainEqual(expect.objectContaining({ action: "user.role_changed", userId: dave.id, before: "member", after: "operator" }));
    // The target names the user as stored (Dave@…: emails match without case).
    const changed = (await server.store.audit.list({ limit: 20 })).find((e) => e.action === "users.setRole" && e.target?.toLowerCase() === "user:dave@acme.example");
    expect([changed?.before, changed?.after]).toMatchObject([{ role: "member" }, { role: "operator" }]);
    // Dave's password still works beside SSO on this server.
    expect(await server.store.users.verify("dave@acme.example", PASSWORD)).not.toBeNull();
    await second.close();
  }, 60_000);

  test("an email the provider has not verified is refused", async () => {
    const context = await freshContext();
    const page = await ssoSignIn(context, server.url, "carol");
    expect(page.url()).toStartWith(`${server.url}/workspace/oidc/callback`);
    expect(await alert(page)).toContain("has not verified your email address carol@corp.example");
    expect(await sessionCookie(context)).toBeUndefined();
    expect(await server.store.users.getByEmail("carol@corp.example")).toBeNull();
    await context.close();
  }, 60_000);

  test("an ID token signed by another key, or carrying another nonce, is refused", async () => {
    for (const [login, words] of [
      ["mallory-sig", /signature/i],
      ["mallory-nonce", /nonce/i],
    ] as const) {
      const context = await freshContext();
      const page = await ssoSignIn(context, server.url, login);
      const text = (await alert(page))!;
      expect(text).toContain(`${PROVIDER} did not confirm this sign-in`);
      expect(text).toMatch(words);
      expect(await sessionCookie(context)).toBeUndefined();
      expect(await server.store.users.getByEmail(`${login}@corp.example`)).toBeNull();
      await context.close();
    }
  }, 60_000);

  test("a callback is good once, in the browser that began the sign-in, with a state the server issued", async () => {
    // Bob was made an operator meanwhile (by the CLI, say): without the group, the provider's word wins.
    const bob = (await server.store.users.getByEmail("bob@corp.example"))!;
    await server.store.users.setRole(bob.id, "operator");
    let callback = "";
    const context = await freshContext();
    const page = await ssoSignIn(context, server.url, "bob", { seeCallback: (u) => (callback = u) });
    expect(page.url()).toBe(`${server.url}/workspace/keys`);
    expect((await server.store.users.get(bob.id))!.role).toBe("member");
    expect(audit).toContainEqual(expect.objectContaining({ action: "user.role_changed", userId: bob.id, before: "operator", after: "member" }));
    const url = new URL(callback);
    const state = url.searchParams.get("state")!;
    expect(url.searchParams.get("code")).toBeTruthy();
    const cookie = (value: string) => ({ name: "sluice_oidc", value, url: `${server.url}/workspace/` });

    // The same callback in another browser, without this one's state cookie: a login CSRF.
    const other = await freshContext();
    const stranger = await other.newPage();
    await stranger.goto(callback);
    expect(await alert(stranger)).toContain("was not started from this browser");
    expect(await sessionCookie(other)).toBeUndefined();

    // A state this server never issued, even with a cookie to match it.
    const forged = new URL(callback);
    forged.searchParams.set("state", "forged-state-value");
    await other.addCookies([cookie("forged-state-value")]);
    await stranger.goto(forged.href);
    expect(await alert(stranger)).toContain("expired or was already used");
    expect(await sessionCookie(other)).toBeUndefined();
    await other.close();

    // The callback played again in the browser that finished it (its state cookie put back).
    await context.clearCookies();
    await context.addCookies([cookie(state)]);
    await page.goto(callback);
    expect(await alert(page)).toContain("expired or was already used");
    expect(await sessionCookie(context)).toBeUndefined();
    await context.close();
  }, 60_000);

  test("with password sign-in off, only the provider signs in", async () => {
    const page = await (await fetch(`${ssoOnly.url}/workspace/signin`)).text();
    expect(page).toContain(`Sign in with ${PROVIDER}`);
    expect(page).not.toContain('name="password"');
    // Bob has a password here, and it opens nothing.
    const client = new WorkspaceClient(ssoOnly.url);
    const token = /sluice_signin=([^;]+)/.exec((await fetch(`${ssoOnly.url}/workspace/signin`)).headers.get("set-cookie")!)![1]!;
    const res = await client.request("/workspace/signin", {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", cookie: `sluice_signin=${token}` },
      body: new URLSearchParams({ email: "bob@corp.example", password: PASSWORD, _csrf: token }),
    });
    expect(res.status).toBe(403);
    expect(await res.text()).toContain("Password sign-in is turned off");
    expect(client.cookie("sluice_session")).toBeUndefined();

    const context = await freshContext();
    const signedIn = await ssoSignIn(context, ssoOnly.url, "bob");
    expect(signedIn.url()).toBe(`${ssoOnly.url}/workspace/keys`);
    expect(await sessionCookie(context)).toBeDefined();
    await context.close();
  }, 60_000);
});
