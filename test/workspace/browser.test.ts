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
    // The form was answered with a redirect: the page showing the key is a GET.
    expect(page.url()).toBe(`${server.url}/workspace/keys`);
    // Shown once, made once: a reload shows the list, without the key, and no second key.
    await page.reload();
    expect(await page.content()).not.toContain(key);
    expect(await page.locator("#new-key").count()).toBe(0);
    expect(await server.store.keys.list(a.account.id)).toHaveLength(1);
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
    expect(await page.locator(`svg.wide rect title`, { hasText: `${today}: 3 requests` }).count()).toBe(1);
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
    await page.waitForURL(/\/workspace\/keys$/);
    expect(await page.locator(".notice.ok").textContent()).toContain("Key “laptop” (sk-sluice-");
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

  test("the admin page's forms: top up credit with the keyboard and pointer", async () => {
    const op = await makeAccount(server.store, "browser-ops", { plan: "unlimited", role: "operator" });
    const desk = await newContext();
    const admin = await signIn(desk, op.email);
    // Keyboard: the first Tab reaches the skip link, and the label field takes typing.
    await admin.keyboard.press("Tab");
    expect(await admin.evaluate(() => document.activeElement?.textContent)).toBe("Skip to content");
    await nav(admin).getByRole("link", { name: "Admin" }).click();
    // The top-up form's account (the accounts panel above has a selector of its own, for priorities).
    await admin.locator("#top-acct").selectOption("browser-c");
    await admin.locator("#top-usd").fill("2.5");
    await admin.getByRole("button", { name: "Add credit" }).click();
    await admin.locator(".notice.ok").waitFor();
    expect(await admin.locator(".notice.ok").textContent()).toBe("added $2.50 to browser-c");
    expect((await server.store.billing.balanceUsd((await server.store.accounts.get("browser-c"))!.id))).toBe(2.5);
    await shot(admin, "09-admin");
  }, 60_000);

  describe("every page at 390 and 1280 px, operator and member", () => {
    const PAGES = ["keys", "usage", "models", "integrations", "billing", "admin"];
    let people: { who: string; email: string; operator: boolean }[] = [];

    beforeAll(async () => {
      const op = await makeAccount(server.store, "layout-operators", { plan: "unlimited", role: "operator" });
      const member = await makeAccount(server.store, "layout-members-with-a-long-name", { usd: 3 });
      await server.store.keys.create(op.account.id, "operator laptop");
      const { key } = await server.store.keys.create(member.account.id, "a laptop with a rather long label");
      for (let i = 0; i < 2; i++) {
        await fetch(`${server.url}/v1/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
          body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hello" }], max_tokens: 2 }),
        });
      }
      people = [
        { who: "operator", email: op.email, operator: true },
        { who: "member", email: member.email, operator: false },
      ];
    });

    // One sign-in per person (it costs an argon2 check); the viewport changes under the same page.
    for (const who of ["operator", "member"]) {
      test(`${who}: at 390 and 1280 px nothing is cut off at the right edge, every tab is reachable by keyboard, no request fails`, async () => {
        const person = people.find((p) => p.who === who)!;
        const context = await newContext({ width: 390, height: 844 });
        const failed: string[] = [];
        const page = await signIn(context, person.email);
        page.on("response", (r) => {
          if (r.status() >= 400) failed.push(`${r.status()} ${r.url()}`);
        });
        const tabs = person.operator ? PAGES : PAGES.filter((p) => p !== "admin");
        for (const width of [390, 1280]) {
          await page.setViewportSize({ width, height: 844 });
          for (const name of tabs) {
            await page.goto(`${server.url}/workspace/${name}`);
            expect({ width, page: name, cut: await cutOff(page) }).toEqual({ width, page: name, cut: [] });
            // The tab bar is the same on every page: its keyboard walk is checked on the first.
            if (name === "keys") expect(await keyboardTabs(page)).toEqual(tabs.map((t) => `/workspace/${t}`));
            await page.screenshot({ path: join(SHOTS, `layout-${width}-${who}-${name}.png`), fullPage: true });
          }
        }
        if (person.operator) await adminDetails(page);
        expect(failed).toEqual([]);
        await page.close();

        const signin = await context.newPage();
        for (const width of [390, 1280]) {
          await signin.setViewportSize({ width, height: 844 });
          await signin.goto(`${server.url}/workspace/signin`);
          expect(await cutOff(signin)).toEqual([]);
          await signin.screenshot({ path: join(SHOTS, `layout-${width}-signin.png`), fullPage: true });
        }
        await signin.close();
      }, 120_000);
    }

    /**
     * What a phone user must reach on each page, by selector: each one is scrolled to (down, never
     * sideways) and must then lie wholly inside the viewport, with no box around it hiding
     * content sideways.
     */
    const NAMED: Record<string, { operator?: boolean; selectors: string[] }> = {
      keys: { selectors: ["tbody tr:first-child td.card-title", 'tbody tr:first-child td[data-label="Key"]', "tbody tr:first-child td.hide-sm time", "tbody tr:first-child a.button"] },
      usage: { selectors: ['#recent tbody tr:first-child td[data-label="Latency"]', "#recent tbody tr:first-child td.card-aside .badge", '#recent tbody tr:first-child td[data-label="Reasoning"]', "#from", "#to"] },
      models: { selectors: ['tbody tr:first-child td[data-label="Input"]', 'tbody tr:first-child td[data-label="Cached input"]', 'tbody tr:first-child td[data-label="Output"]', 'tbody tr:first-child td[data-label="Capabilities"] .badge:last-child'] },
      billing: { selectors: ['[data-testid="balance"]', '[data-testid="spend"]', 'tbody tr:first-child [data-testid="amount"]', 'tbody tr:last-child [data-testid="amount"]', 'tbody tr:first-child td[data-label="Details"]'] },
      admin: {
        operator: true,
        selectors: [
          '#residency form[aria-label^="Unload"] button, #residency form[aria-label^="Load"] button',
          "#residency input[name=keep_alive]",
          "#residency form[aria-label^='Keep-alive'] button",
          '#residency td[data-label="KV budget"]',
          'section.panel:first-of-type tbody tr:first-child td[data-label="Users"]',
          'section.panel:first-of-type tbody tr:first-child td[data-label="Model access"]',
          'section.panel:first-of-type tbody tr:first-child td[data-label="Priority"]',
          'section.panel:first-of-type tbody tr:first-child td[data-label="Created"]',
          'form[action$="/admin/prices"] button',
        ],
      },
    };

    test("at 390 and 1280 px each named column and action is in view without sideways scrolling; charts stay legible; money and times read as such", async () => {
      const member = people.find((p) => p.who === "member")!;
      const operator = people.find((p) => p.who === "operator")!;
      const context = await newContext({ width: 390, height: 844 });
      for (const person of [member, operator]) {
        await browser.clearCookies();
        const page = await signIn(context, person.email);
        for (const width of [390, 1280]) {
          await page.setViewportSize({ width, height: 844 });
          for (const [name, spec] of Object.entries(NAMED)) {
            if (!!spec.operator !== person.operator) continue;
            await page.goto(`${server.url}/workspace/${name}`);
            for (const selector of spec.selectors) {
              const where = await inView(page, selector);
              expect({ width, name, selector, where }).toEqual({ width, name, selector, where: "in view" });
            }
            if (name === "usage") {
              // Chart labels at 11 px or more, as drawn for this width.
              const ticks = await page.evaluate(() =>
                Array.from(document.querySelectorAll(".chart svg.plot text")).filter((t) => t.getBoundingClientRect().height > 0).map((t) => t.getBoundingClientRect().height),
              );
              expect(ticks.length).toBeGreaterThan(4);
              expect(Math.min(...ticks)).toBeGreaterThanOrEqual(11);
              // Days as everywhere else: YYYY-MM-DD, in a field that shows them so.
              for (const field of ["#from", "#to"]) {
                expect(await page.locator(field).getAttribute("type")).toBe("text");
                expect(await page.locator(field).inputValue()).toMatch(/^\d{4}-\d{2}-\d{2}$/);
              }
            }
            if (name === "billing") {
              const amounts = await page.locator('[data-testid="amount"]').allTextContents();
              // Money as money, every amount with the same decimals, adding up to the balance shown.
              for (const t of amounts) expect(t).toMatch(/^−?\$\d[\d,]*\.\d{2,9}$/);
              expect(new Set(amounts.map((t) => t.split(".")[1]!.length)).size).toBe(1);
              const nano = (t: string) => Math.round(Number(t.replace(/[$,]/g, "").replace("−", "-")) * 1e9);
              expect(amounts.map(nano).reduce((x, y) => x + y, 0)).toBe(nano((await page.locator('[data-testid="balance"]').textContent())!));
            }
            if (name === "models") expect(await page.locator('tbody td[data-label="Input"]').first().textContent()).toBe("$0.50");
            if (name === "keys") expect(await page.locator("tbody time").first().textContent()).toMatch(/^\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC$/);
            await page.screenshot({ path: join(SHOTS, `named-${width}-${person.who}-${name}.png`), fullPage: true });
          }
        }
        await page.close();
      }
    }, 120_000);

    /** At 1280 px: the plan shown is the account's, a one-line checkbox, buttons alike, no empty panel area. */
    async function adminDetails(page: Page) {
      await page.setViewportSize({ width: 1280, height: 900 });
      await page.goto(`${server.url}/workspace/admin?account=layout-operators`);
      expect(await page.locator("#plan-acct").inputValue()).toBe("layout-operators");
      expect(await page.locator("#plan-plan").inputValue()).toBe("unlimited");
      // Choosing another account in the form shows that account's plan.
      await page.locator("#plan-acct").selectOption("layout-members-with-a-long-name");
      expect(await page.locator("#plan-plan").inputValue()).toBe("prepaid");
      await page.locator("#plan-acct").selectOption("layout-operators");
      expect(await page.locator("#plan-plan").inputValue()).toBe("unlimited");

      const box = async (selector: string) => (await page.locator(selector).first().boundingBox())!;
      const check = await box("#acc-all");
      const label = await box("label[for=acc-all]");
      // The box sits at the start of its label's one line, not on a line of its own above it.
      expect(label.height).toBeLessThan(32);
      expect(check.y).toBeGreaterThanOrEqual(label.y - 1);
      expect(check.y + check.height).toBeLessThanOrEqual(label.y + label.height + 1);
      expect(check.x).toBeLessThan(label.x + 4);

      const save = await box(`form[action$="/admin/prices"] button`);
      const saveLimits = await box(`form[action$="/admin/limits"] button`);
      expect(Math.round(save.height)).toBe(Math.round(saveLimits.height));
      const fontSizes = await page.evaluate(() => Array.from(document.querySelectorAll("main button")).map((b) => getComputedStyle(b).fontSize));
      expect(new Set(fontSizes).size).toBe(1);

      const gaps = await page.evaluate(() =>
        Array.from(document.querySelectorAll("section.panel")).map((p) => {
          const last = p.lastElementChild!.getBoundingClientRect();
          const pad = parseFloat(getComputedStyle(p).paddingBottom);
          return { panel: p.querySelector("h2")?.textContent, empty: Math.round(p.getBoundingClientRect().bottom - pad - last.bottom) };
        }),
      );
      expect(gaps.filter((g) => g.empty > 20)).toEqual([]);
    }
  });
});

/**
 * Elements that reach past the viewport's right (or left) edge, outside a container that scrolls
 * or clips them, and whether the document itself scrolls sideways: what a phone user cannot see.
 */
function cutOff(page: Page): Promise<string[]> {
  return page.evaluate(() => {
    const width = document.documentElement.clientWidth;
    const out: string[] = [];
    if (document.documentElement.scrollWidth > width) out.push(`the page scrolls sideways: ${document.documentElement.scrollWidth} > ${width}`);
    // The tabs wrap: none waits behind the edge of a bar that would have to be scrolled.
    for (const a of Array.from(document.querySelectorAll("nav.tabs a"))) {
      const r = a.getBoundingClientRect();
      if (r.left < 0 || r.right > width) out.push(`tab ${a.textContent} spans ${Math.round(r.left)}..${Math.round(r.right)}`);
    }
    const clipped = (el: Element) => {
      for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
        if (getComputedStyle(p).overflowX !== "visible") return true;
      }
      return false;
    };
    for (const el of Array.from(document.body.querySelectorAll("*"))) {
      const r = el.getBoundingClientRect();
      if (r.width === 0 || r.height === 0 || el.classList.contains("skip")) continue;
      if (r.right <= width + 0.5 && r.left >= -0.5) continue;
      if (clipped(el)) continue;
      out.push(`${el.tagName.toLowerCase()}${el.id ? `#${el.id}` : ""}${el.className ? `.${String(el.className).replace(/ /g, ".")}` : ""} spans ${Math.round(r.left)}..${Math.round(r.right)}`);
    }
    return out;
  });
}

/**
 * Scrolls the first element matching `selector` into view, vertically, as a reader would; "in
 * view" when it then lies wholly inside the viewport and no box around it hides anything
 * sideways (a table that would have to be scrolled), else what is wrong.
 */
function inView(page: Page, selector: string): Promise<string> {
  return page.evaluate((sel) => {
    const el = document.querySelector(sel);
    if (!el) return "absent";
    el.scrollIntoView({ block: "center", inline: "nearest" });
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) return "hidden";
    const width = document.documentElement.clientWidth;
    if (document.documentElement.scrollWidth > width) return `the page scrolls sideways (${document.documentElement.scrollWidth} > ${width})`;
    if (r.left < -0.5 || r.right > width + 0.5 || r.top < -0.5 || r.bottom > innerHeight + 0.5) return `at ${Math.round(r.left)}..${Math.round(r.right)} × ${Math.round(r.top)}..${Math.round(r.bottom)} of ${width} × ${innerHeight}`;
    for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
      const o = getComputedStyle(p).overflowX;
      if (o !== "visible" && p.scrollWidth > p.clientWidth + 1) return `inside ${p.tagName.toLowerCase()}.${p.className} that scrolls sideways (${p.scrollWidth} > ${p.clientWidth})`;
    }
    return "in view";
  }, selector);
}

/** The tab links Tab reaches from the top of the page, in order, each fully in view when focused. */
async function keyboardTabs(page: Page): Promise<string[]> {
  await page.evaluate(() => (document.activeElement as HTMLElement | null)?.blur());
  const reached: string[] = [];
  for (let i = 0; i < 20; i++) {
    await page.keyboard.press("Tab");
    const focus = await page.evaluate(() => {
      const el = document.activeElement as HTMLAnchorElement | null;
      if (!el?.closest("nav.tabs")) return null;
      const r = el.getBoundingClientRect();
      return { href: new URL(el.href).pathname, visible: r.left >= 0 && r.right <= document.documentElement.clientWidth && r.top >= 0 && r.bottom <= innerHeight };
    });
    if (focus === null) {
      if (reached.length) break;
      continue;
    }
    reached.push(focus.visible ? focus.href : `${focus.href} (out of view)`);
  }
  return reached;
}
