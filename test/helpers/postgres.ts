// A real PostgreSQL for tests: Debian's binaries (initdb, pg_ctl) in a temp directory, on a free
// port, run as the `postgres` user when the tests run as root. One server per test file; each
// store gets a database of its own. Tests that need it skip, saying why, where it is absent.
import { afterAll, beforeAll } from "bun:test";
import { SQL } from "bun";
import { chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

function findBin(): string | null {
  const root = "/usr/lib/postgresql";
  if (!existsSync(root)) return null;
  const versions = readdirSync(root)
    .filter((v) => existsSync(join(root, v, "bin", "initdb")))
    .sort((a, b) => Number(b) - Number(a));
  return versions.length ? join(root, versions[0]!, "bin") : null;
}

const BIN = findBin();
const ROOT = process.getuid?.() === 0;
/** The postgres user's uid and gid when running as root (PostgreSQL refuses to run as root). */
function postgresUser(): { uid: number; gid: number } | null {
  if (!ROOT) return null;
  const p = Bun.spawnSync(["id", "-u", "postgres"]);
  const g = Bun.spawnSync(["id", "-g", "postgres"]);
  if (p.exitCode !== 0) return null;
  return { uid: Number(p.stdout.toString()), gid: Number(g.stdout.toString()) };
}
const USER = postgresUser();

/** Why the PostgreSQL tests cannot run here, or null when they can. */
export const postgresMissing: string | null = !BIN
  ? "PostgreSQL is not installed (apt-get install postgresql; .ci/run does it): PostgreSQL tests skipped"
  : ROOT && !USER
    ? "running as root without a `postgres` user to run PostgreSQL as: PostgreSQL tests skipped"
    : null;

export interface PostgresServer {
  port: number;
  /** A URL for a database of this server (default: the `postgres` database). */
  url(database?: string): string;
  /** A new empty database; its URL. */
  createDatabase(): Promise<string>;
  /** Stops the server (fast shutdown: connections are cut) and starts it again on the same port and data. */
  stop(): void;
  start(): void;
  /** Stops it for good and removes its files. */
  destroy(): void;
}

function run(args: string[]): string {
  const cmd = USER ? ["runuser", "-u", "postgres", "--", ...args] : args;
  const p = Bun.spawnSync(cmd, { stdout: "pipe", stderr: "pipe" });
  if (p.exitCode !== 0) throw new Error(`${args.join(" ")} failed: ${p.stderr.toString()}${p.stdout.toString()}`);
  return p.stdout.toString();
}

export async function freePort(): Promise<number> {
  const s = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = s.port;
  s.stop(true);
  return port;
}

let databases = 0;

export async function startPostgres(): Promise<PostgresServer> {
  if (postgresMissing) throw new Error(postgresMissing);
  const dir = mkdtempSync(join(tmpdir(), "sluice-pg-"));
  if (USER) chownSync(dir, USER.uid, USER.gid);
  const data = join(dir, "data");
  run([join(BIN!, "initdb"), "-D", data, "-A", "trust", "-U", "sluice", "-E", "UTF8", "--no-sync"]);
  const port = await freePort();
  // Durability off: these are throwaway databases, and fsync is most of a commit's cost.
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200`;
  const start = () => {
    try {
      run([join(BIN!, "pg_ctl"), "-D", data, "-o", options, "-l", join(dir, "log"), "-w", "-t", "30", "start"]);
    } catch (e) {
      const log = existsSync(join(dir, "log")) ? readFileSync(join(dir, "log"), "utf8").slice(-2000) : "";
      throw new Error(`${(e as Error).message}\n${log}`);
    }
  };
  const stop = () => run([join(BIN!, "pg_ctl"), "-D", data, "-m", "fast", "-w", "stop"]);
  start();
  let alive = true;
  const destroy = () => {
    if (!alive) return;
    alive = false;
    try {
      run([join(BIN!, "pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop"]);
    } catch {}
    rmSync(dir, { recursive: true, force: true });
  };
  process.once("exit", destroy);
  const url = (database = "postgres") => `postgres://sluice@127.0.0.1:${port}/${database}`;
  return {
    port,
    url,
    async createDatabase() {
      const name = `t${process.pid}_${++databases}`;
      const admin = new SQL(url(), { max: 1 });
      try {
        await admin.unsafe(`CREATE DATABASE ${name}`);
      } finally {
        await admin.close();
      }
      return url(name);
    },
    stop,
    start,
    destroy,
  };
}

/** One server for the test file: started before its tests, removed after; null where PostgreSQL is missing. */
export function postgresFixture(): { server: PostgresServer | null } {
  const fx: { server: PostgresServer | null } = { server: null };
  beforeAll(async () => {
    if (postgresMissing) {
      console.warn(postgresMissing);
      return;
    }
    fx.server = await startPostgres();
  }, 60_000);
  afterAll(() => fx.server?.destroy());
  return fx;
}
