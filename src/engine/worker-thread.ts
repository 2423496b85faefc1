// One model worker thread as the HTTP thread holds it (host.ts supervises the model it serves):
// its requests, each an async channel of the events the worker posts, the worker's liveness, and
// how it ends, terminated only once no native call is in flight in it (see native-calls.ts).
import type { Logger } from "../log.ts";
import { nativeCallFlags, quiesceNativeCalls } from "../native-calls.ts";
import { keepOrtTelemetryOff } from "./runtime/ort-telemetry.ts";
import {
  EngineBusyError,
  EngineRequestError,
  EngineUnavailableError,
  type EngineModel,
  type GenerateRequest,
  type Generation,
  type GenerationEvent,
  type GenerationTimings,
  type ModelSource,
  type ModelStats,
} from "./types.ts";
import type { HostMessage, RejectInfo, WorkerMessage, WorkerOptions } from "./worker/protocol.ts";

/** How long closing a model waits for its worker's native calls before leaving the thread (see end). */
const CLOSE_PATIENCE_MS = 5_000;

function toError(r: RejectInfo): Error {
  if (r.kind === "request") return new EngineRequestError(r.message, r.param, r.code);
  if (r.kind === "busy") return new EngineBusyError(r.message, r.retryAfterSeconds ?? 1);
  if (r.kind === "unavailable") return new EngineUnavailableError(r.message, r.retryAfterSeconds ?? 1, r.code ?? undefined);
  return new Error(r.message);
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

export interface ThreadSettings {
  workerUrl: string | URL;
  options: Omit<WorkerOptions, "id" | "dir">;
  admissionMs: number;
}

/** One model worker thread and the requests it holds. */
export class WorkerThread {
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

