// The workspace in a real browser: playwright-core driving Debian's headless chromium. Skipped,
// with a message, when chromium is absent; the HTTP-level tests cover the rest either way.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { BrowserContext, Page } from "playwright-core";
import { syntheticModel, tinyModelsRoot } from "../helpers/models.ts";
import { REPO } from "../helpers/paths.ts";
import { startTestServer, type TestServer } from "../helpers/server.ts";
import { makeAccount, PASSWORD } from "./helpers.ts";

const CHROMIUM = "/usr/bin/chromium";
const hasChromium = existsSync(CHROMIUM);
if (!hasChromium) console.log(`workspace browser tests skipped: ${CHROMIUM} is absent (apt-get install -y chromium)`);

const MODEL = "ws/tiny";
const SHOTS = join(REPO, "test-output", "workspace");
let server: TestServer;
let browser: BrowserContext;
let profile: string;

beforeAll(async () => {
  if (!hasChromium) return;
  mkdirSync(SHOTS, { recursive: true });
  const modelsDir = tinyModelsRoot() + "/workspace";
  await syntheticModel(modelsDir, "ws/tiny", { preset: "tiny-bytes", seed: 5, id: MODEL });
  server = await startTestServer({ modelsDir });
  await server.store.catalog.setPrices(MODEL, 0.5, 1.5);
  profile = mkdtempSync(join(tmpdir(), "sluice-chromium-"));
  const { chromium } = await import("playwright-core");
  // A persistent context is how Playwright takes a --user-data-dir: a fresh one per run.
  browser = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1200, height: 800 },
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await server?.cleanup();
  if (profile) rmSync(profile, { recursive: true, force: true });
});

/** Each test signs in afresh: the shared profile's cookies are dropped first. */
async function newContext(viewport = { width: 1200, height: 800 }): Promise<BrowserContext> {
  await browser.clearCookies();
  for (const p of browser.pages()) await p.close();
  const page = await browser.newPage();
  await page.setViewportSize(viewport);
  await page.close();
  currentViewport = viewport;
  return browser;
}
let currentViewport = { width: 1200, height: 800 };

async function signIn(context: BrowserContext, email: string): Promise<Page> {
  const page = await context.newPage();
  await page.setViewportSize(currentViewport);
  await page.goto(`${server.url}/workspace/`);
  await page.getByLabel("Email").fill(email);
  await page.getByLabel("Password").fill(PASSWORD);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.waitForURL(/\/workspace\/keys$/);
  return page;
}

const nav = (page: Page) => page.getByRole("navigation", { name: "Workspace" });
const shot = (page: Page, name: string) => page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });

