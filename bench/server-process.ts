// The gateway for benchmarks, in its own process as in production: the load generator's own
// work (the openai client parsing every chunk) then does not share the server's thread.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

export interface ServerProcess {
  url: string;
  key: string;
  stop(): Promise<void>;
}

export async function startServerProcess(modelsDir: string, extraArgs: string[] = []): Promise<ServerProcess> {
  const data = mkdtempSync(join(tmpdir(), "sluice-bench-data-"));
  const main = resolve(import.meta.dir, "../src/cli/main.ts");
  const proc = Bun.spawn(
    [process.execPath, main, "serve", "--port", "0", "--data", data, "--models", modelsDir, "--no-demo", "--device", "cpu", "--log-level", "error", ...extraArgs],
    { stdout: "pipe", stderr: "inherit" },
  );
  const reader = proc.stdout.getReader();
  let out = "";
  while (!/at (http:\/\/\S+)\/v1[\s\S]*?(sk-sluice-\w+)/.test(out)) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`the server exited before it was ready:\n${out}`);
    out += new TextDecoder().decode(value);
  }
  reader.releaseLock();
  const m = /at (http:\/\/\S+)\/v1[\s\S]*?(sk-sluice-\w+)/.exec(out)!;
  return {
    url: m[1]!,
    key: m[2]!,
    async stop() {
      proc.kill("SIGTERM");
      await proc.exited;
      rmSync(data, { recursive: true, force: true });
    },
  };
}
