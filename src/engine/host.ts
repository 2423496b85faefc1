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
import { nativeCallFlags, quiesceNativeCalls } from "../native-calls.ts";
import { keepOrtTelemetryOff } from "./runtime/ort-telemetry.ts";
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
  type GenerationEvent,
  type GenerationTimings,
  type EngineStats,
  type ModelEvent,
  type ModelLoadResult,
  type ModelResidency,
  type ModelSource,
  type ModelStats,
  type ResidencySummary,
  type SpeculateMode,
  type WorkerHealth,
} from "./types.ts";
import { deviceMemory, memoryBudgetBytes } from "./residency/device-memory.ts";
import { estimateFootprint, kvGrant, KV_SEQUENCES } from "./residency/footprint.ts";
import { Residency, type ModelPlan } from "./residency/residency.ts";
import { DEFAULT_KEEP_ALIVE_MS } from "./residency/settings.ts";
import type { QueueOrder } from "./worker/fair-queue.ts";
import type { HostMessage, RejectInfo, WorkerMessage, WorkerOptions } from "./worker/protocol.ts";
import { epochMs } from "./worker/request-clock.ts";
import type { OrtBinding } from "./ort-binding.ts";

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

/**
 * An async queue of events fed by worker messages and drained by the API, a batch at a time: a
 * message's events (the worker joins a request's held rounds into one) or all those that came
 * while the reader was busy.
 */
class EventChannel implements AsyncIterable<GenerationEvent[]> {
  private buffer: GenerationEvent[] = [];
  private waiting: ((r: IteratorResult<GenerationEvent[]>) => void) | null = null;
  private failed: ((e: Error) => void) | null = null;
  private ended = false;
  private error: Error | null = null;

  push(events: GenerationEvent[]) {
    if (this.ended || events.length === 0) return;
    if (this.waiting) {
      const w = this.waiting;
      this.waiting = this.failed = null;
      w({ value: events, done: false });
    } else for (const e of events) this.buffer.push(e);
  }

  end(error?: Error) {
    if (this.ended) return;
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

  [Symbol.asyncIterator](): AsyncIterator<GenerationEvent[]> {
    return {
      next: () => {
        if (this.buffer.length > 0) {
          const events = this.buffer;
          this.buffer = [];
          return Promise.resolve({ value: events, done: false });
        }
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
  /** Filled in with the worker's timings when the request ends. */
  timings: GenerationTimings;
  rejected: (e: Error) => void;
  channel: EventChannel;
  /** The request left the worker (ended, refused, timed out, or the worker went away). */
  ended: () => void;
}

interface ThreadSettings {
  workerUrl: string | URL;
  options: Omit<WorkerOptions, "id" | "dir">;
  admissionMs: number;
}

/** One model worker thread and the requests it holds. */
class WorkerThread {
  private nextRid = 1;
  private readonly pending = new Map<number, Pending>();
  stats: ModelStats | null = null;
  /** When the thread last sent anything (performance.now()). */
  lastHeard = performance.now();
  private pingSent = 0;
  private lastError: string | null = null;
  private closing = false;
  private onLoaded: (model: EngineModel | null, error: string | null) => void = () => {};
  /** The KV budget the worker took (its "loaded" message). */
  kvBytes = 0;

  private constructor(
    readonly modelId: string,
    private readonly worker: Worker,
    /** Native calls in flight in the thread: it is terminated only when there are none. */
    private readonly nativeCalls: SharedArrayBuffer,
    private readonly log: Logger,
    private readonly admissionMs: number,
    private readonly onExit: (thread: WorkerThread, reason: string) => void,
  ) {
    worker.onmessage = (e: MessageEvent<WorkerMessage>) => {
      this.lastHeard = performance.now();
      this.onMessage(e.data);
    };
    worker.addEventListener("error", (e) => {
      this.lastError = (e as ErrorEvent).message || "uncaught error";
    });
    worker.addEventListener("close", () => {
      if (this.closing) return;
      this.closing = true;
      const reason = this.lastError ?? "the worker thread exited";
      this.onLoaded(null, `the model worker crashed while loading: ${reason}`);
      this.onExit(this, reason);
    });
  }

  static spawn(
    source: ModelSource,
    settings: ThreadSettings,
    log: Logger,
    onExit: (thread: WorkerThread, reason: string) => void,
  ): Promise<{ thread: WorkerThread | null; model: EngineModel | null; error: string | null }> {
    // Before the thread exists, which creates ONNX Runtime's environment (see ort-telemetry.ts).
    keepOrtTelemetryOff();
    const w = new Worker(settings.workerUrl);
    const nativeCalls = nativeCallFlags();
    const t = new WorkerThread(source.id, w, nativeCalls, log, settings.admissionMs, onExit);
    return new Promise((resolve) => {
      t.onLoaded = (model, error) => {
        t.onLoaded = () => {};
        if (model) resolve({ thread: t, model, error: null });
        else {
          t.terminate();
          resolve({ thread: null, model: null, error });
        }
      };
      t.post({ type: "load", options: { ...settings.options, id: source.id, dir: source.dir, nativeCalls } });
    });
  }

  get pendingCount(): number {
    return this.pending.size;
  }

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
            if (p && r.timings) Object.assign(p.timings, r.timings);
            p?.channel.end(r.error === undefined ? undefined : r.code ? new EngineRequestError(r.error, null, r.code) : new Error(r.error));
            p?.ended();
          }
        }
        return;
      case "stats":
        this.stats = m.stats;
        return;
      case "fatal":
        // The thread ends itself once its native calls are done; its requests fail now.
        if (this.closing) return;
        this.closing = true;
        this.onLoaded(null, `the model worker failed while loading: ${m.error}`);
        this.onExit(this, m.error);
        return;
      case "pong":
      case "closed":
        return;
    }
  }

