// The composition root: store + engine + api, with catalog synchronisation at start and on SIGHUP.
import { hostname } from "node:os";
import { resolve } from "node:path";
import { createApi, DEFAULT_MAX_BODY_BYTES } from "./api/app.ts";
import { ADMIN_BASE, createAdminApi } from "./api/admin/handler.ts";
import { ApiError } from "./api/errors.ts";
import { RateGuard, storeCounter } from "./api/limits/guard.ts";
import { createCluster, type Cluster } from "./cluster/index.ts";
import { startControlListener } from "./api/control.ts";
import { Lifecycle } from "./api/lifecycle.ts";
import { removeControlFile, writeControlFile } from "./control-file.ts";
import { lockDataDir, type DataLock } from "./data-lock.ts";
import { assertPortFree, listenOrExplain } from "./port-owner.ts";
import type { RequestLimits } from "./api/limits/request-limits.ts";
import { declaredModel, discoverModelDirs, type DiscoveredModelDir } from "./engine/discovery.ts";
import { parseKeepAlive } from "./engine/residency/settings.ts";
import { watchModelsDir } from "./engine/models-watch.ts";
import type { Engine, EngineModel, ModelEvent } from "./engine/types.ts";
import { commandLine } from "./invocation.ts";
import type { Logger } from "./log.ts";
import { hubEndpoint, hubToken, type HubToken } from "./modelkit/hub/auth.ts";
import { PullJobs } from "./modelkit/hub/jobs.ts";
import { createOidcClient, createWorkspace, OIDC_CALLBACK_PATH, WORKSPACE_PATH, type OidcSettings, type WorkspaceOptions } from "./workspace/index.ts";
import type { TracingSettings } from "./api/tracing/settings.ts";
import { Tracing } from "./api/tracing/tracer.ts";
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
  /** The admin API: on under /admin/v1/ of the API's port unless turned off, or on a port of its own. */
  admin?: { enabled: boolean; port?: number; host?: string; requestsPerMinute?: number };
  /**
   * Watch the models directory and synchronise the catalog when models appear, change or go
   * (debounced); otherwise only at start and on SIGHUP.
   */
  watchModels?: boolean;
  /** The Hub the admin page pulls from (default: HF_ENDPOINT / HF_TOKEN of the environment, CPU). */
  hub?: { endpoint?: string; token?: () => HubToken | null; device?: "cuda" | "cpu" };
  /** OpenTelemetry traces of chat requests (see api/tracing/settings.ts); absent or null: off. */
  tracing?: TracingSettings | null;
  /**
   * Workspace sign-in through an OpenID provider. redirectUri defaults to the workspace's public
   * address + /workspace/oidc/callback (see oidcRedirectUri on the running server).
   */
  oidc?: Omit<OidcSettings, "redirectUri"> & { redirectUri?: string };
  /** false: the workspace's password form is off (SSO only). */
  passwordSignIn?: boolean;
  /** Told of users created and roles changed by SSO (for the audit log). */
  ssoAudit?: WorkspaceOptions["ssoAudit"];
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
  /** Tracing, when configured (its span counts; flush). */
  tracing: Tracing | null;
  /** Where the account workspace is served, e.g. http://127.0.0.1:8080/workspace/ */
  workspaceUrl: string;
  /** Where the admin API is served, e.g. http://127.0.0.1:8080/admin/v1; null when it is off. */
  adminUrl: string | null;
  /** With SSO: the redirect URI to register at the OpenID provider. */
  oidcRedirectUri: string | null;
  syncCatalog(): Promise<void>;
  /** Graceful: /ready turns false, nothing new starts, generations run up to the deadline. */
  stop(deadlineMs?: number): Promise<void>;
}

export const DEFAULT_ACCOUNT = "local";

/** serve --oidc-account names an account the store does not have: it must be created first. */
export class MissingSsoAccountError extends Error {
  constructor(readonly account: string) {
    super(`the account for users created by single sign-on (--oidc-account ${account}) does not exist`);
  }
}

