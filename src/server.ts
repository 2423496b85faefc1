// The composition root: store + engine + api, with catalog synchronisation at start and on SIGHUP.
import { hostname } from "node:os";
import { resolve } from "node:path";
import { createApi, DEFAULT_MAX_BODY_BYTES } from "./api/app.ts";
import { RateGuard, storeCounter } from "./api/limits/guard.ts";
import { createCluster, type Cluster } from "./cluster/index.ts";
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
import { openStore, type DiscoveredModel, type Store } from "./store/index.ts";
import { randomBase62 } from "./store/keys.ts";
import { VERSION } from "./version.ts";

export interface ServeOptions {
  host: string;
  port: number;
  dataDir: string;
  /** postgres://… : the store several nodes share (else the SQLite file in dataDir). */
  database?: string;
  /** With a shared database: how this node is reached, the secret of the hop between nodes, the heartbeat. */
  cluster?: {
    /** Default: the address this node listens on. */
    nodeUrl?: string;
    secret: string;
    heartbeatMs?: number;
    timeoutMs?: number;
  };
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
  /** This node's id (in the node list of a shared database). */
  nodeId: string;
  cluster: Cluster | null;
  /** Where the account workspace is served, e.g. http://127.0.0.1:8080/workspace/ */
  workspaceUrl: string;
  syncCatalog(): Promise<void>;
  /** Graceful: /ready turns false, nothing new starts, generations run up to the deadline. */
  stop(deadlineMs?: number): Promise<void>;
}

export const DEFAULT_ACCOUNT = "local";

async function ensureLocalAccount(store: Store): Promise<string | null> {
  if (await store.accounts.get(DEFAULT_ACCOUNT)) return null;
  let account;
  try {
    account = await store.accounts.create(DEFAULT_ACCOUNT);
  } catch (e) {
    // Another node sharing the database made it first: it printed the key.
    if (await store.accounts.get(DEFAULT_ACCOUNT)) return null;
    throw e;
  }
  await store.billing.setPlan(account.id, "unlimited");
  return (await store.keys.create(account.id, "created at first start")).key;
}

export async function startServer(opts: ServeOptions): Promise<RunningServer> {
  const { log, engine } = opts;
  if (opts.database && !opts.cluster?.secret) throw new Error("a shared database needs a cluster secret (--cluster-secret) to authenticate the hop between nodes");
  const store = await openStore({ database: opts.database, dataDir: opts.dataDir }, {
    watch: true,
    onSignalError: (e) => log.warn("database unreachable: caches are bypassed until it answers", { error: (e as Error).message }),
  });
  // Names this process in the requests it runs (and, with a shared database, in the node list).
  const nodeId = `node_${randomBase62(12)}`;
  const firstKey = await ensureLocalAccount(store);
  if (store.kind === "sqlite") {
    // One server per file: whatever is still in flight was left by a process that died.
    const interrupted = await store.inflight.sweep([nodeId]);
    if (interrupted > 0) log.warn("requests left in flight by an earlier process recorded as interrupted", { count: interrupted });
  }
  let ready = false;
  let cluster: Cluster | null = null;

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
    const change = await store.catalog.sync(entries);
    log.info("catalog synchronised", {
      served: (await store.catalog.listServed()).map((m) => m.id),
      added: change.added,
      missing: change.missing,
    });
    // The other nodes learn of a change of this node's models at once, not at the next heartbeat.
    await cluster?.membership.beat();
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
      const m = await store.catalog.get(id);
      return m ? m.loadError : "the catalog scan did not find it";
    },
  });
  const lifecycle = new Lifecycle();
  let listeningUrl = "";
  if (store.kind === "postgres") {
    cluster = createCluster({
      store,
      engine,
      log: log.child({ room: "cluster" }),
      nodeId,
      // Read when the first heartbeat is sent, after listen: by default the address bound.
      get nodeUrl() {
        return opts.cluster?.nodeUrl ?? listeningUrl;
      },
      secret: opts.cluster!.secret,
      version: VERSION,
      heartbeatMs: opts.cluster?.heartbeatMs ?? 1000,
      timeoutMs: opts.cluster?.timeoutMs ?? 5000,
    });
  }
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
    nodeId,
    forwarding: cluster?.forwarding,
    // Several nodes count rate limits in the database, so a limit holds across them.
    guard: cluster ? new RateGuard(store, storeCounter(store.rates, nodeId, (e) => log.warn("rate-limit settlement failed", { error: (e as Error).message }))) : undefined,
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
  const url = `http://${opts.host.includes(":") ? `[${opts.host}]` : opts.host}:${server.port}`;
  // Other nodes cannot dial a wildcard address: they are given this machine's name instead.
  listeningUrl = /^(0\.0\.0\.0|::|\[::\])$/.test(opts.host) ? `http://${hostname()}:${server.port}` : url;
  if (cluster) {
    // Registered before it reports ready: its models are listed on every node from now on.
    await cluster.start();
    log.info("joined the cluster", { node: nodeId, node_url: opts.cluster?.nodeUrl ?? listeningUrl, nodes: cluster.membership.nodes().length });
  }
  ready = true;
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
    nodeId,
    cluster,
    workspaceUrl,
    syncCatalog,
    async stop(deadlineMs = 10_000) {
      ready = false;
      process.off("SIGHUP", onHup);
      // Out of the node list first: the other nodes stop forwarding here.
      await cluster?.stop();
      unwatch();
      const { aborted } = await lifecycle.drain(deadlineMs);
      if (aborted > 0) log.warn("shutdown deadline reached: ended generations still running", { aborted });
      // What still runs now is stuck in a worker that does not answer. Closing the engine ends it
      // with an error its handler answers (a 503, or a final SSE event), before connections close.
      if (lifecycle.active > 0) log.warn("shutdown: requests still waiting for their model's worker", { waiting: lifecycle.active });
      await engine.close();
      await lifecycle.settle(2000);
      await api.stop(true);
      await wsServer?.stop(true);
      await store.close();
    },
  };
}
