// Several `sluice serve` processes on one real PostgreSQL, each with a models directory of its own,
// for the cluster tests and the two-node benchmark.
import { symlinkSync } from "node:fs";
import { join } from "node:path";
import type { SyntheticSpec } from "../../src/modelkit/index.ts";
import { syntheticModel, tinyModelsRoot } from "./models.ts";
import { BUN, REPO, tempDir } from "./paths.ts";
import { startPostgres, type PostgresServer } from "./postgres.ts";
import { spawnServe, type ServeProcess } from "./serve-process.ts";

export const SECRET = "test-cluster-secret-0123456789";

export interface NodeSpec {
  /** Model directory name → its synthetic spec (built once into the shared cache). */
  models: Record<string, SyntheticSpec>;
  args?: string[];
  /** Environment variables of this node's process (over the cluster's). */
  env?: Record<string, string>;
}

export interface ClusterNode extends ServeProcess {
  modelsDir: string;
  dataDir: string;
}

export interface TestCluster {
  pg: PostgresServer;
  database: string;
  /** The key printed by the first node (account `local`, unlimited). */
  key: string;
  nodes: ClusterNode[];
  /** Starts another node on the same database. */
  startNode(spec: NodeSpec): Promise<ClusterNode>;
  /** `sluice …` against the shared database; stdout, or throws with stderr. */
  sluice(...args: string[]): string;
  stop(): Promise<void>;
}

/** Heartbeats fast enough that a dead node leaves the lists within a couple of seconds. */
export const FAST_HEARTBEAT = ["--heartbeat-seconds", "0.2", "--node-timeout-seconds", "1.5"];

export async function startCluster(specs: NodeSpec[], opts: { pg?: PostgresServer } = {}): Promise<TestCluster> {
  const pg = opts.pg ?? (await startPostgres());
  const database = await pg.createDatabase();
  const dirs: { remove(): void }[] = [];
  const nodes: ClusterNode[] = [];
  const startNode = async (spec: NodeSpec): Promise<ClusterNode> => {
    const models = tempDir("sluice-cluster-models-");
    const data = tempDir("sluice-cluster-data-");
    dirs.push(models, data);
    for (const [name, s] of Object.entries(spec.models)) symlinkSync(await syntheticModel(tinyModelsRoot(), name, s), join(models.path, name));
    const node = await spawnServe(
      ["--data", data.path, "--models", models.path, "--no-demo", "--device", "cpu", "--threads", "1", ...FAST_HEARTBEAT, ...(spec.args ?? [])],
      { env: { SLUICE_DATABASE: database, SLUICE_CLUSTER_SECRET: SECRET, SLUICE_LOG_LEVEL: "warn", ...spec.env }, stderr: process.env.SLUICE_TEST_LOGS ? "inherit" : "ignore" },
    );
    const n = Object.assign(node, { modelsDir: models.path, dataDir: data.path });
    nodes.push(n);
    return n;
  };
  // One after the other: the first creates the local account and prints its key.
  for (const s of specs) await startNode(s);
  const key = nodes[0]!.key!;
  return {
    pg,
    database,
    key,
    nodes,
    startNode,
    sluice(...args) {
      const p = Bun.spawnSync([BUN, join(REPO, "src/cli/main.ts"), ...args], { stdout: "pipe", stderr: "pipe", env: { ...process.env, SLUICE_DATABASE: database } });
      if (p.exitCode !== 0) throw new Error(`sluice ${args.join(" ")}: ${p.stderr.toString()}`);
      return p.stdout.toString();
    },
    async stop() {
      for (const n of nodes) if (n.proc.exitCode === null && !n.proc.killed) await n.stop("SIGTERM");
      dirs.forEach((d) => d.remove());
      if (!opts.pg) pg.destroy();
    },
  };
}
