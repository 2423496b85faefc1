// The engine as the HTTP thread sees it: one worker per loaded model, requests and events passed as
// messages, so a model computing never blocks /health or /v1/models. Which models are loaded is
// residency's (residency/residency.ts): a model loads on its first request and is unloaded when
// idle, under one memory budget. Each worker is supervised:
// a worker that dies (an uncaught error, running out of memory, being killed) fails its requests
// with a 503-class error and is started again; one that keeps dying is marked unavailable for a
// while (with a growing pause) instead of being restarted in a tight loop; one that stops
// answering while requests wait for it is treated as dead. No request waits without a bound.
// However a worker ends (unloaded, replaced, crashed, hung), its thread is terminated only once no
// native call is in flight in it (see native-calls.ts).
import type { Logger } from "../log.ts";
import { DEFAULT_COMPILE_LIMITS, type CompileLimits } from "../structured/index.ts";
import type { Device } from "./providers.ts";
import { structureKey } from "./structure-key.ts";
import { DEFAULT_GRAMMAR_CACHE_BYTES, DEFAULT_SUPERVISION, type SupervisionOptions } from "./supervision-defaults.ts";
import {
  EngineBusyError,
  EngineRequestError,
  EngineUnavailableError,
  type Engine,
  type EngineModel,
  type GenerateRequest,
  type Generation,
  type EngineStats,
  type ModelEvent,
  type ModelLoadResult,
  type ModelResidency,
  type ModelSource,
  type ResidencySummary,
  type SpeculateMode,
  type WorkerHealth,
} from "./types.ts";
import { deviceMemory, memoryBudgetBytes } from "./residency/device-memory.ts";
import { estimateFootprint, kvGrant, KV_SEQUENCES } from "./residency/footprint.ts";
import { Residency, type ModelPlan } from "./residency/residency.ts";
import { DEFAULT_KEEP_ALIVE_MS } from "./residency/settings.ts";
import type { QueueOrder } from "./worker/fair-queue.ts";
import { epochMs } from "./worker/request-clock.ts";
import type { OrtBinding } from "./ort-binding.ts";
import { WorkerThread, type ThreadSettings } from "./worker-thread.ts";

export { DEFAULT_GRAMMAR_CACHE_BYTES, DEFAULT_SUPERVISION, type SupervisionOptions };

export interface EngineOptions {
  log: Logger;
  device: Device;
  threads: number;
  /** How ONNX Runtime is called (see decoders.ts); absent: the default. */
  binding?: OrtBinding;
  /** Load every model batch-invariant (see WorkerOptions.batchInvariant). */
  batchInvariant?: boolean;
  /**
   * KV memory per model (running sequences + prefix cache). Absent: SLUICE_KV_BUDGET_MB from the
   * environment, else a quarter of the machine's memory up to 8 GiB.
   */
  kvBudgetBytes?: number;
  /** Requests per model that may wait for KV memory (absent: SLUICE_MAX_QUEUE, else 64). */
  maxQueue?: number;
  /** Speculative decoding (absent: "ngram"). */
  speculate?: SpeculateMode;
  /** How long a stream's tokens may wait to go out together, ms (absent: the default). */
  streamIntervalMs?: number;
  /** Warm-up per model at load, ms (absent: SLUICE_WARMUP_MS, else none). */
  warmupMs?: number;
  /** Worker entry; overridable so the compiled binary can point at its embedded copy. */
  workerUrl?: string | URL;
  /** What compiling one request's schemas may cost (absent: DEFAULT_COMPILE_LIMITS). */
  compileLimits?: Partial<CompileLimits>;
  /** Memory for each model's cached grammars, bytes (absent: 16 MiB). */
  grammarCacheBytes?: number;
  supervision?: Partial<SupervisionOptions>;
  /** Called whenever a worker's supervision state changes (e.g. to write it where `doctor` reads it). */
  onHealthChange?: (health: WorkerHealth[]) => void;
  /** Lets tests make a worker stop answering (the "block" message). */
  testHooks?: boolean;
  /** Memory for the weights and KV budgets of every loaded model (absent: 3/4 of RAM). */
  memoryBudgetBytes?: number;
  /** How long an idle model stays loaded unless it says otherwise, ms (-1: always; absent: 5 minutes). */
  keepAliveMs?: number;
  /** Models loaded when they are registered (absent: none; they load on their first request). */
  preload?: string[] | "all";
  /** How long a request waits for memory to load its model (absent: 60 s). */
  loadWaitMs?: number;
  /** Share of a model's queue one fairness key may have waiting (absent: the scheduler's 3/4). */
  accountQueueShare?: number;
  /** Admission order of a busy model (absent: fair). */
  scheduling?: QueueOrder;
}

