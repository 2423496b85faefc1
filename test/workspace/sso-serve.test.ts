// `sluice serve` with the single sign-on flags, as an operator starts it: the redirect URI it
// prints, the sign-in page with password sign-in off, a provider that cannot be reached, and an
// account for new users that does not exist.
import { afterAll, expect, test } from "bun:test";
import { join } from "node:path";
import { closedPort } from "../helpers/otlp-receiver.ts";
import { BUN, REPO, tempDir } from "../helpers/paths.ts";
import { hintIn, runPrinted } from "../helpers/printed-commands.ts";
import { spawnServe } from "../helpers/serve-process.ts";

const dir = tempDir("sluice-sso-serve-");

/** What a stream gives up to and including the first line holding `needle`. */
async function readUntil(stream: ReadableStream<Uint8Array>, needle: string): Promise<string> {
  const reader = stream.getReader();
  let text = "";
  while (!text.slice(0, text.lastIndexOf("\n") + 1).includes(needle)) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`the stream ended without ${JSON.stringify(needle)}:\n${text}`);
    text += new TextDecoder().decode(value);
  }
  reader.releaseLock();
  return text;
}
afterAll(() => dir.remove());

test("serve prints the redirect URI; with password sign-in off the page offers only the provider; an unreachable provider is a clear 503", async () => {
  const issuer = `http://127.0.0.1:${closedPort()}`;
  const serve = await spawnServe(
    ["--data", join(dir.path, "a"), "--models", join(dir.path, "no-models"), "--no-demo", "--oidc-issuer", issuer, "--oidc-client-id", "sluice", "--oidc-provider-name", "Keycloak", "--no-password-sign-in"],
    { env: { SLUICE_OIDC_CLIENT_SECRET: "from-the-environment" }, stderr: "pipe" },
  );
  try {
    // At start, in the background, the provider is looked for; the log says why it failed.
    const log = await readUntil(serve.proc.stderr as ReadableStream<Uint8Array>, "OpenID provider discovery failed");
    expect(log).toContain(issuer);
    expect(log).not.toContain("from-the-environment");
    const redirectUri = `${serve.url}/workspace/oidc/callback`;
    expect(serve.banner).toContain(`Single sign-on: register this redirect URI at the OpenID provider: ${redirectUri}`);
    expect(serve.banner).not.toContain("from-the-environment");
    expect(serve.banner).toContain("Create an operator (EMAIL is yours, as the OpenID provider knows it;");
    const page = await (await fetch(`${serve.url}/workspace/signin`)).text();
    expect(page).toContain("Sign in with Keycloak");
    expect(page).not.toContain('name="password"');
    const start = await fetch(`${serve.url}/workspace/oidc/start`, { redirect: "manual" });
    expect(start.status).toBe(503);
    expect(await start.text()).toContain("Keycloak cannot be reached just now");
    // The provider's own refusal (the person cancelled), in its words.
    const cancelled = await fetch(`${serve.url}/workspace/oidc/callback?error=access_denied&error_description=The+user+cancelled&state=x`);
    expect(cancelled.status).toBe(403);
    expect(await cancelled.text()).toContain("Keycloak did not sign you in: The user cancelled (access_denied).");
    // The server goes on: the API answers.
    expect((await fetch(`${serve.url}/health`)).status).toBe(200);
  } finally {
    await serve.stop();
  }
}, 60_000);

test("serve refuses to start when the account for new SSO users does not exist", async () => {
  const proc = Bun.spawn(
    [BUN, join(REPO, "src/cli/main.ts"), "serve", "--port", "0", "--data", join(dir.path, "b"), "--models", join(dir.path, "no-models"), "--no-demo", "--oidc-issuer", "https://id.example.com", "--oidc-client-id", "sluice", "--oidc-account", "corp"],
    { stdout: "ignore", stderr: "pipe", env: { ...process.env, SLUICE_WARMUP_MS: "0" } },
  );
  expect(await proc.exited).toBe(2);
  const err = await new Response(proc.stderr).text();
  expect(err).toContain("(--oidc-account corp) does not exist: create it first (see: ");
  // The command it names, run as printed, makes the next start succeed.
  const printed = hintIn(err)!;
  expect(printed).toEndWith(`accounts create corp --data ${join(dir.path, "b")}`);
  const created = await runPrinted(printed, REPO, {});
  expect(created.code).toBe(0);
  const again = await spawnServe(["--data", join(dir.path, "b"), "--models", join(dir.path, "no-models"), "--no-demo", "--oidc-issuer", "https://id.example.com", "--oidc-client-id", "sluice", "--oidc-account", "corp"]);
  expect(again.banner).toContain("/workspace/oidc/callback");
  await again.stop();
}, 60_000);
