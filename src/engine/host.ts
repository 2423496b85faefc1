// The engine as the HTTP thread sees it: one worker per loaded model, requests and events passed as
// messages, so a model computing never blocks /health or /v1/models. Which models are loaded is
// residency's (residency/residency.ts): a model loads on its first request and is unloaded when
// idle, under one memory budget.
import type { Logger } from "../log.ts";
import type { Device } from "./providers.ts";
import {
  EngineBusyError,
  EngineRequestError,
  EngineUnavailableError,
  type Engine,
  type EngineModel,
  type GenerateRequest,
  type Generation,
  type GenerationEvent,
  type EngineStats,
  type ModelEvent,
  type ModelLoadResult,
  type ModelResidency,
  type ModelSource,
  type ModelStats,
  type ResidencySummary,
} from "./types.ts";
import { deviceMemory, memoryBudgetBytes } from "./residency/device-memory.ts";
import { estimateFootprint, kvGrant, KV_SEQUENCES } from "./residency/footprint.ts";
import { Residency, type ModelPlan } from "./residency/residency.ts";
import { DEFAULT_KEEP_ALIVE_MS } from "./residency/settings.ts";
import type { QueueOrder } from "./worker/fair-queue.ts";
import type { HostMessage, RejectInfo, WorkerMessage } from "./worker/protocol.ts";

export interface EngineOptions {
  log: Logger;
  device: Device;
  threads: number;
  /**
   * KV memory per model (running sequences + prefix cache). Absent: SLUICE_KV_BUDGET_MB from the
   * environment, else a quarter of the machine's memory up to 8 GiB.
   */
  kvBudgetBytes?: number;
  /** Requests per model that may wait for KV memory (absent: SLUICE_MAX_QUEUE, else 64). */
  maxQueue?: number;
  /** Worker entry; overridable so the compiled binary can point at its embedded copy. */
  workerUrl?: string | URL;
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

/** An async queue of events fed by worker messages and drained by the API. */
class EventChannel implements AsyncIterable<GenerationEvent> {
  private buffer: GenerationEvent[] = [];
  private waiting: ((r: IteratorResult<GenerationEvent>) => void) | null = null;
  private failed: ((e: Error) => void) | null = null;
  private ended = false;
  private error: Error | null = null;

  push(events: GenerationEvent[]) {
    for (const e of events) {
      if (this.waiting) {
        const w = this.waiting;
        this.waiting = this.failed = null;
        w({ value: e, done: false });
      } else this.buffer.push(e);
    }
  }

  end(error?: Error) {
    this.ended = true;
    this.error = error ?? null;
    if (this.waiting) {
      const w = this.waiting;
      const f = this.failed!;
      this.waiting = this.failed = null;
      if (this.error) f(this.error);
      else w({ value: undefined, done: true });
    }
  }

  [Symbol.asyncIterator](): AsyncIterator<GenerationEvent> {
    return {
      next: () => {
        const e = this.buffer.shift();
        if (e) return Promise.resolve({ value: e, done: false });
        if (this.ended) return this.error ? Promise.reject(this.error) : Promise.resolve({ value: undefined, done: true });
        return new Promise((resolve, reject) => {
          this.waiting = resolve;
          this.failed = reject;
        });
      },
    };
  }
}

interface Pending {
  started: (promptTokens: number) => void;
  rejected: (e: Error) => void;
  channel: EventChannel;
  /** The request left the worker (ended, refused, or the worker went away). */
  ended: () => void;
}

class ModelWorker {
  private nextRid = 1;
  private pending = new Map<number, Pending>();
  model: EngineModel | null = null;
  stats: ModelStats | null = null;
  /** The KV budget the worker took. */
  kvBytes = 0;

  private constructor(
    readonly source: ModelSource,
    private readonly worker: Worker,
    private readonly log: Logger,
  ) {
    worker.onmessage = (e: MessageEvent<WorkerMessage>) => this.onMessage(e.data);
    worker.onerror = (e) => {
      log.error("model worker crashed", { model: source.id, error: e.message });
      for (const p of this.pending.values()) {
        p.rejected(new Error("model worker crashed"));
        p.channel.end(new Error("model worker crashed"));
        p.ended();
      }
      this.pending.clear();
    };
  }