/** How long a replaced model may take to finish its running requests before it is closed. */
const RETIRE_DEADLINE_MS = 60_000;

/** Whatever was still running has no worker to finish it: end it in words, never leave it hanging. */
const unloaded = (id: string) => new EngineBusyError(`model ${id} was unloaded while the request ran (its directory changed or was removed)`, 1);
const evicted = (id: string) => new EngineUnavailableError(`The model ${id} was unloaded while the request ran. Retry.`, 1);

/** A positive number from the environment, or 0 (the worker's default). */
function envNumber(name: string): number {
  const v = Number(process.env[name]);
  return Number.isFinite(v) && v > 0 ? v : 0;
}


const oneLine = (s: string) => (s.split("\n")[0] ?? s).slice(0, 300);

/** One served model: its current worker thread and how its earlier ones ended. */
class ModelSlot {
  thread: WorkerThread | null = null;
  model: EngineModel | null = null;
  state: WorkerHealth["state"] = "loading";
  private recentCrashes: number[] = [];
  private crashes = 0;
  private restarts = 0;
  private lastError: string | null = null;
  private lastCrashAt: number | null = null;
  private retryAt: number | null = null;
  private pause: number;
  private readySince = 0;
  private retryTimer: ReturnType<typeof setTimeout> | null = null;
  private closed = false;
  /** Replaced by a newer load of the model: finishing its requests, never restarted. */
  private retiring = false;

  constructor(
    readonly source: ModelSource,
    private readonly settings: ThreadSettings,
    private readonly supervision: SupervisionOptions,
    private readonly log: Logger,
    private readonly changed: () => void,
  ) {
    this.pause = supervision.unavailableMs;
  }

  /** The first start; the catalog leaves the model out when it fails. */
  async load(): Promise<string | null> {
    const { thread, model, error } = await WorkerThread.spawn(this.source, this.settings, this.log, (t, r) => this.onExit(t, r));
    if (!thread) return error;
    this.kvBytes = thread.kvBytes;
    this.adopt(thread, model!);
    return null;
  }

  private adopt(thread: WorkerThread, model: EngineModel) {
    this.thread = thread;
    this.model = model;
    this.state = "ready";
    this.retryAt = null;
    this.readySince = Date.now();
    this.changed();
  }

  /** The KV budget its worker took. */
  kvBytes = 0;

  /** `ended`: called once when the request leaves the worker; not when this refuses it. */
  start(request: GenerateRequest, key: string | null, ended: () => void): Promise<Generation> {
    if (this.thread && this.state === "ready") return this.thread.start(request, key, ended);
    const id = this.source.id;
    if (this.state === "unavailable") {
      const wait = Math.max(1, Math.ceil(((this.retryAt ?? Date.now()) - Date.now()) / 1000));
      return Promise.reject(
        new EngineUnavailableError(
          `The model ${id} is unavailable: its worker crashed ${this.recentCrashes.length} times within ${Math.round(this.supervision.crashLoopWindowMs / 1000)} s (last: ${oneLine(this.lastError ?? "unknown")}). It is started again in ${wait} s.`,
          wait,
        ),
      );
    }
    return Promise.reject(new EngineUnavailableError(`The model ${id} is restarting after its worker crashed. Retry in a few seconds.`, 2));
  }

  /** The thread ended without being asked to (crash, or declared hung): fail its requests, restart. */
  onExit(thread: WorkerThread, reason: string): void {
    if (thread !== this.thread || this.closed) return;
    this.thread = null;
    if (this.retiring) {
      // Replaced by a new load already: its requests fail, nothing is restarted.
      thread.failAll(new EngineUnavailableError(`The model ${this.source.id}'s worker failed while handling this request (${oneLine(reason)}). Retry in a few seconds.`, 2));
      return;
    }
    thread.failAll(new EngineUnavailableError(`The model ${this.source.id}'s worker failed while handling this request (${oneLine(reason)}); it is being restarted. Retry in a few seconds.`, 2));
    this.crashed(reason);
  }

