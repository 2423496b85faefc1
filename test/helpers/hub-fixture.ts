// A local Hub serving the model kit's repos, an empty models directory and a real server on it,
// set up before a test file's tests and taken down after (skipped without stories260K, which
// the repos are built from).
import { afterAll, beforeAll } from "bun:test";
import { buildHubRepos, type HubFixtures } from "./hub-repos.ts";
import { startHubServer, type HubServer } from "./hub-server.ts";
import { hasStories, tempDir } from "./paths.ts";
import { startTestServer, type TestServer } from "./server.ts";

export interface HubFixture {
  hub: HubServer;
  /** The server's models directory, empty at the start. */
  models: string;
  server: TestServer;
}

export function hubFixture(serverOptions: (hub: HubServer) => Omit<Parameters<typeof startTestServer>[0], "modelsDir">): HubFixture {
  const fx = {} as HubFixture;
  let fixtures: HubFixtures | null = null;
  let models: ReturnType<typeof tempDir> | null = null;
  beforeAll(async () => {
    if (!hasStories) return;
    fixtures = await buildHubRepos();
    fx.hub = startHubServer(fixtures.repos);
    models = tempDir("sluice-pulled-");
    fx.models = models.path;
    fx.server = await startTestServer({ ...serverOptions(fx.hub), modelsDir: models.path });
  }, 120_000);
  afterAll(async () => {
    await fx.server?.cleanup();
    fx.hub?.stop();
    fixtures?.remove();
    models?.remove();
  });
  return fx;
}
