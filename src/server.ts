// The composition root: store + engine + api, with catalog synchronisation at start and on SIGHUP.
import { join, resolve } from "node:path";
import { createApi, DEFAULT_MAX_BODY_BYTES } from "./api/app.ts";
import { Lifecycle } from "./api/lifecycle.ts";
import type { RequestLimits } from "./api/limits/request-limits.ts";
import { declaredContextLength, discoverModelDirs, type DiscoveredModelDir } from "./engine/discovery.ts";
import { watchModelsDir } from "./engine/models-watch.ts";
import type { Engine } from "./engine/types.ts";
import { commandLine } from "./invocation.ts";
import type { Logger } from "./log.ts";
import { hubEndpoint, hubToken, type HubToken } from "./modelkit/hub/auth.ts";
import { PullJobs } from "./modelkit/hub/jobs.ts";
import { createWorkspace } from "./workspace/index.ts";
import { openSqliteStore, type DiscoveredModel, type Store } from "./store/index.ts";
import { VERSION } from "./version.ts";

export interface ServeOptions {
  host: string;
  port: number;
  dataDir: string;
  modelsDir: string;
  publicUrl?: string;
  maxBodyBytes?: number;
  /** Limits on requests (messages, max_tokens, wall time, idle streams); see serve --help. */
  limits?: Partial<RequestLimits>;
  /** Generate and serve the demo model when the models directory holds none. */
  demoModel: boolean;
  log: Logger;
  engine: Engine;
  /** Writes the demo model's directory under the given root; returns nothing, the scan finds it. */
  buildDemoModel?: (root: string) => Promise<void> | void;
  /** Serve the account workspace on its own port (0: any free port) instead of under the API's. */
  workspacePort?: number;
  workspaceHost?: string;
  /**
   * Watch the models directory and synchronise the catalog when models appear, change or go
   * (debounced); otherwise only at start and on SIGHUP.
   */
  watchModels?: boolean;
  /** The Hub the admin page pulls from (default: HF_ENDPOINT / HF_TOKEN of the environment, CPU). */
  hub?: { endpoint?: string; token?: () => HubToken | null; device?: "cuda" | "cpu" };
}

export interface RunningServer {
  url: string;
  port: number;
  store: Store;
  /** The key created on the very first start, once; null on later starts. */
  firstKey: string | null;
  /** Where the account workspace is served, e.g. http://127.0.0.1:8080/workspace/ */
  workspaceUrl: string;
  syncCatalog(): Promise<void>;
  /** Graceful: /ready turns false, nothing new starts, generations run up to the deadline. */
  stop(deadlineMs?: number): Promise<void>;
}

export const DEFAULT_ACCOUNT = "local";

function ensureLocalAccount(store: Store): string | null {
  if (store.accounts.get(DEFAULT_ACCOUNT)) return null;
  const account = store.accounts.create(DEFAULT_ACCOUNT);
  store.billing.setPlan(account.id, "unlimited");
  return store.keys.create(account.id, "created at first start").key;
}