  private crashed(reason: string) {
    const now = Date.now();
    this.crashes++;
    this.lastError = reason;
    this.lastCrashAt = now;
    // A worker that stayed up a whole window since its last start has earned a fresh pause.
    if (this.readySince > 0 && now - this.readySince > this.supervision.crashLoopWindowMs) this.pause = this.supervision.unavailableMs;
    this.recentCrashes = [...this.recentCrashes.filter((t) => now - t < this.supervision.crashLoopWindowMs), now];
    this.log.error("model worker crashed", { model: this.source.id, error: oneLine(reason), crashes_in_window: this.recentCrashes.length });
    if (this.recentCrashes.length >= this.supervision.crashLoopCrashes) {
      this.state = "unavailable";
      this.retryAt = now + this.pause;
      this.log.error("model worker crash loop: the model is unavailable until its next start", {
        model: this.source.id,
        crashes: this.recentCrashes.length,
        window_s: this.supervision.crashLoopWindowMs / 1000,
        retry_in_s: this.pause / 1000,
        error: oneLine(reason),
      });
      this.retryTimer = setTimeout(() => void this.respawn(), this.pause);
      this.retryTimer.unref?.();
      this.pause = Math.min(this.pause * 2, this.supervision.maxUnavailableMs);
      this.changed();
    } else void this.respawn();
  }

  private async respawn() {
    if (this.closed || this.retiring) return;
    this.retryTimer = null;
    this.state = "restarting";
    this.restarts++;
    this.changed();
    const started = performance.now();
    const { thread, model, error } = await WorkerThread.spawn(this.source, this.settings, this.log, (t, r) => this.onExit(t, r));
    if (this.closed) {
      thread?.terminate();
      return;
    }
    if (thread) {
      this.log.info("model worker restarted", { model: this.source.id, ms: Math.round(performance.now() - started) });
      this.adopt(thread, model!);
    } else this.crashed(`the restart failed: ${error}`);
  }

  /** Test hook: the current thread stops answering for `ms`. */
  block(ms: number): void {
    this.thread?.block(ms);
  }

  /** Ends the thread abruptly; supervision sees it as a crash (tests and drills). */
  kill(): void {
    this.thread?.kill();
  }

  heardNow(now: number): void {
    this.thread?.heardNow(now);
  }

  checkAlive(now: number): void {
    const t = this.thread;
    if (!t || this.state !== "ready") return;
    if (!t.checkAlive(now, this.supervision.stallMs)) return;
    const reason = `the worker stopped responding for ${Math.round(this.supervision.stallMs / 1000)} s`;
    this.onExit(t, reason);
    t.terminate();
  }

  health(): WorkerHealth {
    return {
      model: this.source.id,
      state: this.state,
      crashes: this.crashes,
      restarts: this.restarts,
      lastError: this.lastError === null ? null : oneLine(this.lastError),
      lastCrashAt: this.lastCrashAt,
      retryAt: this.state === "unavailable" ? this.retryAt : null,
    };
  }

  /** Ends the worker; requests it still holds end with `error`. */
  async close(error: Error): Promise<void> {
    this.closed = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    const t = this.thread;
    this.thread = null;
    await t?.close(error);
  }

  /**
   * Closes once the requests it is running have ended (at most `deadlineMs`): a model replaced
   * by a new load finishes what it started while the new one takes the new requests.
   */
  async retire(deadlineMs = RETIRE_DEADLINE_MS): Promise<void> {
    this.retiring = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    const until = Date.now() + deadlineMs;
    while ((this.thread?.pendingCount ?? 0) > 0 && Date.now() < until) await Bun.sleep(50);
    await this.close(unloaded(this.source.id));
  }
}

export class WorkerEngine implements Engine {
  /** Every model served, loaded or not. */
  private readonly sources = new Map<string, ModelSource>();
  /** The loaded ones, each supervising its worker thread. */
  private readonly slots = new Map<string, ModelSlot>();
  private readonly settings: ThreadSettings;
  private readonly supervision: SupervisionOptions;
  private readonly compileLimits: CompileLimits;
  private readonly watchdog: ReturnType<typeof setInterval>;
  private readonly memory: Residency;
  private readonly listeners: ((e: ModelEvent) => void)[] = [];
  /** serve --kv-budget-mb (or SLUICE_KV_BUDGET_MB); 0: automatic. */
  private readonly explicitKvBytes: number;
  private readonly opts: EngineOptions;