  /** `ended`: called once, when the request leaves the worker however it ends. */
  start(request: GenerateRequest, key: string | null, ended: () => void): Promise<Generation> {
    const rid = this.nextRid++;
    const { signal, ...wire } = request;
    const channel = new EventChannel();
    const timings: GenerationTimings = { interTokenSeconds: [], timePerOutputTokenSeconds: [], preemptions: 0 };
    return new Promise<Generation>((resolve, reject) => {
      // The worker answers once the prompt is read and the grammar compiled; a worker that
      // never answers is restarted by the stall check, and this bounds the wait regardless.
      const timer = setTimeout(() => {
        if (!this.pending.delete(rid)) return;
        this.post({ type: "cancel", rid });
        ended();
        reject(new EngineUnavailableError(`The model ${this.modelId} did not take the request within ${Math.round(this.admissionMs / 1000)} s. Retry later.`, 5));
      }, this.admissionMs);
      this.pending.set(rid, {
        started: (promptTokens) => {
          clearTimeout(timer);
          resolve({ promptTokens, events: channel, timings });
        },
        rejected: (e) => {
          clearTimeout(timer);
          reject(e);
        },
        timings,
        channel,
        ended,
      });
      const onAbort = () => this.post({ type: "cancel", rid });
      if (signal.aborted) onAbort();
      else signal.addEventListener("abort", onAbort, { once: true });
      try {
        this.post({ type: "start", rid, request: wire, structureKey: key });
      } catch (e) {
        // Structured cloning recurses: a structure too deep for it is the request's fault.
        this.pending.delete(rid);
        clearTimeout(timer);
        ended();
        reject(new EngineRequestError(`The request could not be passed to the model: ${(e as Error).message}`, null, "invalid_value"));
      }
    });
  }

  /** Ends every request this thread holds with `error` (it crashed, hung, or is shutting down). */
  failAll(error: Error): void {
    const all = [...this.pending.values()];
    this.pending.clear();
    for (const p of all) {
      p.rejected(error);
      p.channel.end(error);
      p.ended();
    }
  }

  /** Counts the thread as heard from now (after a time in which nothing in this process ran). */
  heardNow(now: number): void {
    this.lastHeard = now;
    this.pingSent = 0;
  }

  /** Sends a ping when requests wait and the thread has been quiet; true when it is hung. */
  checkAlive(now: number, stallMs: number): boolean {
    if (this.pending.size === 0) {
      // Idle is not stuck: a quiet spell only counts while requests wait.
      this.lastHeard = now;
      return false;
    }
    const quiet = now - this.lastHeard;
    if (quiet > stallMs) return true;
    if (quiet > Math.min(1000, stallMs / 4) && now - this.pingSent > Math.min(1000, stallMs / 4)) {
      this.pingSent = now;
      this.post({ type: "ping" });
    }
    return false;
  }

  /** Test hook: the thread busy-waits for `ms` (a stuck worker). */
  block(ms: number): void {
    this.post({ type: "block", ms });
  }

  /**
   * Ends the thread, once no native call is in flight in it (a call completing into a torn-down
   * thread aborts the process); new calls never start meanwhile. `asCrash`: its close is then
   * seen as the crash it is (supervision's own path).
   */
  private async end(asCrash: boolean, patienceMs = Infinity): Promise<void> {
    if (!asCrash) this.closing = true;
    const slow = () => this.log.warn("a model worker being ended is still inside a native call; waiting for it", { model: this.modelId });
    if (await quiesceNativeCalls(this.nativeCalls, slow, Math.min(10_000, patienceMs / 2), patienceMs)) {
      this.worker.terminate();
      return;
    }
    // A thread stuck in JavaScript never sees its native call complete, so the count never drops;
    // terminating it could abort the process. A closing engine does not wait for it forever: the
    // thread is left to end with the process (its requests were answered already).
    (this.worker as Worker & { unref?: () => void }).unref?.();
    this.log.warn("a model worker did not leave its native call in time; left to end with the process", { model: this.modelId, waited_s: patienceMs / 1000 });
  }

  terminate(): void {
    void this.end(false);
  }

  /** Ends the thread from outside without telling anyone, as a crash would (tests and drills). */
  kill(): void {
    this.lastError = "the worker thread was killed";
    void this.end(true);
  }

  async close(error: Error): Promise<void> {
    this.closing = true;
    await new Promise<void>((resolve) => {
      const t = setTimeout(resolve, 2000);
      this.worker.addEventListener("message", (e: MessageEvent<WorkerMessage>) => {
        if (e.data.type === "closed") {
          clearTimeout(t);
          resolve();
        }
      });
      try {
        this.post({ type: "close" });
      } catch {
        clearTimeout(t);
        resolve();
      }
    });
    this.failAll(error);
    await this.end(false, CLOSE_PATIENCE_MS);
  }
}

/** How long closing a model waits for its worker's native calls before leaving the thread (see end). */
const CLOSE_PATIENCE_MS = 5_000;

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

function toError(r: RejectInfo): Error {
  if (r.kind === "request") return new EngineRequestError(r.message, r.param, r.code);
  if (r.kind === "busy") return new EngineBusyError(r.message, r.retryAfterSeconds ?? 1);
  if (r.kind === "unavailable") return new EngineUnavailableError(r.message, r.retryAfterSeconds ?? 1, r.code ?? undefined);
  return new Error(r.message);
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
