// The admin page's "Add a model from the Hub": the server pulls as a job from the local Hub
// server (test/helpers/hub-server.ts) and the page follows it. Over HTTP (operators only, the
// form without script, errors in words) and in chromium (the live progress bar, held mid-file so
// that a partial state is seen for certain, then done and served; a failure shown in words).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { BrowserContext } from "playwright-core";
import { GATED_REPO, GENAI_REPO, GGUF_REPO, STORIES_REPO } from "../helpers/hub-repos.ts";
import { hasStories, REPO, STORIES_DIR } from "../helpers/paths.ts";
import { hubFixture } from "../helpers/hub-fixture.ts";
import { makeAccount, PASSWORD, WorkspaceClient } from "./helpers.ts";

const CHROMIUM = "/usr/bin/chromium";
const hasChromium = existsSync(CHROMIUM);
if (!hasStories) console.warn(`skipping the admin page's Hub pull tests: ${STORIES_DIR} is absent`);
else if (!hasChromium) console.warn(`the admin page's Hub pull browser test is skipped: ${CHROMIUM} is absent (apt-get install -y chromium)`);

const DATA = "onnx/model.onnx_data";
const SHOTS = join(REPO, "test-output", "workspace");
const fx = hubFixture((hub) => ({ hub: { endpoint: hub.url, token: () => null, device: "cpu" } }));

interface PullJson {
  id: string;
  state: string;
  error: string | null;
  message: string;
  bytes_done: number;
  bytes_total: number;
}

async function operator(name: string): Promise<WorkspaceClient> {
  const op = await makeAccount(fx.server.store, name, { plan: "unlimited", role: "operator" });
  const c = new WorkspaceClient(fx.server.url);
  expect((await c.signIn(op.email, PASSWORD)).status).toBe(303);
  return c;
}

async function finished(c: WorkspaceClient, id: string): Promise<PullJson> {
  for (let i = 0; i < 600; i++) {
    const j = (await (await c.get(`/workspace/api/hub-pulls/${id}`)).json()) as PullJson;
    if (j.state !== "running") return j;
    await Bun.sleep(50);
  }
  throw new Error(`pull ${id} did not finish`);
}

async function served(): Promise<string[]> {
  const r = await fetch(`${fx.server.url}/v1/models`, { headers: { authorization: `Bearer ${fx.server.key}` } });
  return ((await r.json()) as { data: { id: string }[] }).data.map((m) => m.id);
}

describe.skipIf(!hasStories)("admin: add a model from the Hub, over HTTP", () => {
  test("operators only; the form works without script; the model is served once pulled", async () => {
    const member = await makeAccount(fx.server.store, "hub-member");
    const m = new WorkspaceClient(fx.server.url);
    await m.signIn(member.email, PASSWORD);
    expect((await m.postJson("/workspace/api/hub-pulls", { repo: GENAI_REPO })).status).toBe(403);

    const c = await operator("hub-ops-http");
    const page = await (await c.get("/workspace/admin")).text();
    expect(page).toContain("Add a model from the Hub");
    const posted = await c.form("/workspace/admin/hub-pull", { repo: GENAI_REPO, revision: "main", dtype: "auto" });
    expect(posted.status).toBe(303);
    expect(posted.headers.get("location")).toBe("/workspace/admin#hub");
    expect(await (await c.follow(posted)).text()).toContain(`pulling ${GENAI_REPO}: reload this page to follow it`);
    const list = (await (await c.get("/workspace/api/hub-pulls")).json()) as { data: PullJson[] };
    const job = await finished(c, list.data[0]!.id);
    expect(job).toMatchObject({ state: "done", error: null, message: `${GENAI_REPO} is served as ${GENAI_REPO}` });
    expect(await served()).toContain(GENAI_REPO);
    // The page lists it, its bar full.
    const after = await (await c.get("/workspace/admin")).text();
    expect(after).toContain(`data-job="${job.id}" data-state="done"`);
  });

  test("REPO:QUANT: one GGUF file of a repository, imported and served as REPO-QUANT", async () => {
    const c = await operator("hub-ops-gguf");
    const page = await (await c.get("/workspace/admin")).text();
    expect(page).toContain("<code>REPO:QUANT</code>");
    const posted = await c.form("/workspace/admin/hub-pull", { repo: `${GGUF_REPO}:F32`, revision: "main", dtype: "auto" });
    expect(posted.status).toBe(303);
    const list = (await (await c.get("/workspace/api/hub-pulls")).json()) as { data: (PullJson & { repo: string })[] };
    const started = list.data.find((j) => j.repo === `${GGUF_REPO}:F32`)!;
    const job = await finished(c, started.id);
    expect(job).toMatchObject({ state: "done", error: null, message: `${GGUF_REPO}:F32 is served as ${GGUF_REPO}-F32` });
    expect(await served()).toContain(`${GGUF_REPO}-F32`);
    expect(existsSync(join(fx.models, `${GGUF_REPO}-F32`, "onnx", "model.onnx"))).toBe(true);
  });

  test("a bad request is refused in words; a gated repo fails naming HF_TOKEN", async () => {
    const c = await operator("hub-ops-errors");
    const bad = await c.postJson("/workspace/api/hub-pulls", { repo: "not a repo", dtype: "auto" });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: string }).error).toContain("is not a Hub model repository id");
    const badForm = await c.form("/workspace/admin/hub-pull", { repo: STORIES_REPO, dtype: "q3" });
    expect(await (await c.follow(badForm)).text()).toContain("The pull could not start: --dtype must be auto or one of");

    const started = (await (await c.postJson("/workspace/api/hub-pulls", { repo: GATED_REPO, revision: "main", dtype: "auto" })).json()) as PullJson;
    const job = await finished(c, started.id);
    expect(job.state).toBe("failed");
    expect(job.error).toContain("HF_TOKEN");
    expect(existsSync(join(fx.models, GATED_REPO))).toBe(false);
  });
});

