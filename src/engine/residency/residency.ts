// Which models are loaded, under one memory budget (the weights and KV memory of every resident
// model). A model loads on its first request; requests arriving while it loads share that load. It
// unloads once idle for its keep-alive (-1: never). When a load needs room, idle models are
// unloaded least recently used first; a model with a request in flight, one loading and a pinned
// one never are. When no room can be made, the request waits for some (other models' requests to
// end) up to a bound, then gets EngineUnavailableError (a 503 with Retry-After).
//
// The policy only: loading and unloading are the loader's (the engine host's worker threads).
import type { Logger } from "../../log.ts";
import { EngineUnavailableError, type ModelResidency, type ResidencySummary } from "../types.ts";
import { formatBytes } from "../../format-bytes.ts";
import { describeKeepAlive, PINNED } from "./settings.ts";

export interface Loader {
  /**
   * Loads the model with this KV budget; resolves with the KV budget it took (at most that), or
   * rejects. `warm`: no request waits for this load (a preload or an operator's), so it may take
   * the time to warm the model's code before reporting it loaded.
   */
  load(id: string, kvBytes: number, warm: boolean): Promise<{ kvBytes: number }>;
  unload(id: string): Promise<void>;
}

export interface ResidencyOptions {
  budgetBytes: number;
  loader: Loader;
  /** A model's keep-alive, ms or PINNED (asked whenever it matters, so a change applies). */
  keepAliveMs: (id: string) => number;
  /** The longest a request waits for room to load its model. */
  waitMs: number;
  log: Logger;
  /** How often idle models are checked against their keep-alive. */
  sweepMs?: number;
  /** A load failed (the model's requests got the error). */
  onLoadFailed?: (id: string, error: string) => void;
}

export interface ModelPlan {
  weightsBytes: number;
  /** The KV budget to load it with. */
  kvBytes: number;
}

interface Entry {
  id: string;
  state: ModelResidency["state"];
  plan: ModelPlan;
  /** KV budget while loading or loaded (the plan's until the load says what it took). */
  kvBytes: number;
  active: number;
  /** When it was last used (Date.now()). */
  lastUsed: number;
  loading: Promise<void> | null;
  unloading: Promise<void> | null;
  loadedAt: number | null;
  lastLoadMs: number | null;
  loads: number;
  evictions: number;
  lastError: string | null;
  /** Load attempts started, and the last one that failed. */
  attempts: number;
  failedAttempt: number;
  /** Unregistered: it leaves once unloaded. */
  gone: boolean;
}

const reserved = (e: Entry) => (e.state === "unloaded" ? 0 : e.plan.weightsBytes + e.kvBytes);

export class Residency {
  private readonly entries = new Map<string, Entry>();
  /** Requests waiting for room; woken whenever memory may have been freed. */
  private waiters = new Set<() => void>();
  private readonly sweeper: ReturnType<typeof setInterval>;

  constructor(private readonly opts: ResidencyOptions) {
    this.sweeper = setInterval(() => this.sweep(), opts.sweepMs ?? 1000);
    this.sweeper.unref?.();
  }

  get budgetBytes(): number {
    return this.opts.budgetBytes;
  }

  get usedBytes(): number {
    let n = 0;
    for (const e of this.entries.values()) n += reserved(e);
    return n;
  }

  /** Makes a model known (or updates its plan; a loaded model keeps its memory until reloaded). */
  register(id: string, plan: ModelPlan): void {
    const e = this.entries.get(id);
    if (e) {
      e.plan = plan;
      e.gone = false;
      if (e.state === "unloaded") e.kvBytes = plan.kvBytes;
      return;
    }
    this.entries.set(id, {
      id,
      state: "unloaded",
      plan,
      kvBytes: plan.kvBytes,
      active: 0,
      lastUsed: 0,
      loading: null,
      unloading: null,
      loadedAt: null,
      lastLoadMs: null,
      loads: 0,
      evictions: 0,
      lastError: null,
      attempts: 0,
      failedAttempt: 0,
      gone: false,
    });
  }

  /** Forgets a model (its directory left the catalog); it is unloaded once its requests end. */
  async unregister(id: string): Promise<void> {
    const e = this.entries.get(id);
    if (!e) return;
    e.gone = true;
    await e.loading?.catch(() => {});
    if (e.active === 0) await this.unload(e, "removed");
  }

  /**
   * The model's loader replaced its loaded copy outside of residency (its directory changed; the
   * old copy finishes its requests on its own): it counts as not loaded from now on.
   */
  replaced(id: string): void {
    const e = this.entries.get(id);
    if (!e || e.state !== "resident") return;
    e.state = "unloaded";
    e.kvBytes = e.plan.kvBytes;
    this.wake();
  }

  has(id: string): boolean {
    return this.entries.has(id) && !this.entries.get(id)!.gone;
  }

