// The gateway for benchmarks, in its own process as in production: the load generator's own
// work (the openai client parsing every chunk) then does not share the server's thread.
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import OpenAI from "openai";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openSqliteStore, type Store } from "../src/store/index.ts";
import { unlimitedAccountKey } from "../test/helpers/accounts.ts";
import { spawnServe } from "../test/helpers/serve-process.ts";

export interface ServerProcess {
  url: string;
  key: string;
  /** The server's process id; its main (HTTP) thread has the same id. */
  pid: number;
  /** Keys of `count` new accounts (all models, unlimited plan), made in the server's store while it runs. */
  newAccountKeys(prefix: string, count: number): Promise<string[]>;
  stop(): Promise<void>;
}

export interface ServerProcessOptions {
  /** --device (default cpu). */
  device?: "cpu" | "cuda";
  /** Variables the server gets besides this process's. */
  env?: Record<string, string | undefined>;
}

export async function startServerProcess(modelsDir: string, extraArgs: string[] = [], opts: ServerProcessOptions = {}): Promise<ServerProcess> {
  const data = mkdtempSync(join(tmpdir(), "sluice-bench-data-"));
  const server = await spawnServe(
    ["--data", data, "--models", modelsDir, "--no-demo", "--device", opts.device ?? "cpu", "--log-level", "error", ...extraArgs],
    // As an operator starts it: the models warmed up at load as serve does by default.
    { stderr: "inherit", env: { SLUICE_WARMUP_MS: process.env.SLUICE_WARMUP_MS, ...opts.env } },
  ).catch((e: unknown) => {
    rmSync(data, { recursive: true, force: true });
    throw e;
  });
  return {
    url: server.url,
    key: server.key!,
    pid: server.proc.pid,
    async newAccountKeys(prefix: string, count: number) {
      // The server's own SQLite file, opened beside it (as the CLI does while it runs).
      const store = openSqliteStore(join(data, "sluice.db"));
      try {
        return await accountKeys(store, prefix, count);
      } finally {
        await store.close();
      }
    },
    async stop() {
      await server.stop();
      rmSync(data, { recursive: true, force: true });
    },
  };
}

/**
 * One sample of the server's /metrics: the value of `name` on the line whose labels are exactly
 * `labels` (in any order); null when the server has no such line.
 */
export async function readMetric(server: Pick<ServerProcess, "url">, name: string, labels: Record<string, string>): Promise<number | null> {
  const body = await (await fetch(`${server.url}/metrics`)).text();
  const want = Object.entries(labels)
    .map(([k, v]) => `${k}="${v}"`)
    .sort()
    .join(",");
  for (const line of body.split("\n")) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})? (\S+)/.exec(line);
    if (!m || m[1] !== name) continue;
    const have = (m[2] ?? "").split(",").filter(Boolean).sort().join(",");
    if (have === want) return Number(m[3]);
  }
  return null;
}

/** Keys of `count` new accounts named `prefix`-1, -2, …: all models, an unlimited plan (benchmarks measure speed, not credit). */
export async function accountKeys(store: Store, prefix: string, count: number): Promise<string[]> {
  const keys: string[] = [];
  for (let i = 0; i < count; i++) keys.push(await unlimitedAccountKey(store, `${prefix}-${i + 1}`));
  return keys;
}

/**
 * A new account's client per call (accounts made 64 at a time): for benchmarks that send the same
 * prompts again and again, whose answers one account would otherwise have drafted from its own
 * earlier ones (src/engine/speculation/history.ts).
 */
export function freshClients(server: ServerProcess, prefix: string): () => Promise<OpenAI> {
  const keys: string[] = [];
  let made = 0;
  let refill: Promise<void> | null = null;
  return async () => {
    while (keys.length === 0) {
      refill ??= server.newAccountKeys(`${prefix}-${++made}`, 64).then((k) => {
        keys.push(...k);
        refill = null;
      });
      await refill;
    }
    return new OpenAI({ apiKey: keys.pop()!, baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 600_000 });
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
