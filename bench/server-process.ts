// The gateway for benchmarks, in its own process as in production: the load generator's own
// work (the openai client parsing every chunk) then does not share the server's thread.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { spawnServe } from "../test/helpers/serve-process.ts";

export interface ServerProcess {
  url: string;
  key: string;
  /** The server's process id; its main (HTTP) thread has the same id. */
  pid: number;
  stop(): Promise<void>;
}

export async function startServerProcess(modelsDir: string, extraArgs: string[] = []): Promise<ServerProcess> {
  const data = mkdtempSync(join(tmpdir(), "sluice-bench-data-"));
  const server = await spawnServe(
    ["--data", data, "--models", modelsDir, "--no-demo", "--device", "cpu", "--log-level", "error", ...extraArgs],
    { stderr: "inherit" },
  );
  return {
    url: server.url,
    key: server.key!,
    pid: server.proc.pid,
    async stop() {
      await server.stop();
      rmSync(data, { recursive: true, force: true });
    },
  };
}
