// `GET /` is where a browser lands when someone types the server's address: a page that says where
// the API's base URL and the account workspace are. Clients that ask for JSON get the API's 404,
// which names both too.
import { expect, test } from "bun:test";
import { startTestServer } from "../helpers/server.ts";
import { tempDir } from "../helpers/paths.ts";

test("GET / points a browser at /v1 and the workspace; a JSON client gets a 404 naming both", async () => {
  const models = tempDir("sluice-root-");
  const server = await startTestServer({ modelsDir: models.path });
  try {
    const page = await fetch(`${server.url}/`, { headers: { accept: "text/html,application/xhtml+xml,*/*;q=0.8" } });
    expect(page.status).toBe(200);
    expect(page.headers.get("content-type")).toStartWith("text/html");
    const html = await page.text();
    expect(html).toContain(`<code>${server.url}/v1</code>`);
    expect(html).toContain(`<a href="${server.url}/workspace/">`);
    // The link leads to the workspace's sign-in.
    expect((await fetch(`${server.url}/workspace/`, { redirect: "manual" })).headers.get("location")).toBe("/workspace/signin");
    const api = await fetch(`${server.url}/`);
    expect(api.status).toBe(404);
    const body = (await api.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("unknown_url");
    expect(body.error.message).toContain(`${server.url}/v1`);
    expect(body.error.message).toContain(`${server.url}/workspace/`);
  } finally {
    await server.cleanup();
    models.remove();
  }
});
