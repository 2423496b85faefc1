// Starts the real server (store, engine workers, Elysia on an ephemeral port) for end-to-end tests.
import { createEngine } from "../../src/engine/index.ts";
import { createLogger, silentLogger, type Logger } from "../../src/log.ts";
import { startServer, type RunningServer } from "../../src/server.ts";
import { tempDir } from "./paths.ts";

export interface TestServer extends RunningServer {
  key: string;
  dataDir: string;
  cleanup(): Promise<void>;
}

export async function startTestServer(opts: {
  modelsDir: string;
  publicUrl?: string;
  maxBodyBytes?: number;
  log?: Logger;
}): Promise<TestServer> {
  const data = tempDir("sluice-data-");
  const log = opts.log ?? (process.env.SLUICE_TEST_LOGS ? createLogger({ level: "debug" }) : silentLogger());
  const engine = await createEngine({ log, device: "cpu", threads: 1 });
  const server = await startServer({
    host: "127.0.0.1",
    port: 0,
    dataDir: data.path,
    modelsDir: opts.modelsDir,
    publicUrl: opts.publicUrl,
    maxBodyBytes: opts.maxBodyBytes,
    demoModel: false,
    log,
    engine,
  });
  return {
    ...server,
    key: server.firstKey!,
    dataDir: data.path,
    async cleanup() {
      await server.stop();
      data.remove();
    },
  };
}