  isResident(id: string): boolean {
    return this.entries.get(id)?.state === "resident";
  }

  /**
   * Makes the model resident and holds it there until the returned release is called (a request
   * in flight). Waits for its load, and for room, up to waitMs in all.
   */
  async acquire(id: string, signal?: AbortSignal, warm = false): Promise<() => void> {
    const e = this.entries.get(id);
    if (!e || e.gone) throw new EngineUnavailableError(`The model ${id} is not available on this server.`, 5, "model_unavailable");
    const deadline = performance.now() + this.opts.waitMs;
    // Held from now: a model being loaded for this request is not evicted for another's.
    e.active++;
    e.lastUsed = Date.now();
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      e.active--;
      e.lastUsed = Date.now();
      if (e.active === 0) this.idle(e);
      this.wake();
    };
    try {
      for (;;) {
        if (e.state === "resident") return release;
        if (e.unloading) await e.unloading;
        else if (e.loading) {
          const attempt = e.attempts;
          await e.loading;
          // The load this request waited for failed: it gets that error (a later request tries again).
          if (e.failedAttempt === attempt) throw loadFailed(id, e.lastError ?? "unknown error");
        } else if (!this.makeRoom(e)) await this.waitForRoom(e, deadline, signal);
        else this.startLoad(e, warm);
      }
    } catch (err) {
      release();
      throw err;
    }
  }

  /** Loads a model now (admin); resolves once it is resident. */
  async load(id: string): Promise<ModelResidency> {
    const release = await this.acquire(id, undefined, true);
    release();
    return this.describe(this.entries.get(id)!);
  }

  /** Unloads a model now (admin); refuses while requests use it. */
  async unloadNow(id: string): Promise<ModelResidency> {
    const e = this.entries.get(id);
    if (!e || e.gone) throw new Error(`no model ${id} on this server`);
    await e.loading?.catch(() => {});
    if (e.active > 0) throw new Error(`the model ${id} has ${e.active} request(s) in flight; unload it when they end`);
    await this.unload(e, "asked");
    return this.describe(e);
  }

  summary(): ResidencySummary {
    return { budgetBytes: this.opts.budgetBytes, usedBytes: this.usedBytes, models: [...this.entries.values()].filter((e) => !e.gone).map((e) => this.describe(e)) };
  }

  /** Unloads idle models past their keep-alive. */
  sweep(now = Date.now()): void {
    for (const e of this.entries.values()) {
      if (e.state !== "resident" || e.active > 0) continue;
      if (e.gone) {
        void this.unload(e, "removed");
        continue;
      }
      const keep = this.opts.keepAliveMs(e.id);
      if (keep !== PINNED && now - e.lastUsed >= keep) void this.unload(e, `idle for ${describeKeepAlive(keep)}`);
    }
  }

  async close(): Promise<void> {
    clearInterval(this.sweeper);
    for (const w of this.waiters) w();
    this.waiters.clear();
  }

  private idle(e: Entry) {
    // A keep-alive of 0: unloaded as soon as nothing uses it (not waiting for the sweep).
    if (e.state === "resident" && (e.gone || this.opts.keepAliveMs(e.id) === 0)) void this.unload(e, e.gone ? "removed" : "idle (keep-alive 0)");
  }

  private describe(e: Entry): ModelResidency {
    const keepAliveMs = this.opts.keepAliveMs(e.id);
    return {
      model: e.id,
      state: e.state,
      weightsBytes: e.plan.weightsBytes,
      kvBytes: e.kvBytes,
      bytes: e.plan.weightsBytes + e.kvBytes,
      activeRequests: e.active,
      keepAliveMs,
      lastUsedAt: e.lastUsed || null,
      unloadAt: e.state === "resident" && e.active === 0 && keepAliveMs !== PINNED ? e.lastUsed + keepAliveMs : null,
      loadedAt: e.state === "resident" ? e.loadedAt : null,
      lastLoadMs: e.lastLoadMs,
      loads: e.loads,
      evictions: e.evictions,
      lastError: e.lastError,
    };
  }

  /**
   * Whether the model fits now, evicting idle models (least recently used first) if that is enough.
   * Synchronous up to the evictions it starts, so two loads never count the same free bytes.
   */
  private makeRoom(e: Entry): boolean {
    const need = e.plan.weightsBytes + e.plan.kvBytes;
    if (need > this.opts.budgetBytes) {
      throw new EngineUnavailableError(
        `The model ${e.id} needs about ${formatBytes(need)} (weights ${formatBytes(e.plan.weightsBytes)}, KV cache ${formatBytes(e.plan.kvBytes)}), more than the server's whole memory budget of ${formatBytes(this.opts.budgetBytes)} (serve --memory-budget).`,
        60,
        "insufficient_memory",
      );
    }
    let free = this.opts.budgetBytes - this.usedBytes;
    if (free >= need) return true;
    const idle = [...this.entries.values()]
      .filter((o) => o !== e && o.state === "resident" && o.active === 0 && (o.gone || this.opts.keepAliveMs(o.id) !== PINNED))
      .sort((a, b) => a.lastUsed - b.lastUsed);
    const victims: Entry[] = [];
    for (const o of idle) {
      if (free >= need) break;
      victims.push(o);
      free += reserved(o);
    }
    if (free < need) return false;
    for (const v of victims) void this.unload(v, `evicted to load ${e.id}`, true);
    // Their memory counts as free once they are unloaded: the caller waits for that.
    return this.opts.budgetBytes - this.usedBytes >= need;
  }

  private startLoad(e: Entry, warm: boolean) {
    e.state = "loading";
    e.kvBytes = e.plan.kvBytes;
    e.lastError = null;
    const attempt = ++e.attempts;
    const started = performance.now();
    this.opts.log.info("loading model", { model: e.id, weights_mib: mib(e.plan.weightsBytes), kv_budget_mib: mib(e.plan.kvBytes) });
    e.loading = this.opts.loader
      .load(e.id, e.plan.kvBytes, warm)
      .then(
        ({ kvBytes }) => {
          e.state = "resident";
          e.kvBytes = Math.min(kvBytes, e.plan.kvBytes);
          e.loads++;
          e.loadedAt = Date.now();
          e.lastLoadMs = Math.round(performance.now() - started);
          this.opts.log.info("model loaded", { model: e.id, ms: e.lastLoadMs, resident_mib: mib(reserved(e)), used_mib: mib(this.usedBytes), budget_mib: mib(this.opts.budgetBytes) });
        },
        (err: unknown) => {
          e.state = "unloaded";
          e.lastError = oneLine(String((err as Error)?.message ?? err));
          e.failedAttempt = attempt;
          this.opts.log.error("model failed to load", { model: e.id, error: e.lastError });
          this.opts.onLoadFailed?.(e.id, e.lastError);
        },
      )
      .finally(() => {
        e.loading = null;
        this.wake();
      });
  }

  private async waitForRoom(e: Entry, deadline: number, signal?: AbortSignal): Promise<void> {
    const left = deadline - performance.now();
    const busy = () =>
      [...this.entries.values()]
        .filter((o) => o !== e && o.state !== "unloaded")
        .map((o) => `${o.id} (${o.state === "resident" ? (o.active > 0 ? `${o.active} in flight` : "pinned") : o.state})`)
        .join(", ");
    const refuse = () =>
      new EngineUnavailableError(
        `No memory to load the model ${e.id} within ${Math.round(this.opts.waitMs / 1000)} s: it needs about ${formatBytes(e.plan.weightsBytes + e.plan.kvBytes)}, ${formatBytes(this.opts.budgetBytes - this.usedBytes)} of the ${formatBytes(this.opts.budgetBytes)} budget is free, and the other models are in use: ${busy()}. Retry later.`,
        Math.max(1, Math.ceil(this.opts.waitMs / 4000)),
        "insufficient_memory",
      );
    if (left <= 0) throw refuse();
    await new Promise<void>((resolve, reject) => {
      const done = () => {
        clearTimeout(timer);
        this.waiters.delete(done);
        signal?.removeEventListener("abort", aborted);
        resolve();
      };
      const aborted = () => {
        done();
        reject(new EngineUnavailableError("The request was cancelled while its model waited for memory.", 1, "cancelled"));
      };
      const timer = setTimeout(() => {
        done();
        reject(refuse());
      }, left);
      this.waiters.add(done);
      signal?.addEventListener("abort", aborted, { once: true });
    });
  }

  private wake() {
    const all = [...this.waiters];
    this.waiters.clear();
    for (const w of all) w();
  }

  private unload(e: Entry, reason: string, evicted = false): Promise<void> {
    if (e.unloading) return e.unloading;
    if (e.state !== "resident") {
      if (e.gone && e.state === "unloaded") this.entries.delete(e.id);
      return Promise.resolve();
    }
    e.state = "unloading";
    if (evicted) e.evictions++;
    this.opts.log.info("unloading model", { model: e.id, reason });
    e.unloading = this.opts.loader
      .unload(e.id)
      .catch((err: unknown) => this.opts.log.error("model unload failed", { model: e.id, error: String((err as Error)?.message ?? err) }))
      .finally(() => {
        e.state = "unloaded";
        e.unloading = null;
        e.kvBytes = e.plan.kvBytes;
        if (e.gone) this.entries.delete(e.id);
        this.wake();
      });
    return e.unloading;
  }
}

const mib = (b: number) => Math.round(b / 2 ** 20);
const oneLine = (s: string) => (s.split("\n")[0] ?? s).slice(0, 500);

function loadFailed(id: string, error: string): EngineUnavailableError {
  return new EngineUnavailableError(`The model ${id} could not be loaded: ${error}`, 30, "model_load_failed");
}