  /** `kvBytes`: its KV budget; `kvCap`: the budget is automatic (capped at KV_SEQUENCES full-context sequences). */
  static spawn(source: ModelSource, opts: EngineOptions, kvBytes: number, kvCap: boolean): Promise<{ worker: ModelWorker | null; error: string | null }> {
    const url = opts.workerUrl ?? new URL("./worker/model-worker.ts", import.meta.url);
    const w = new Worker(url);
    const mw = new ModelWorker(source, w, opts.log.child({ model: source.id }));
    return new Promise((resolve) => {
      mw.onLoaded = (model, error) => {
        if (model) {
          mw.model = model;
          resolve({ worker: mw, error: null });
        } else {
          w.terminate();
          resolve({ worker: null, error });
        }
      };
      mw.post({
        type: "load",
        options: {
          id: source.id,
          dir: source.dir,
          device: opts.device,
          threads: opts.threads,
          kvBudgetBytes: kvBytes,
          kvCapSequences: kvCap ? KV_SEQUENCES : undefined,
          maxQueue: opts.maxQueue ?? 0,
          keyQueueShare: opts.accountQueueShare,
          queueOrder: opts.scheduling,
        },
      });
    });
  }

  private onLoaded: (model: EngineModel | null, error: string | null) => void = () => {};

  private post(m: HostMessage) {
    this.worker.postMessage(m);
  }

  private onMessage(m: WorkerMessage) {
    switch (m.type) {
      case "loaded":
        for (const note of m.notes) this.log.info(note);
        this.kvBytes = m.kvBudgetBytes;
        this.onLoaded(m.model, null);
        return;
      case "load-failed":
        this.onLoaded(null, m.error);
        return;
      case "log":
        this.log[m.level](m.msg, m.fields);
        return;
      case "started":
        this.pending.get(m.rid)?.started(m.promptTokens);
        return;
      case "rejected": {
        const p = this.pending.get(m.rid);
        this.pending.delete(m.rid);
        p?.rejected(toError(m.error));
        p?.ended();
        return;
      }
      case "round":
        for (const r of m.messages) {
          const p = this.pending.get(r.rid);
          if (r.type === "events") p?.channel.push(r.events);
          else {
            this.pending.delete(r.rid);
            p?.channel.end(r.error ? new Error(r.error) : undefined);
            p?.ended();
          }
        }
        return;
      case "stats":
        this.stats = m.stats;
        return;
      case "closed":
        return;
    }
  }

  /** `ended`: called once, when the request leaves the worker however it ends. */
  start(request: GenerateRequest, ended: () => void = () => {}): Promise<Generation> {
    const rid = this.nextRid++;
    const { signal, ...wire } = request;
    const channel = new EventChannel();
    return new Promise<Generation>((resolve, reject) => {
      this.pending.set(rid, {
        started: (promptTokens) => resolve({ promptTokens, events: channel }),
        rejected: reject,
        channel,
        ended,
      });
      const onAbort = () => this.post({ type: "cancel", rid });
      if (signal.aborted) onAbort();
      else signal.addEventListener("abort", onAbort, { once: true });
      this.post({ type: "start", rid, request: wire });
    });
  }

  async close(): Promise<void> {
    await new Promise<void>((resolve) => {
      const t = setTimeout(resolve, 2000);
      const prev = this.worker.onmessage;
      this.worker.onmessage = (e: MessageEvent<WorkerMessage>) => {
        if (e.data.type === "closed") {
          clearTimeout(t);
          resolve();
        } else prev?.call(this.worker, e);
      };
      this.post({ type: "close" });
    });
    this.worker.terminate();
    // Whatever was still running has no worker to finish it: end it in words, never leave it hanging.
    const gone = `model ${this.source.id} was unloaded while the request ran (its directory changed or was removed)`;
    for (const p of this.pending.values()) {
      p.rejected(new EngineBusyError(gone, 1));
      p.channel.end(new Error(gone));
      p.ended();
    }
    this.pending.clear();
  }