describe.skipIf(!hasChromium)("workspace in chromium", () => {
  test("sign in, create a key and see it once, use it, revoke it, see usage", async () => {
    const a = await makeAccount(server.store, "browser-a", { usd: 5 });
    const context = await newContext();
    const signin = await context.newPage();
    await signin.setViewportSize(currentViewport);
    await signin.goto(`${server.url}/workspace/signin`);
    await shot(signin, "00-signin");
    await signin.close();
    const page = await signIn(context, a.email);

    await page.getByLabel("Label").fill("laptop");
    await page.getByRole("button", { name: "Create key" }).click();
    const key = await page.locator("#new-key").inputValue();
    expect(key).toMatch(/^sk-sluice-[0-9A-Za-z]{40}$/);
    await expect(page.getByRole("button", { name: "Copy" }).isVisible()).resolves.toBe(true);
    await shot(page, "01-keys-created");
    // Shown once: the list never shows it again.
    await page.goto(`${server.url}/workspace/keys`);
    expect(await page.content()).not.toContain(key);
    expect(await page.locator("tbody tr").first().textContent()).toContain("laptop");

    const models = await fetch(`${server.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
    expect(models.status).toBe(200);
    expect(((await models.json()) as { data: { id: string }[] }).data.map((m) => m.id)).toEqual([MODEL]);

    for (let i = 0; i < 3; i++) {
      const res = await fetch(`${server.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: `hello ${i}` }], max_tokens: 3 + i }),
      });
      expect(res.status).toBe(200);
    }

    await nav(page).getByRole("link", { name: "Usage" }).click();
    await page.waitForURL(/\/usage/);
    expect(await page.getByTestId("total-requests").textContent()).toBe("3");
    const rows = page.locator("#recent tbody tr");
    expect(await rows.count()).toBe(3);
    expect(await rows.first().textContent()).toContain(MODEL);
    // The requests-per-day chart has a bar for today's three requests.
    const today = new Date().toISOString().slice(0, 10);
    expect(await page.locator(`svg rect title`, { hasText: `${today}: 3 requests` }).count()).toBe(1);
    await shot(page, "02-usage");

    for (const [tab, name] of [["Models", "03-models"], ["Integrations", "04-integrations"], ["Billing", "05-billing"]] as const) {
      await nav(page).getByRole("link", { name: tab, exact: true }).click();
      await page.waitForURL(new RegExp(tab.toLowerCase()));
      await shot(page, name);
    }
    expect(await page.locator("tbody tr").count()).toBe(4); // three charges and the top-up
    await nav(page).getByRole("link", { name: "Integrations" }).click();
    expect(await page.locator("#code-curl").textContent()).toContain(`${server.url}/v1/chat/completions`);

    await nav(page).getByRole("link", { name: "Keys" }).click();
    await page.getByRole("link", { name: /Revoke key/ }).click();
    await shot(page, "06-revoke-confirm");
    await page.getByRole("button", { name: "Revoke key" }).click();
    await page.waitForURL(/revoked=/);
    expect(await page.locator(".notice.ok").textContent()).toContain("revoked");
    const after = await fetch(`${server.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
    expect(after.status).toBe(401);
    
  }, 60_000);

  test("another account sees none of it, in the pages and the JSON routes", async () => {
    const a = await makeAccount(server.store, "browser-b1", { plan: "unlimited" });
    const b = await makeAccount(server.store, "browser-b2", { plan: "unlimited" });
    const { key, info } = await server.store.keys.create(a.account.id, "a-secret-label");
    await fetch(`${server.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
    const context = await newContext();
    const page = await signIn(context, b.email);
    expect(await page.content()).not.toContain("a-secret-label");
    expect(await page.content()).toContain("No keys yet");
    const res = await page.request.get(`${server.url}/workspace/api/keys`);
    expect(((await res.json()) as { data: unknown[] }).data).toEqual([]);
    expect((await page.goto(`${server.url}/workspace/keys/${info.id}/revoke`))!.status()).toBe(404);
    
  }, 60_000);

  test("a form posted without its CSRF token is refused", async () => {
    const a = await makeAccount(server.store, "browser-c");
    const context = await newContext();
    const page = await signIn(context, a.email);
    await page.locator('input[name="_csrf"]').evaluateAll((els) => els.forEach((e) => e.remove()));
    await page.getByLabel("Label").fill("forged");
    await page.getByRole("button", { name: "Create key" }).click();
    await page.waitForLoadState();
    expect(await page.locator("h1").textContent()).toBe("Refused");
    expect((await server.store.keys.list(a.account.id))).toEqual([]);
    
  }, 60_000);

  test("phone width, keyboard, and the admin pages", async () => {
    const op = await makeAccount(server.store, "browser-ops", { plan: "unlimited", role: "operator" });
    const context = await newContext({ width: 390, height: 844 });
    const page = await signIn(context, op.email);
    await shot(page, "07-keys-phone");
    // No horizontal scrolling of the page itself at phone width.
    expect(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth + 1)).toBe(true);
    await page.goto(`${server.url}/workspace/usage`);
    await shot(page, "08-usage-phone");
    expect(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth + 1)).toBe(true);
    

    const desk = await newContext();
    const admin = await signIn(desk, op.email);
    // Keyboard: the first Tab reaches the skip link, and the label field takes typing.
    await admin.keyboard.press("Tab");
    expect(await admin.evaluate(() => document.activeElement?.textContent)).toBe("Skip to content");
    await nav(admin).getByRole("link", { name: "Admin" }).click();
    await admin.getByLabel("Account", { exact: true }).first().selectOption("browser-c");
    await admin.locator("#top-usd").fill("2.5");
    await admin.getByRole("button", { name: "Add credit" }).click();
    await admin.waitForURL(/ok=/);
    expect((await server.store.billing.balanceUsd((await server.store.accounts.get("browser-c"))!.id))).toBe(2.5);
    await shot(admin, "09-admin");
    
  }, 60_000);
});
