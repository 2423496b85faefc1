// `sluice serve` as a real process on a free port, for tests and benchmarks that need the
// process itself (signals, crashes, flags, environment variables).
import { join } from "node:path";
import { BUN, REPO } from "./paths.ts";
import { readBanner } from "./printed-commands.ts";

export interface ServeProcess {
  proc: Bun.Subprocess<"ignore", "pipe", "pipe" | "ignore" | "inherit">;
  url: string;
  /** Printed on a first start only. */
  key: string | null;
  /** Everything the process printed on stdout up to its banner. */
  banner: string;
  /** Sends the signal and resolves with the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number>;
}

/** Resolves once the banner (the base URL, and the key on a first start) has been printed. */
export async function spawnServe(
  args: string[],
  opts: { env?: Record<string, string | undefined>; stderr?: "pipe" | "ignore" | "inherit" } = {},
): Promise<ServeProcess> {
  const proc = Bun.spawn([BUN, join(REPO, "src/cli/main.ts"), "serve", "--port", "0", ...args], {
    cwd: REPO,
    // No warm-up of the models unless asked for (by the caller's environment, or --warmup-ms):
    // it would add up to two seconds per model to every test that starts a server.
    env: { SLUICE_WARMUP_MS: "0", ...process.env, ...opts.env },
    stdout: "pipe",
    stderr: opts.stderr ?? "ignore",
  });
  const banner = await readBanner(proc.stdout);
  return {
    proc,
    url: /at (http:\/\/\S+)\/v1/.exec(banner)![1]!,
    key: /(sk-sluice-[0-9A-Za-z]+)/.exec(banner)?.[1] ?? null,
    banner,
    async stop(signal = "SIGTERM") {
      proc.kill(signal);
      return await proc.exited;
    },
  };
}