  constructor(options: EngineOptions) {
    // The environment is read now, not when a model loads (maybe much later, on its first request).
    const opts = (this.opts = { ...options, maxQueue: options.maxQueue || envNumber("SLUICE_MAX_QUEUE") });
    this.explicitKvBytes = opts.kvBudgetBytes || envNumber("SLUICE_KV_BUDGET_MB") * 2 ** 20;
    this.supervision = { ...DEFAULT_SUPERVISION, ...opts.supervision };
    this.compileLimits = { ...DEFAULT_COMPILE_LIMITS, ...opts.compileLimits };
    const packaged = opts.workerUrl !== undefined;
    this.settings = {
      workerUrl: opts.workerUrl ?? new URL("./worker/model-worker.ts", import.meta.url),
      admissionMs: this.supervision.admissionMs,
      options: {
        device: opts.device,
        threads: opts.threads,
        binding: opts.binding,
        batchInvariant: opts.batchInvariant,
        // Each model's, when it loads (see loadWorker).
        kvBudgetBytes: 0,
        maxQueue: opts.maxQueue ?? 0,
        keyQueueShare: opts.accountQueueShare,
        queueOrder: opts.scheduling,
        speculate: opts.speculate,
        streamIntervalMs: opts.streamIntervalMs,
        warmupMs: opts.warmupMs ?? envNumber("SLUICE_WARMUP_MS"),
        compileLimits: this.compileLimits,
        // One count for the process: the models' compile threads share the cores' time limit.
        compiling: new SharedArrayBuffer(4),
        grammarCacheBytes: opts.grammarCacheBytes ?? DEFAULT_GRAMMAR_CACHE_BYTES,
        // The binary starts every thread from its one embedded entry, told apart by an argument.
        compileWorker: packaged
          ? { url: String(opts.workerUrl), argv: ["--sluice-compile-thread"] }
          : { url: new URL("./worker/compile-worker.ts", import.meta.url).href, argv: [] },
        testHooks: opts.testHooks,
      },
    };
    this.memory = new Residency({
      budgetBytes: opts.memoryBudgetBytes ?? memoryBudgetBytes(deviceMemory(false), null),
      loader: { load: (id, kv, warm) => this.loadWorker(id, kv, warm), unload: (id) => this.unloadWorker(id) },
      keepAliveMs: (id) => this.sources.get(id)?.keepAliveMs?.() ?? opts.keepAliveMs ?? DEFAULT_KEEP_ALIVE_MS,
      waitMs: opts.loadWaitMs ?? 60_000,
      log: opts.log,
      onLoadFailed: (id, error) => this.emit({ type: "load-failed", id, error }),
    });
    const tick = Math.max(50, Math.min(1000, this.supervision.stallMs / 4));
    let lastTick = performance.now();
    this.watchdog = setInterval(() => {
      const now = performance.now();
      // A tick far later than due: this whole process did not run (SIGSTOP, a suspended VM or
      // machine), its workers no more than the watchdog, and their messages are still queued.
      // Their silence meanwhile says nothing; without this a resumed server restarted every
      // model that had a request waiting.
      const suspended = now - lastTick > 2 * tick + 1000;
      lastTick = now;
      for (const s of this.slots.values()) {
        if (suspended) s.heardNow(now);
        else s.checkAlive(now);
      }
    }, tick);
    this.watchdog.unref?.();
  }

  private changed = () => {
    try {
      this.opts.onHealthChange?.(this.health());
    } catch (e) {
      this.opts.log.warn("could not publish the model workers' health", { error: (e as Error).message });
    }
  };

  private emit(e: ModelEvent) {
    for (const l of this.listeners) {
      try {
        l(e);
      } catch (err) {
        this.opts.log.warn("a model event listener failed", { error: (err as Error).message });
      }
    }
  }

  onModelEvent(listener: (e: ModelEvent) => void): void {
    this.listeners.push(listener);
  }

  private plan(source: ModelSource): ModelPlan {
    const footprint = estimateFootprint(source.dir);
    return { weightsBytes: footprint.weightsBytes, kvBytes: kvGrant(footprint, this.memory.budgetBytes, this.explicitKvBytes) };
  }

  /** Residency's load: a supervised worker with this KV budget (its restarts keep it). */
  private async loadWorker(id: string, kvBytes: number, warm: boolean): Promise<{ kvBytes: number }> {
    const source = this.sources.get(id);
    if (!source) throw new Error(`model ${id} is no longer served`);
    const settings: ThreadSettings = {
      ...this.settings,
      options: {
        ...this.settings.options,
        kvBudgetBytes: kvBytes,
        kvCapSequences: this.explicitKvBytes === 0 ? KV_SEQUENCES : undefined,
        // A request waiting for this load gets its first token sooner without the warm-up.
        warmupMs: warm ? this.settings.options.warmupMs : 0,
      },
    };
    const slot = new ModelSlot(source, settings, this.supervision, this.opts.log.child({ model: id }), this.changed);
    const error = await slot.load();
    if (error !== null) throw new Error(error);
    this.slots.set(id, slot);
    this.changed();
    this.emit({ type: "loaded", model: slot.model! });
    return { kvBytes: slot.kvBytes };
  }

