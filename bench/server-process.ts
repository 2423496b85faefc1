// The gateway for benchmarks, in its own process as in production: the load generator's own
// work (the openai client parsing every chunk) then does not share the server's thread.
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BUN, REPO } from "../test/helpers/paths.ts";
import { spawnServe } from "../test/helpers/serve-process.ts";

export interface ServerProcess {
  url: string;
  key: string;
  /** The server's process id; its main (HTTP) thread has the same id. */
  pid: number;
  /** A key of a new account (all models), created with the CLI on the server's data while it runs. */
  newAccountKey(name: string): Promise<string>;
  stop(): Promise<void>;
}

export async function startServerProcess(modelsDir: string, extraArgs: string[] = []): Promise<ServerProcess> {
  const data = mkdtempSync(join(tmpdir(), "sluice-bench-data-"));
  const server = await spawnServe(
    ["--data", data, "--models", modelsDir, "--no-demo", "--device", "cpu", "--log-level", "error", ...extraArgs],
    // As an operator starts it: the models warmed up at load as serve does by default.
    { stderr: "inherit", env: { SLUICE_WARMUP_MS: process.env.SLUICE_WARMUP_MS } },
  );
  return {
    url: server.url,
    key: server.key!,
    pid: server.proc.pid,
    async newAccountKey(name: string) {
      const cli = async (...args: string[]) => {
        const p = Bun.spawn([BUN, join(REPO, "src/cli/main.ts"), ...args, "--data", data], { cwd: REPO, stdout: "pipe", stderr: "pipe" });
        const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
        if (code !== 0) throw new Error(`sluice ${args.join(" ")}: ${err.trim()}`);
        return out.trim();
      };
      await cli("accounts", "create", name);
      // Benchmarks measure speed, not credit.
      await cli("billing", "plan", name, "unlimited");
      return await cli("keys", "create", "--account", name);
    },
    async stop() {
      await server.stop();
      rmSync(data, { recursive: true, force: true });
    },
  };
}

/** A thread of a process: its name and the CPU time it has used, from /proc (schedstat, nanoseconds). */
export interface ThreadCpu {
  tid: number;
  name: string;
  cpuNs: number;
}

/** The threads of a process now; one that ends while being read is left out. */
export function threadsCpu(pid: number): ThreadCpu[] {
  const out: ThreadCpu[] = [];
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const cpuNs = Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, "utf8").split(" ")[0]);
      out.push({ tid: Number(tid), name: readFileSync(`/proc/${pid}/task/${tid}/comm`, "utf8").trim(), cpuNs });
    } catch {
      // The thread ended in between.
    }
  }
  return out;
}

/** The threads of a server process, told apart by what runs on them. */
export const THREAD_GROUPS = ["model worker threads", "HTTP thread", "JIT compiler threads", "other threads"] as const;
export type ThreadGroup = (typeof THREAD_GROUPS)[number];

/** CPU microseconds of a server process's threads, by group. */
export function serverCpuUs(pid: number): Record<ThreadGroup, number> {
  const out = Object.fromEntries(THREAD_GROUPS.map((g) => [g, 0])) as Record<ThreadGroup, number>;
  for (const t of threadsCpu(pid)) {
    // Model workers (and their compile threads) are Bun Worker threads; JavaScriptCore compiles in JITWorker threads.
    const g: ThreadGroup = t.tid === pid ? "HTTP thread" : t.name === "Worker" ? "model worker threads" : t.name === "JITWorker" ? "JIT compiler threads" : "other threads";
    out[g] += t.cpuNs / 1000;
  }
  return out;
}

export const sumCpu = (c: Record<ThreadGroup, number>) => THREAD_GROUPS.reduce((a, g) => a + c[g], 0);
