// The engine as the HTTP thread sees it: one worker per model, requests and events passed as
// messages, so a model computing never blocks /health or /v1/models.
import type { Logger } from "../log.ts";
import type { Device } from "./providers.ts";
import {
  EngineBusyError,
  EngineRequestError,
  type Engine,
  type EngineModel,
  type GenerateRequest,
  type Generation,
  type GenerationEvent,
  type EngineStats,
  type ModelLoadResult,
  type ModelSource,
  type ModelStats,
  type SpeculateMode,
} from "./types.ts";
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
  /** Speculative decoding (absent: "ngram"). */
  speculate?: SpeculateMode;
  /** Warm-up per model at load, ms (absent: SLUICE_WARMUP_MS, else none). */
  warmupMs?: number;
  /** Worker entry; overridable so the compiled binary can point at its embedded copy. */
  workerUrl?: string | URL;
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
}

class ModelWorker {
  private nextRid = 1;
  private pending = new Map<number, Pending>();
  model: EngineModel | null = null;
  stats: ModelStats | null = null;

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
      }
      this.pending.clear();
    };
  }

  static spawn(source: ModelSource, opts: EngineOptions): Promise<{ worker: ModelWorker | null; error: string | null }> {
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
          kvBudgetBytes: opts.kvBudgetBytes ?? envNumber("SLUICE_KV_BUDGET_MB") * 2 ** 20,
          maxQueue: opts.maxQueue ?? envNumber("SLUICE_MAX_QUEUE"),
          speculate: opts.speculate,
          warmupMs: opts.warmupMs ?? envNumber("SLUICE_WARMUP_MS"),
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
        return;
      }
      case "round":
        for (const r of m.messages) {
          const p = this.pending.get(r.rid);
          if (r.type === "events") p?.channel.push(r.events);
          else {
            this.pending.delete(r.rid);
            p?.channel.end(r.error ? new Error(r.error) : undefined);
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

  start(request: GenerateRequest): Promise<Generation> {
    const rid = this.nextRid++;
    const { signal, ...wire } = request;
    const channel = new EventChannel();
    return new Promise<Generation>((resolve, reject) => {
      this.pending.set(rid, {
        started: (promptTokens) => resolve({ promptTokens, events: channel }),
        rejected: reject,
        channel,
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
  return new Error(r.message);
}

export class WorkerEngine implements Engine {
  private workers = new Map<string, ModelWorker>();

  constructor(private readonly opts: EngineOptions) {}

  async load(sources: ModelSource[]): Promise<ModelLoadResult[]> {
    const wanted = new Map(sources.map((s) => [s.id, s]));
    for (const [id, w] of this.workers) {
      if (!wanted.has(id)) {
        this.workers.delete(id);
        await w.close();
      }
    }
    const results: ModelLoadResult[] = [];
    for (const s of sources) {
      const existing = this.workers.get(s.id);
      if (existing && s.dir === existing.source.dir && s.stamp === existing.source.stamp) {
        results.push({ id: s.id, model: existing.model, error: null });
        continue;
      }
      // A changed directory: the new load is made first, so the model is served throughout; the
      // old worker finishes its running requests and then closes.
      const { worker, error } = await ModelWorker.spawn(s, this.opts);
      if (worker) this.workers.set(s.id, worker);
      else this.workers.delete(s.id);
      if (existing) void existing.retire().catch((e) => this.opts.log.warn("closing a replaced model failed", { model: s.id, error: (e as Error).message }));
      results.push({ id: s.id, model: worker?.model ?? null, error });
    }
    return results;
  }

  models(): EngineModel[] {
    return [...this.workers.values()].map((w) => w.model!);
  }

  start(request: GenerateRequest): Promise<Generation> {
    const w = this.workers.get(request.modelId);
    if (!w) return Promise.reject(new EngineRequestError(`model ${request.modelId} is not loaded`, "model", "model_not_found"));
    return w.start(request);
  }

  stats(): EngineStats {
    return { models: [...this.workers.values()].flatMap((w) => (w.stats ? [w.stats] : [])) };
  }

  async close(): Promise<void> {
    const all = [...this.workers.values()];
    this.workers.clear();
    await Promise.all(all.map((w) => w.close()));
  }
}