function catalogEntry(m: DiscoveredModelDir, model: EngineModel, loadError: string | null): DiscoveredModel {
  return {
    id: m.id,
    displayName: model.displayName,
    contextLength: model.contextLength,
    sourceDir: m.dir,
    supportsImages: model.supportsImages,
    supportsTools: model.supportsTools,
    supportsStructured: model.supportsStructuredOutput,
    toolFormat: model.toolFormat,
    ownedBy: m.card.owned_by ?? (m.id.includes("/") ? m.id.split("/")[0]! : "sluice"),
    loadError,
    samplingDefaults: model.samplingDefaults,
  };
}

/**
 * Each model's keep-alive: the catalog's (the admin page, `models keep-alive`) over its
 * sluice.json's over the engine's default (serve --keep-alive). The catalog's are read again when
 * the store's change counter moves, in the background: the engine asks synchronously.
 */
function keepAliveSettings(store: Store, log: Logger) {
  let overrides = new Map<string, number | null>();
  let seen = -1;
  let reading: Promise<void> | null = null;
  const refresh = (): Promise<void> => {
    const generation = store.cacheGeneration();
    reading ??= store.catalog
      .list()
      .then((models) => {
        overrides = new Map(models.map((m) => [m.id, m.keepAliveSeconds]));
        seen = generation;
      })
      .catch((e) => log.warn("could not read the models' keep-alive", { error: (e as Error).message }))
      .finally(() => (reading = null));
    return reading;
  };
  return {
    refresh,
    /** The function the engine asks for `id`'s keep-alive (ms, -1 always; null: the engine's default). */
    of(id: string, card: number | string | undefined): () => number | null {
      let fromCard: number | null = null;
      if (card !== undefined) {
        try {
          fromCard = parseKeepAlive(card);
        } catch (e) {
          log.warn("sluice.json's keep_alive is not understood; the default applies", { model: id, error: (e as Error).message });
        }
      }
      return () => {
        if (store.cacheGeneration() !== seen) void refresh();
        const s = overrides.get(id);
        return s === null || s === undefined ? fromCard : s === -1 ? -1 : s * 1000;
      };
    },
  };
}

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

/**
 * One server per port and per data directory: refused (an Error naming the port or directory and
 * who holds it) before anything is opened or written. Returns the data directory's lock, which the
 * server holds until it stops. `serve` claims first of all, before its engine starts.
 */
export function claimServe(opts: Pick<ServeOptions, "host" | "port" | "dataDir" | "workspaceHost" | "workspacePort">): DataLock {
  assertPortFree(opts.host, opts.port);
  if (opts.workspacePort !== undefined) assertPortFree(opts.workspaceHost ?? opts.host, opts.workspacePort, "--workspace-port");
  return lockDataDir(opts.dataDir);
}

export async function startServer(opts: ServeOptions & { dataLock?: DataLock }): Promise<RunningServer> {
  if (opts.database && !opts.cluster?.secret) throw new Error("a shared database needs a cluster secret (--cluster-secret) to authenticate the hop between nodes");
  const dataLock = opts.dataLock ?? claimServe(opts);
  try {
    return await start(opts, dataLock);
  } catch (e) {
    dataLock.release();
    throw e;
  }
}

