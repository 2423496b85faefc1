// Starts the real server (store, engine workers, Elysia on an ephemeral port) for end-to-end tests.
import { afterAll, beforeAll } from "bun:test";
import OpenAI from "openai";
import { createEngine, type CreateEngineOptions } from "../../src/engine/index.ts";
import { createLogger, silentLogger, type Logger } from "../../src/log.ts";
import { startServer, type RunningServer, type ServeOptions } from "../../src/server.ts";
import { openStore, type Store } from "../../src/store/index.ts";
import { tempDir } from "./paths.ts";
import { tracingSettings, type TracingOptions } from "../../src/api/tracing/settings.ts";

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
  watchModels?: boolean;
  hub?: ServeOptions["hub"];
  /** Engine settings beyond the defaults (memory budget, keep-alive, queue, scheduling, …). */
  engine?: Partial<Omit<CreateEngineOptions, "log">>;
  /** The operator's request limits (serve's --max-tokens-cap and the like). */
  limits?: ServeOptions["limits"];
  /** OpenTelemetry tracing as serve's flags set it (this process's OTEL_ variables are not read). */
  tracing?: TracingOptions;
  /** The admin API's settings (serve --no-admin-api, --admin-port, --admin-host, --admin-rpm). */
  admin?: ServeOptions["admin"];
  /** Single sign-on and the password form, as serve's --oidc-* flags and --no-password-sign-in set them. */
  oidc?: ServeOptions["oidc"];
  passwordSignIn?: boolean;
  ssoAudit?: ServeOptions["ssoAudit"];
  /** Runs on the fresh data directory's store before the server starts (accounts it expects). */
  prepareData?: (store: Store) => Promise<unknown>;
}): Promise<TestServer> {
  const data = tempDir("sluice-data-");
  if (opts.prepareData) {
    const store = await openStore({ dataDir: data.path });
    try {
      await opts.prepareData(store);
    } finally {
      await store.close();
    }
  }
  const log = opts.log ?? (process.env.SLUICE_TEST_LOGS ? createLogger({ level: "debug" }) : silentLogger());
  const engine = await createEngine({ log, device: "cpu", threads: 1, ...opts.engine });
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
    watchModels: opts.watchModels,
    hub: opts.hub,
    limits: opts.limits,
    tracing: opts.tracing ? tracingSettings(opts.tracing, {}) : null,
    admin: opts.admin,
    oidc: opts.oidc,
    passwordSignIn: opts.passwordSignIn,
    ssoAudit: opts.ssoAudit,
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

export interface ServerFixture {
  server: TestServer;
  client: OpenAI;
  modelsDir: string;
}

/**
 * Registers beforeAll/afterAll hooks that fill a fresh models directory with `prepare`, start the
 * real server on it and make an openai client; the returned object is filled in by beforeAll.
 */
export function serverFixture(
  prepare: (modelsDir: string) => Promise<unknown>,
  opts: Omit<Parameters<typeof startTestServer>[0], "modelsDir"> = {},
): ServerFixture {
  const fx = {} as ServerFixture;
  let models: ReturnType<typeof tempDir> | null = null;
  beforeAll(async () => {
    models = tempDir("sluice-models-");
    await prepare(models.path);
    fx.modelsDir = models.path;
    fx.server = await startTestServer({ ...opts, modelsDir: models.path });
    fx.client = new OpenAI({ apiKey: fx.server.key, baseURL: `${fx.server.url}/v1`, maxRetries: 0 });
  }, 120_000);
  afterAll(async () => {
    await fx.server?.cleanup();
    models?.remove();
  });
  return fx;
}

/** A logger that keeps the server's lines (JSON, one per line) for a test to read. */
export function capturedLog(): { lines: string[]; log: Logger } {
  const lines: string[] = [];
  return { lines, log: createLogger({ write: (line) => void lines.push(line) }) };
}

/**
 * The messages `model`'s load logged about `serve --batch-invariant`: ["batch-invariant: canonical
 * attention…"] where the option applies; a note that it does not apply on a graph it cannot
 * rewrite (the server runs on, so a test comparing answers token for token must look).
 */
export function batchInvariantNotes(lines: readonly string[], model: string): string[] {
  return lines.filter((l) => l.includes(`"model":"${model}"`) && l.includes("batch-invariant")).map((l) => (JSON.parse(l) as { msg: string }).msg);
}