  /**
   * Residency's unload (idle past its keep-alive, evicted, asked, removed): only ever of a model no
   * request holds. Through the slot's close, so the thread ends once no native call is in flight.
   */
  private async unloadWorker(id: string): Promise<void> {
    const slot = this.slots.get(id);
    this.slots.delete(id);
    await slot?.close(evicted(id));
    this.changed();
  }

  async load(sources: ModelSource[]): Promise<ModelLoadResult[]> {
    const wanted = new Map(sources.map((s) => [s.id, s]));
    for (const id of [...this.sources.keys()]) {
      if (wanted.has(id)) continue;
      this.sources.delete(id);
      // Unloaded once the requests it runs have ended.
      await this.memory.unregister(id);
    }
    const preload = this.opts.preload === "all" ? new Set(wanted.keys()) : new Set(this.opts.preload ?? []);
    for (const id of preload) if (!wanted.has(id)) this.opts.log.warn("--preload names a model that is not served", { model: id });
    const results: ModelLoadResult[] = [];
    for (const s of sources) {
      const before = this.sources.get(s.id);
      const changed = before !== undefined && (s.dir !== before.dir || s.stamp !== before.stamp);
      this.sources.set(s.id, s);
      this.memory.register(s.id, this.plan(s));
      let reload = false;
      if (changed && this.slots.has(s.id)) {
        // A changed directory: the old worker finishes its running requests and then closes (its
        // memory is not counted meanwhile); the model loads again now, so it is served throughout.
        const old = this.slots.get(s.id)!;
        this.slots.delete(s.id);
        this.memory.replaced(s.id);
        void old.retire().catch((e) => this.opts.log.warn("closing a replaced model failed", { model: s.id, error: (e as Error).message }));
        reload = true;
      }
      let error: string | null = null;
      if (reload || preload.has(s.id)) {
        try {
          await this.memory.load(s.id);
        } catch (e) {
          error = (e as Error).message;
        }
      }
      results.push({ id: s.id, model: this.slots.get(s.id)?.model ?? s.declared ?? null, error });
    }
    this.changed();
    return results;
  }

  models(): EngineModel[] {
    return [...this.sources.values()].flatMap((s) => {
      const m = this.slots.get(s.id)?.model ?? s.declared;
      return m ? [m] : [];
    });
  }

  async start(request: GenerateRequest): Promise<Generation> {
    if (!this.sources.has(request.modelId)) throw new EngineRequestError(`model ${request.modelId} is not loaded`, "model", "model_not_found");
    // Before any load: a request refused for its own content never loads a model.
    const key = structureKey(request, this.compileLimits.maxSchemaBytes);
    const loaded = this.slots.has(request.modelId);
    const waitFrom = epochMs();
    // Held from here until the request leaves the worker: a model in use is never unloaded.
    const release = await this.memory.acquire(request.modelId, request.signal);
    const modelLoad = loaded ? undefined : { start: waitFrom, end: epochMs() };
    const slot = this.slots.get(request.modelId);
    if (!slot) {
      release();
      throw new EngineUnavailableError(`The model ${request.modelId} was unloaded while the request waited for it. Retry.`, 1);
    }
    try {
      const generation = await slot.start(request, key, release);
      if (modelLoad && generation.timings) generation.timings.modelLoad = modelLoad;
      return generation;
    } catch (e) {
      // Refused before the worker took it (restarting, crash loop); release is idempotent.
      release();
      throw e;
    }
  }

  stats(): EngineStats {
    const slots = [...this.slots.values()];
    return { models: slots.flatMap((s) => (s.thread?.stats ? [s.thread.stats] : [])), workers: this.health() };
  }

  health(): WorkerHealth[] {
    return [...this.slots.values()].map((s) => s.health());
  }

  residency(): ResidencySummary {
    return this.memory.summary();
  }

  loadModel(id: string): Promise<ModelResidency> {
    return this.memory.load(id);
  }

  unloadModel(id: string): Promise<ModelResidency> {
    return this.memory.unloadNow(id);
  }

  /** Ends a model's worker thread abruptly, as a crash would: supervision's path, for tests and drills. */
  killWorker(modelId: string): void {
    this.slots.get(modelId)?.kill();
  }

  /** Test hook (testHooks): the model's worker stops answering for `ms`. */
  blockWorker(modelId: string, ms: number): void {
    if (this.opts.testHooks) this.slots.get(modelId)?.block(ms);
  }

  async close(): Promise<void> {
    clearInterval(this.watchdog);
    await this.memory.close();
    const all = [...this.slots.values()];
    this.slots.clear();
    await Promise.all(all.map((s) => s.close(new EngineUnavailableError("The server is shutting down; retry on another instance.", 1))));
  }
}
