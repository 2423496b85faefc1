// The test's OpenID provider (oidc-provider-main.ts: panva's oidc-provider) in a child process of
// this same Bun. Its port and client are chosen first, so a server can be configured with them
// before the provider starts with that server's redirect URI.
import { join } from "node:path";
import { BUN } from "./paths.ts";
import { freePort } from "./postgres.ts";

export interface TestOidcProvider {
  issuer: string;
  clientId: string;
  clientSecret: string;
  /** Starts the provider with these redirect URIs registered for the client; resolves once it listens. */
  start(redirectUris: string[]): Promise<void>;
  stop(): Promise<void>;
}

export async function reserveOidcProvider(): Promise<TestOidcProvider> {
  const port = await freePort();
  const clientId = "sluice-workspace";
  const clientSecret = `secret-${crypto.randomUUID()}`;
  let child: Bun.Subprocess<"ignore", "pipe", "inherit" | "ignore"> | null = null;
  return {
    issuer: `http://127.0.0.1:${port}`,
    clientId,
    clientSecret,
    async start(redirectUris) {
      child = Bun.spawn([BUN, join(import.meta.dir, "oidc-provider-main.ts"), String(port), clientId, clientSecret, redirectUris.join(",")], {
        stdout: "pipe",
        stderr: process.env.SLUICE_TEST_LOGS ? "inherit" : "ignore",
      });
      const reader = child.stdout.getReader();
      let seen = "";
      while (!seen.includes("ready ")) {
        const { value, done } = await reader.read();
        if (done) throw new Error(`the OpenID provider exited before it was ready: ${seen}`);
        seen += new TextDecoder().decode(value);
      }
      reader.releaseLock();
    },
    async stop() {
      if (!child) return;
      child.kill();
      await child.exited;
    },
  };
}