async function start(opts: ServeOptions, dataLock: DataLock): Promise<RunningServer> {
  const { log, engine } = opts;
  const store = await openStore({ database: opts.database, dataDir: opts.dataDir }, {
    watch: true,
    onSignalError: (e) => log.warn("database unreachable: caches are bypassed until it answers", { error: (e as Error).message }),
  });
  // Names this process in the requests it runs (and, with a shared database, in the node list).
  const nodeId = `node_${randomBase62(12)}`;
  const firstKey = await ensureLocalAccount(store);
  if (opts.oidc?.account && !(await store.accounts.get(opts.oidc.account))) {
    await store.close();
    throw new MissingSsoAccountError(opts.oidc.account);
  }
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

  // What the last synchronisation wrote, so that a model loading on demand can correct its entry.
  let entries: DiscoveredModel[] = [];
  const keepAlive = keepAliveSettings(store, log);

  const syncOnce = async () => {
    const found = await scan();
    const loadable = found.filter((m) => m.problem === null);
    await keepAlive.refresh();
    const results = await engine.load(
      loadable.map((m) => ({ id: m.id, dir: m.dir, stamp: m.stamp, declared: declaredModel(m), keepAliveMs: keepAlive.of(m.id, m.card.keep_alive) })),
    );
    const byId = new Map(results.map((r) => [r.id, r]));
    entries = found.map((m) => {
      const loaded = byId.get(m.id);
      // Models load on their first request: only a directory's problem or a failed preload leaves one out.
      const loadError = m.problem ?? loaded?.error ?? (loaded ? null : "not loaded");
      if (loadError) log.warn("model left out of the catalog", { model: m.id, dir: m.dir, reason: loadError });
      return catalogEntry(m, loaded?.model ?? declaredModel(m), loadError);
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

  /** A model loaded on demand describes itself (or failed to load): its catalog entry follows. */
  const onModelEvent = async (e: ModelEvent) => {
    const id = e.type === "loaded" ? e.model.id : e.id;
    const i = entries.findIndex((x) => x.id === id);
    if (i < 0) return;
    const before = entries[i]!;
    const after: DiscoveredModel =
      e.type === "loaded"
        ? {
            ...before,
            displayName: e.model.displayName,
            contextLength: e.model.contextLength,
            supportsImages: e.model.supportsImages,
            supportsTools: e.model.supportsTools,
            supportsStructured: e.model.supportsStructuredOutput,
            samplingDefaults: e.model.samplingDefaults,
            toolFormat: e.model.toolFormat,
          }
        : { ...before, loadError: `failed to load: ${e.error}` };
    if (JSON.stringify(after) === JSON.stringify(before)) return;
    if (e.type === "load-failed") log.warn("model left out of the catalog until the next synchronisation", { model: id, reason: e.error });
    entries = entries.map((x, j) => (j === i ? after : x));
    await store.catalog.sync(entries);
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
  engine.onModelEvent?.((e) => {
    // In the synchronisations' queue, so that a rescan and a correction never interleave.
    const run = queue.then(() => onModelEvent(e));
    queue = run.catch((err) => log.error("updating the catalog after a model load failed", { error: (err as Error).message }));
  });
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
  const tracing = opts.tracing ? new Tracing(opts.tracing, { version: VERSION, nodeId }, log) : null;
  if (tracing) log.info("tracing chat requests", { endpoint: opts.tracing!.url, service: opts.tracing!.serviceName, sampler: opts.tracing!.samplerName, content: opts.tracing!.traceContent });
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
    tracing: tracing ?? undefined,
    // Several nodes count rate limits in the database, so a limit holds across them.
    guard: cluster ? new RateGuard(store, storeCounter(store.rates, nodeId, (e) => log.warn("rate-limit settlement failed", { error: (e as Error).message }))) : undefined,
    // Under this address's /workspace/, or on its own port once that listens.
    workspaceUrl: (request) => (opts.workspacePort !== undefined ? workspaceUrl : `${opts.publicUrl?.replace(/\/+$/, "") ?? new URL(request.url).origin}/workspace/`),
  });
  const ownPort = opts.workspacePort !== undefined;
  let apiUrl = () => "";
  let workspaceUrl = "";
  // Where the provider sends the browser back: the workspace as the public reaches it. Known once
  // the ports listen (port 0), which is before any sign-in can begin.
  const oidcRedirectUri = () =>
    opts.oidc?.redirectUri ?? `${!ownPort && opts.publicUrl ? `${opts.publicUrl.replace(/\/+$/, "")}${WORKSPACE_PATH}/` : workspaceUrl}${OIDC_CALLBACK_PATH.slice(1)}`;
  const oidc = opts.oidc ? createOidcClient({ ...opts.oidc, redirectUri: oidcRedirectUri }, store, log.child({ room: "workspace" })) : undefined;
  const workspace = createWorkspace({
    oidc,
    passwordSignIn: opts.passwordSignIn,
    ssoAudit: opts.ssoAudit,
    store,
    log: log.child({ room: "workspace" }),
    // The same base URL /v1/integrations announces: the public URL, else the API's own address.
    apiBase: (req) => opts.publicUrl?.replace(/\/+$/, "") ?? (ownPort ? apiUrl() : new URL(req.url).origin),
    hubPulls,
    residency:
      engine.residency && engine.loadModel && engine.unloadModel
        ? { summary: () => engine.residency!(), load: (id) => engine.loadModel!(id), unload: (id) => engine.unloadModel!(id) }
        : undefined,
    bodyTimeoutMs: opts.limits?.bodyTimeoutMs,
    // The pages' CLI notes act on this server's database, wherever the operator keeps it.
    command: (...words) => commandLine(...words, ...(resolve(opts.dataDir) === resolve("data") ? [] : ["--data", opts.dataDir])),
  });
  // The workspace's icon at the API's root too, where a browser looking at the API asks for it.
  api.get("/favicon.ico", ({ request }) => workspace.fetch(request));
  const adminOn = opts.admin?.enabled !== false;
  const adminOwnPort = adminOn && opts.admin?.port !== undefined;
  const residencyControl =
    engine.loadModel && engine.unloadModel
      ? {
          load: (id: string) => engine.loadModel!(id),
          unload: (id: string) => engine.unloadModel!(id),
        }
      : undefined;
  const admin = adminOn ? createAdminApi({ store, log: log.child({ room: "admin" }), residency: residencyControl, requestsPerMinute: opts.admin?.requestsPerMinute }) : null;
  if (!adminOwnPort) {
    // Off, or served elsewhere: this port says so rather than a bare "invalid URL".
    const answer = admin
      ? ({ request, server }: { request: Request; server: Bun.Server<unknown> | null }) => admin.fetch(request, server?.requestIP(request)?.address)
      : () => new ApiError(404, "The admin API is turned off on this server (serve --no-admin-api).", "invalid_request_error", null, "admin_api_off").toResponse();
    api.all(ADMIN_BASE, answer, { parse: "none" });
    api.all(`${ADMIN_BASE}/*`, answer, { parse: "none" });
  } else {
    const elsewhere = () => new ApiError(404, `The admin API is served on its own port (serve --admin-port), not here.`, "invalid_request_error", null, "admin_api_elsewhere").toResponse();
    api.all(ADMIN_BASE, elsewhere, { parse: "none" });
    api.all(`${ADMIN_BASE}/*`, elsewhere, { parse: "none" });
  }
  if (!ownPort) {
    api.all("/workspace", ({ request, server }) => workspace.fetch(request, server?.requestIP(request)?.address), { parse: "none" });
    api.all("/workspace/*", ({ request, server }) => workspace.fetch(request, server?.requestIP(request)?.address), { parse: "none" });
  }
  listenOrExplain(opts.host, opts.port, () =>
    api.listen({
      hostname: opts.host,
      port: opts.port,
      // Elysia's Bun adapter asks for SO_REUSEPORT: a second server on the port would then share
      // its connections silently instead of failing.
      reusePort: false,
      // A hard cap above the API's own limit, so oversized bodies are refused before buffering.
      maxRequestBodySize: (opts.limits?.maxBodyBytes ?? opts.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES) + 1024 * 1024,
      idleTimeout: 255,
    }),
  );
  const server = api.server!;
  const url = `http://${opts.host.includes(":") ? `[${opts.host}]` : opts.host}:${server.port}`;
  // Other nodes cannot dial a wildcard address: they are given this machine's name instead.
  listeningUrl = /^(0\.0\.0\.0|::|\[::\])$/.test(opts.host) ? `http://${hostname()}:${server.port}` : url;
  if (cluster) {
    // Registered before it reports ready: its models are listed on every node from now on.
    await cluster.start();
    log.info("joined the cluster", { node: nodeId, node_url: opts.cluster?.nodeUrl ?? listeningUrl, nodes: cluster.membership.nodes().length });
  }
  // The operator's commands (models load, unload, resident) reach this process here.
  const controlToken = randomBase62(40);
  const control = startControlListener({ engine, token: controlToken, log: log.child({ room: "control" }) });
  try {
    writeControlFile(opts.dataDir, { url: control.url, token: controlToken, pid: process.pid });
  } catch (e) {
    log.warn("could not write control.json: models load/unload cannot reach this server", { error: (e as Error).message });
  }
  dataLock.note(url);
  ready = true;
  log.info("listening", { url, version: VERSION });
  apiUrl = () => url;
  const wsServer = ownPort
    ? listenOrExplain(
        opts.workspaceHost ?? opts.host,
        opts.workspacePort!,
        () =>
          Bun.serve({
            hostname: opts.workspaceHost ?? opts.host,
            port: opts.workspacePort,
            reusePort: false,
            fetch: (req, srv) => workspace.fetch(req, srv.requestIP(req)?.address),
          }),
        "--workspace-port",
      )
    : null;
  workspaceUrl = wsServer
    ? `http://${(opts.workspaceHost ?? opts.host).includes(":") ? `[${opts.workspaceHost ?? opts.host}]` : (opts.workspaceHost ?? opts.host)}:${wsServer.port}/workspace/`
    : `${url}/workspace/`;
  log.info("account workspace", { url: workspaceUrl });
  const adminHost = opts.admin?.host ?? opts.host;
  const adminServer = adminOwnPort
    ? Bun.serve({
        hostname: adminHost,
        port: opts.admin!.port,
        fetch: (req, srv) =>
          new URL(req.url).pathname.startsWith(ADMIN_BASE)
            ? admin!.fetch(req, srv.requestIP(req)?.address)
            : new ApiError(404, `This port serves the admin API only, under ${ADMIN_BASE}/.`, "invalid_request_error", null, "unknown_url").toResponse(),
      })
    : null;
  const adminUrl = !adminOn ? null : adminServer ? `http://${adminHost.includes(":") ? `[${adminHost}]` : adminHost}:${adminServer.port}${ADMIN_BASE}` : `${url}${ADMIN_BASE}`;
  if (adminUrl) log.info("admin API", { url: adminUrl });
  if (oidc) {
    log.info("single sign-on", { issuer: oidc.settings.issuer, redirect_uri: oidcRedirectUri(), password_sign_in: opts.passwordSignIn !== false });
    // In the background: a provider that is down does not hold the API up; a failure is logged
    // with its reason (a wrong issuer, say) and the first sign-in tries again.
    void oidc.discover();
  }

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
    tracing,
    workspaceUrl,
    adminUrl,
    oidcRedirectUri: oidc ? oidcRedirectUri() : null,
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
      // A handler is done once it has thrown its answer (a 503 as the engine closed); the answer is
      // written a few ticks later. Connections close once those are written (or after a bound).
      await Promise.race([api.server?.stop(false), Bun.sleep(1000)]);
      // Elysia prints a stack trace when asked to stop a server that is gone (stopped twice).
      if (api.server) await api.stop(true);
      await wsServer?.stop(true);
      await adminServer?.stop(true);
      removeControlFile(opts.dataDir, controlToken);
      await control.stop();
      await store.close();
      // What the last requests left in the batch goes out, unless the collector keeps it waiting.
      await tracing?.shutdown();
      dataLock.release();
    },
  };
}
