// The two ways Sluice is deployed, for tests that must hold on both: one `sluice serve` process on
// its SQLite file, and two processes on one PostgreSQL (each serving one model, forwarding
// requests for the other's). Either way: the nodes' URLs, the CLI against the same store, and the
// store itself opened beside them.
import { Database } from "bun:sqlite";
import { SQL } from "bun";
import { symlinkSync } from "node:fs";
import { join } from "node:path";
import { openPostgresStore, openSqliteStore, type Store } from "../../src/store/index.ts";
import { startCluster } from "./cluster.ts";
import { syntheticModel, tinyModelsRoot } from "./models.ts";
import { BUN, REPO, tempDir } from "./paths.ts";
import { spawnServe, type ServeProcess } from "./serve-process.ts";

export const A_MODEL = "gov/a-1.0";
export const B_MODEL = "gov/b-1.0";

export interface Deployment {
  kind: "sqlite" | "postgres";
  /** Base URLs (without /v1) of the nodes; SQLite's one node appears twice, so tests split requests alike. */
  nodes: string[];
  store: Store;
  /** `sluice …` against the deployment's store; stdout, or throws with stderr. */
  sluice(...args: string[]): string;
  /** The same, with its exit code and both outputs (for refusals). */
  sluiceRaw(...args: string[]): { code: number; stdout: string; stderr: string };
  /** Raw SQL against the database, around the store (what someone with database access could do). */
  raw(sql: string): Promise<unknown[]>;
  stop(): Promise<void>;
}

const run = (args: string[], env: Record<string, string>) => {
  const p = Bun.spawnSync([BUN, join(REPO, "src/cli/main.ts"), ...args], { stdout: "pipe", stderr: "pipe", env: { ...process.env, ...env } });
  return { code: p.exitCode ?? -1, stdout: p.stdout.toString(), stderr: p.stderr.toString() };
};

function wrap(kind: Deployment["kind"], nodes: string[], store: Store, env: Record<string, string>, extra: string[], stop: () => Promise<void>): Deployment {
  const sluiceRaw = (...args: string[]) => run([...args, ...extra], env);
  return {
    kind,
    nodes,
    store,
    sluiceRaw,
    async raw(sql) {
      if (kind === "sqlite") {
        const db = new Database(store.location);
        try {
          return db.query(sql).all();
        } finally {
          db.close();
        }
      }
      const c = new SQL(env.SLUICE_DATABASE!, { max: 1 });
      try {
        return [...((await c.unsafe(sql)) as unknown[])];
      } finally {
        await c.close();
      }
    },
    sluice(...args) {
      const r = sluiceRaw(...args);
      if (r.code !== 0) throw new Error(`sluice ${args.join(" ")}: ${r.stderr}`);
      return r.stdout;
    },
    async stop() {
      await store.close();
      await stop();
    },
  };
}

export async function startSqliteDeployment(args: string[] = []): Promise<Deployment> {
  const models = tempDir("sluice-gov-models-");
  const data = tempDir("sluice-gov-data-");
  symlinkSync(await syntheticModel(tinyModelsRoot(), "gov-a", { preset: "tiny-bytes", seed: 41, id: A_MODEL }), join(models.path, "gov-a"));
  symlinkSync(await syntheticModel(tinyModelsRoot(), "gov-b", { preset: "tiny-bytes", seed: 42, id: B_MODEL }), join(models.path, "gov-b"));
  const node: ServeProcess = await spawnServe(["--data", data.path, "--models", models.path, "--no-demo", "--device", "cpu", "--threads", "1", ...args], {
    env: { SLUICE_LOG_LEVEL: "warn" },
    stderr: process.env.SLUICE_TEST_LOGS ? "inherit" : "ignore",
  });
  const store = openSqliteStore(join(data.path, "sluice.db"));
  return wrap("sqlite", [node.url, node.url], store, {}, ["--data", data.path], async () => {
    await node.stop();
    models.remove();
    data.remove();
  });
}

export async function startPostgresDeployment(args: string[] = []): Promise<Deployment> {
  const c = await startCluster([
    { models: { "gov-a": { preset: "tiny-bytes", seed: 41, id: A_MODEL } }, args },
    { models: { "gov-b": { preset: "tiny-bytes", seed: 42, id: B_MODEL } }, args },
  ]);
  const store = await openPostgresStore(c.database);
  return wrap("postgres", c.nodes.map((n) => n.url), store, { SLUICE_DATABASE: c.database }, [], () => c.stop());
}