export async function startServer(opts: ServeOptions): Promise<RunningServer> {
  const { log, engine } = opts;
  const store = openSqliteStore(join(opts.dataDir, "sluice.db"));
  const firstKey = ensureLocalAccount(store);
  let ready = false;

  const scan = async (): Promise<DiscoveredModelDir[]> => {
    let found = discoverModelDirs(resolve(opts.modelsDir));
    if (found.length === 0 && opts.demoModel && opts.buildDemoModel) {
      const demoRoot = resolve(opts.dataDir, "demo-models");
      if (discoverModelDirs(demoRoot).length === 0) {
        log.info("models directory is empty: generating the demo model (random weights)", { dir: demoRoot });
        await opts.buildDemoModel(demoRoot);
      }
      found = discoverModelDirs(demoRoot);
    }
    return found;
  };

  const syncOnce = async () => {
    const found = await scan();
    const loadable = found.filter((m) => m.problem === null);
    const results = await engine.load(loadable.map((m) => ({ id: m.id, dir: m.dir, stamp: m.stamp })));
    const byId = new Map(results.map((r) => [r.id, r]));
    const entries: DiscoveredModel[] = found.map((m) => {
      const loaded = byId.get(m.id);
      const loadError = m.problem ?? loaded?.error ?? (loaded?.model ? null : "not loaded");
      if (loadError) log.warn("model left out of the catalog", { model: m.id, dir: m.dir, reason: loadError });
      const caps = m.card.capabilities ?? {};
      return {
        id: m.id,
        displayName: loaded?.model?.displayName ?? m.card.display_name ?? m.id,
        contextLength: loaded?.model?.contextLength ?? declaredContextLength(m),
        sourceDir: m.dir,
        supportsImages: loaded?.model?.supportsImages ?? caps.images ?? false,
        supportsTools: loaded?.model?.supportsTools ?? caps.tools ?? false,
        supportsStructured: loaded?.model?.supportsStructuredOutput ?? caps.structured_output ?? false,
        ownedBy: m.card.owned_by ?? (m.id.includes("/") ? m.id.split("/")[0]! : "sluice"),
        loadError,
      };
    });
    const change = store.catalog.sync(entries);
    log.info("catalog synchronised", {
      served: store.catalog.listServed().map((m) => m.id),
      added: change.added,
      missing: change.missing,
    });
  };

  // One synchronisation at a time: the watcher, SIGHUP and a finished pull may ask at once.
  let queue: Promise<unknown> = Promise.resolve();
  const syncCatalog = (): Promise<void> => {
    const run = queue.then(syncOnce);
    queue = run.catch(() => {});
    return run;
  };

  await syncCatalog();
  const modelsDir = resolve(opts.modelsDir);
  const hubPulls = new PullJobs({
    modelsDir,
    endpoint: opts.hub?.endpoint ?? hubEndpoint(),
    token: opts.hub?.token ?? (() => hubToken()),
    device: opts.hub?.device ?? "cpu",
    onPlaced: async (id) => {
      await syncCatalog();
      const m = store.catalog.get(id);
      return m ? m.loadError : "the catalog scan did not find it";
    },
  });
  const lifecycle = new Lifecycle();
  const api = createApi({
    lifecycle,
    store,
    engine,
    log,
    publicUrl: opts.publicUrl,
    maxBodyBytes: opts.limits?.maxBodyBytes ?? opts.maxBodyBytes,
    limits: opts.limits,
    ready: () => ready,
    version: VERSION,
  });
  const ownPort = opts.workspacePort !== undefined;
  let apiUrl = () => "";
  const workspace = createWorkspace({
    store,
    log: log.child({ room: "workspace" }),
    // The same base URL /v1/integrations announces: the public URL, else the API's own address.
    apiBase: (req) => opts.publicUrl?.replace(/\/+$/, "") ?? (ownPort ? apiUrl() : new URL(req.url).origin),
    hubPulls,
    // The pages' CLI notes act on this server's database, wherever the operator keeps it.
    command: (...words) => commandLine(...words, ...(resolve(opts.dataDir) === resolve("data") ? [] : ["--data", opts.dataDir])),
  });
  // The workspace's icon at the API's root too, where a browser looking at the API asks for it.
  api.get("/favicon.ico", ({ request }) => workspace.fetch(request));
  if (!ownPort) {
    api.all("/workspace", ({ request, server }) => workspace.fetch(request, server?.requestIP(request)?.address), { parse: "none" });
    api.all("/workspace/*", ({ request, server }) => workspace.fetch(request, server?.requestIP(request)?.address), { parse: "none" });
  }
  api.listen({
    hostname: opts.host,
    port: opts.port,
    // A hard cap above the API's own limit, so oversized bodies are refused before buffering.
    maxRequestBodySize: (opts.limits?.maxBodyBytes ?? opts.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES) + 1024 * 1024,
    idleTimeout: 255,
  });
  const server = api.server!;
  ready = true;
  const url = `http://${opts.host.includes(":") ? `[${opts.host}]` : opts.host}:${server.port}`;
  log.info("listening", { url, version: VERSION });
  apiUrl = () => url;
  const wsServer = ownPort
    ? Bun.serve({
        hostname: opts.workspaceHost ?? opts.host,
        port: opts.workspacePort,
        fetch: (req, srv) => workspace.fetch(req, srv.requestIP(req)?.address),
      })
    : null;
  const workspaceUrl = wsServer
    ? `http://${(opts.workspaceHost ?? opts.host).includes(":") ? `[${opts.workspaceHost ?? opts.host}]` : (opts.workspaceHost ?? opts.host)}:${wsServer.port}/workspace/`
    : `${url}/workspace/`;
  log.info("account workspace", { url: workspaceUrl });

  const onHup = () => {
    log.info("SIGHUP: synchronising the catalog");
    syncCatalog().catch((e) => log.error("catalog synchronisation failed", { error: (e as Error).message }));
  };
  process.on("SIGHUP", onHup);
  const unwatch = opts.watchModels
    ? watchModelsDir(modelsDir, {
        onChange: () => {
          log.info("models directory changed: synchronising the catalog");
          syncCatalog().catch((e) => log.error("catalog synchronisation failed", { error: (e as Error).message }));
        },
        onError: (e) => log.warn("watching the models directory failed; use SIGHUP to resynchronise", { error: e.message }),
        fingerprint: () => discoverModelDirs(modelsDir).map((m) => `${m.id}\t${m.dir}\t${m.stamp}`).join("\n"),
      })
    : () => {};

  return {
    url,
    port: server.port!,
    store,
    firstKey,
    workspaceUrl,
    syncCatalog,
    async stop(deadlineMs = 10_000) {
      ready = false;
      process.off("SIGHUP", onHup);
      unwatch();
      const { aborted } = await lifecycle.drain(deadlineMs);
      if (aborted > 0) log.warn("shutdown deadline reached: ended generations still running", { aborted });
      await api.stop(true);
      await wsServer?.stop(true);
      await engine.close();
      store.close();
    },
  };
}