  /**
   * Closes once the requests it is running have ended (at most `deadlineMs`): a model replaced
   * by a new load finishes what it started while the new one takes the new requests.
   */
  async retire(deadlineMs = RETIRE_DEADLINE_MS): Promise<void> {
    const until = Date.now() + deadlineMs;
    while (this.pending.size > 0 && Date.now() < until) await Bun.sleep(50);
    await this.close();
  }
}

/** How long a replaced model may take to finish its running requests before it is closed. */
const RETIRE_DEADLINE_MS = 60_000;

/** A positive number from the environment, or 0 (the worker's default). */
function envNumber(name: string): number {
  const v = Number(process.env[name]);
  return Number.isFinite(v) && v > 0 ? v : 0;
}

function toError(r: RejectInfo): Error {
  if (r.kind === "request") return new EngineRequestError(r.message, r.param, r.code);
  if (r.kind === "busy") return new EngineBusyError(r.message, r.retryAfterSeconds ?? 1);
  if (r.kind === "unavailable") return new EngineUnavailableError(r.message, r.retryAfterSeconds ?? 1, r.code ?? undefined);
  return new Error(r.message);
}

export class WorkerEngine implements Engine {
  /** Every model served, loaded or not. */
  private readonly sources = new Map<string, ModelSource>();
  /** The loaded ones' workers. */
  private readonly workers = new Map<string, ModelWorker>();
  private readonly memory: Residency;
  private readonly listeners: ((e: ModelEvent) => void)[] = [];
  /** serve --kv-budget-mb (or SLUICE_KV_BUDGET_MB); 0: automatic. */
  private readonly explicitKvBytes: number;

  private readonly opts: EngineOptions;

  constructor(options: EngineOptions) {
    // The environment is read now, not when a model loads (maybe much later, on its first request).
    const opts = (this.opts = { ...options, maxQueue: options.maxQueue || envNumber("SLUICE_MAX_QUEUE") });
    this.explicitKvBytes = opts.kvBudgetBytes || envNumber("SLUICE_KV_BUDGET_MB") * 2 ** 20;
    this.memory = new Residency({
      budgetBytes: opts.memoryBudgetBytes ?? memoryBudgetBytes(deviceMemory(false), null),
      loader: { load: (id, kv) => this.loadWorker(id, kv), unload: (id) => this.unloadWorker(id) },
      keepAliveMs: (id) => this.sources.get(id)?.keepAliveMs?.() ?? opts.keepAliveMs ?? DEFAULT_KEEP_ALIVE_MS,
      waitMs: opts.loadWaitMs ?? 60_000,
      log: opts.log,
      onLoadFailed: (id, error) => this.emit({ type: "load-failed", id, error }),
    });
  }

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

  private async loadWorker(id: string, kvBytes: number): Promise<{ kvBytes: number }> {
    const source = this.sources.get(id);
    if (!source) throw new Error(`model ${id} is no longer served`);
    const { worker, error } = await ModelWorker.spawn(source, this.opts, kvBytes, this.explicitKvBytes === 0);
    if (!worker) throw new Error(error ?? "the model worker did not load it");
    this.workers.set(id, worker);
    this.emit({ type: "loaded", model: worker.model! });
    return { kvBytes: worker.kvBytes };
  }

  private async unloadWorker(id: string): Promise<void> {
    const w = this.workers.get(id);
    this.workers.delete(id);
    await w?.close();
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
      if (changed && this.workers.has(s.id)) {
        // A changed directory: the old worker finishes its running requests and then closes (its
        // memory is not counted meanwhile); the model loads again now, so it is served throughout.
        const old = this.workers.get(s.id)!;
        this.workers.delete(s.id);
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
      results.push({ id: s.id, model: this.workers.get(s.id)?.model ?? s.declared ?? null, error });
    }
    return results;
  }

  models(): EngineModel[] {
    return [...this.sources.values()].flatMap((s) => {
      const m = this.workers.get(s.id)?.model ?? s.declared;
      return m ? [m] : [];
    });
  }

  async start(request: GenerateRequest): Promise<Generation> {
    if (!this.sources.has(request.modelId)) throw new EngineRequestError(`model ${request.modelId} is not loaded`, "model", "model_not_found");
    // Held from here until the request leaves the worker: a model in use is never unloaded.
    const release = await this.memory.acquire(request.modelId, request.signal);
    const w = this.workers.get(request.modelId);
    if (!w) {
      release();
      throw new EngineUnavailableError(`The model ${request.modelId} was unloaded while the request waited for it. Retry.`, 1);
    }
    try {
      return await w.start(request, release);
    } catch (e) {
      release();
      throw e;
    }
  }

  stats(): EngineStats {
    return { models: [...this.workers.values()].flatMap((w) => (w.stats ? [w.stats] : [])) };
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

  async close(): Promise<void> {
    await this.memory.close();
    const all = [...this.workers.values()];
    this.workers.clear();
    await Promise.all(all.map((w) => w.close()));
  }
}