describe.skipIf(!hasStories || !hasChromium)("admin: add a model from the Hub, in chromium", () => {
  let browser: BrowserContext;
  let profile: string;

  beforeAll(async () => {
    mkdirSync(SHOTS, { recursive: true });
    profile = mkdtempSync(join(tmpdir(), "sluice-chromium-"));
    const { chromium } = await import("playwright-core");
    browser = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      viewport: { width: 1200, height: 900 },
      args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    });
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    if (profile) rmSync(profile, { recursive: true, force: true });
  });

  test("pull with a live progress bar, then served; a failure shown in words", async () => {
    const op = await makeAccount(fx.server.store, "hub-ops-browser", { plan: "unlimited", role: "operator" });
    const page = await browser.newPage();
    await page.goto(`${fx.server.url}/workspace/signin`);
    await page.getByLabel("Email").fill(op.email);
    await page.getByLabel("Password").fill(PASSWORD);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.waitForURL(/\/workspace\/keys$/);
    await page.goto(`${fx.server.url}/workspace/admin#hub`);

    // The big file stops after 300 kB until released: the bar must show that partial state.
    const held = fx.hub.hold(DATA, 300_000);
    await page.getByLabel("Repository").fill(STORIES_REPO);
    await page.getByLabel("Revision").fill("main");
    await page.getByLabel("Dtype").selectOption("fp32");
    await page.getByRole("button", { name: "Pull" }).click();
    await held.reached;
    // The new pull's block comes first (earlier jobs of this server are listed below it).
    await page.waitForSelector(`.hub-job[data-state="running"]`);
    const job = await page.locator(".hub-job").first().getAttribute("data-job");
    const block = page.locator(`.hub-job[data-job="${job}"]`);
    const bar = block.locator("progress");
    await page.waitForFunction((id) => {
      const p = document.querySelector<HTMLProgressElement>(`.hub-job[data-job="${id}"] progress`);
      return !!p && p.value > 300_000;
    }, job);
    const partial = await bar.evaluate((p: HTMLProgressElement) => ({ value: p.value, max: p.max }));
    expect(partial.value).toBeGreaterThan(300_000);
    expect(partial.value).toBeLessThan(partial.max);
    expect(await block.locator(".hub-bytes").textContent()).toMatch(/KiB of 1\.\d+ MiB · onnx\/model\.onnx_data/);
    await page.locator("#hub").screenshot({ path: join(SHOTS, "10-admin-hub-pull-progress.png") });
    held.release();

    await page.waitForSelector(`.hub-job[data-job="${job}"][data-state="done"]`, { timeout: 30_000 });
    expect(await block.locator(".hub-message").textContent()).toBe(`${STORIES_REPO} is served as ${STORIES_REPO}`);
    const done = await bar.evaluate((p: HTMLProgressElement) => ({ value: p.value, max: p.max }));
    expect(done.value).toBe(done.max);
    expect(await served()).toContain(STORIES_REPO);
    await page.locator("#hub").screenshot({ path: join(SHOTS, "11-admin-hub-pull-done.png") });

    // Refused at once (bad dtype for this repo is found by the job; a bad id by the form).
    await page.getByLabel("Repository").fill("not a repo");
    await page.getByRole("button", { name: "Pull" }).click();
    await page.waitForSelector("#hub-pull-error:not([hidden])");
    expect(await page.locator("#hub-pull-error").textContent()).toContain("is not a Hub model repository id");

    await page.getByLabel("Repository").fill(GATED_REPO);
    await page.getByLabel("Dtype").selectOption("auto");
    await page.getByRole("button", { name: "Pull" }).click();
    await page.waitForFunction((id) => document.querySelector(".hub-job")?.getAttribute("data-job") !== id, job);
    const failed = await page.locator(".hub-job").first().getAttribute("data-job");
    await page.waitForSelector(`.hub-job[data-job="${failed}"][data-state="failed"]`, { timeout: 30_000 });
    const alert = page.locator(`.hub-job[data-job="${failed}"] [role="alert"]`);
    expect(await alert.textContent()).toContain("gated repository");
    expect(await alert.textContent()).toContain("HF_TOKEN");
    await page.locator("#hub").screenshot({ path: join(SHOTS, "12-admin-hub-pull-failed.png") });
    await page.close();
  }, 90_000);
});
