// Where a model worker gets the grammars of its requests. Compiling happens on a thread of its own
// (compile-worker.ts), never on the decode loop: the loop only waits for a promise. Grammars are
// cached by the canonical form of what produced them, with a memory bound; refusals are cached
// too, so a hostile schema sent again costs nothing. Jobs queue per fairness key (the account)
// and are taken in turn, so one account's slow schemas delay another's by at most one job; a
// job whose clients all left is withdrawn, or cancelled mid-compile through a shared flag.
import {
  adoptCompletionTables,
  adoptRuleTables,
  type BuiltInPart,
  canonicalJsonWithin,
  completionTablesBytes,
  type CompileLimits,
  type CompletionTables,
  type Grammar,
  ruleTablesBytes,
  SchemaLimitError,
} from "../../structured/index.ts";
import { EngineBusyError, EngineRequestError } from "../types.ts";
import type { CompileReply } from "./compile-protocol.ts";
import type { ModelRunner } from "./model-runner.ts";
import type { WireRequest } from "./protocol.ts";
import { modelStructure, planStructure, requestStructure, type RequestStructure, type StructureSpec } from "./structured-support.ts";

/** How the scheduler obtains a request's structure. */
export interface StructureSource {
  /**
   * The grammar and tool parsing of a request. `key` is the canonical text of what decides the
   * grammar (computed by the engine host), or null to compute it here. Rejects with
   * EngineRequestError (the schema's fault) or EngineBusyError (too many compiles waiting).
   */
  resolve(rid: number, request: WireRequest, key: string | null): Promise<RequestStructure>;
  /** The client of `rid` left: its wait ends, and its job stops when nobody else waits for it. */
  cancel(rid: number): void;
  close?(): void;
  stats?(): { cachedBytes: number; compiled: number; refused: number; heapBytes: number; builtInBytes: number };
}

/** Compiles in this thread, synchronously (tests and benchmarks that drive a scheduler directly). */
export function inlineStructures(model: ModelRunner): StructureSource {
  return { resolve: async (_rid, request) => requestStructure(request, model), cancel() {} };
}

export interface CompilerOptions {
  limits: CompileLimits;
  /** Compilations running now in the process, all models (Int32; see structured's CompileShare): each job counts itself while it runs. */
  compiling?: SharedArrayBuffer;
  /** Memory for cached grammars (their transition tables), bytes. */
  cacheBytes: number;
  /** The compile thread's entry and its arguments. */
  worker: { url: string | URL; argv: string[] };
  log: (level: "info" | "warn" | "error", msg: string, fields?: Record<string, unknown>) => void;
  /** Jobs that may wait in all (more: EngineBusyError), and per fairness key. */
  maxQueued?: number;
  maxQueuedPerKey?: number;
}

interface Waiter {
  resolve: (g: Grammar | null) => void;
  reject: (e: Error) => void;
}

interface Job {
  id: number;
  key: string;
  fairness: string;
  spec: StructureSpec;
  param: string;
  waiters: Map<number, Waiter>;
  running: boolean;
}

/** A refusal remembered by key: the message and code of its 400. */
interface Refusal {
  message: string;
  param: string;
  code: string;
}

const REFUSALS_KEPT = 512;
const GRAMMARS_KEPT = 256;
/**
 * A compile thread idle this long is ended (the next schema starts a new one, in tens of
 * milliseconds): compiling a large schema leaves its heap large, and only ending it gives that back.
 */
const IDLE_THREAD_MS = 10_000;

/** Bytes a grammar holds (its transition tables dominate; the per-rule automata it keeps too). */
export function grammarBytes(g: Grammar): number {
  let n = g.next.byteLength + g.hasBytes.byteLength + g.byteCount.byteLength + g.final.byteLength;
  n += g.callOffset.byteLength + g.callStart.byteLength + g.callReturn.byteLength + g.ruleOf.byteLength + g.ruleBase.byteLength;
  for (const r of g.leafRules) if (r) n += r.next.byteLength + r.final.byteLength;
  return n + 256;
}

export class ThreadedStructures implements StructureSource {
  private readonly grammars = new Map<string, { grammar: Grammar | null; bytes: number }>();
  private grammarBytes = 0;
  private readonly refusals = new Map<string, Refusal>();
  private readonly jobs = new Map<string, Job>();
  private readonly byRid = new Map<number, Job>();
  /** Queued jobs per fairness key, and the keys in turn order. */
  private readonly queues = new Map<string, Job[]>();
  private turn: string[] = [];
  private running: Job | null = null;
  private runningTimer: ReturnType<typeof setTimeout> | null = null;
  private idleTimer: ReturnType<typeof setTimeout> | null = null;
  private worker: Worker | null = null;
  private readonly cancelFlag = new SharedArrayBuffer(4);
  /** The process's count of compilations running (CompilerOptions.compiling), as an Int32 view. */
  private readonly compiling: Int32Array | null;
  private nextJob = 1;
  /** The compile thread's heap as of its last reply. */
  private heapBytes = 0;
  private queued = 0;
  private closed = false;
  /** The model's built-in budget tables received so far (shared memory), and whether they are all there. */
  private readonly builtIns: BuiltInPart[] = [];
  private builtInsDone = false;
  /** Counters for the model's stats. */
  readonly counts = { compiled: 0, refused: 0, cancelled: 0, cacheHits: 0, timedOut: 0, threadRestarts: 0 };

  constructor(
    private readonly model: ModelRunner,
    private readonly opts: CompilerOptions,
  ) {
    this.compiling = opts.compiling ? new Int32Array(opts.compiling) : null;
  }

  stats() {
    const builtInBytes = this.builtIns.reduce((n, p) => n + ruleTablesBytes(p.tables), 0);
    return { cachedBytes: this.grammarBytes, compiled: this.counts.compiled, refused: this.counts.refused, heapBytes: this.heapBytes, builtInBytes };
  }

  /**
   * Starts the compile thread now, at model load, so that it computes the model's built-in budget
   * tables (json_object's and the formats', structured/built-in-tables.ts) before requests need
   * them: in the background, between compile jobs, at the thread's low priority. Until a part
   * arrives, budgets search as they would without it.
   */
  prepareBuiltIns(): void {
    if (!this.closed) this.thread();
  }

  async resolve(rid: number, request: WireRequest, key: string | null): Promise<RequestStructure> {
    const plan = planStructure(request, this.model);
    if (!plan.spec) return { grammar: null, toolSyntax: null };
    const spec = plan.spec;
    const param = spec.kind === "format" ? "response_format.json_schema.schema" : "tools";
    let base = key;
    if (base === null) {
      base = canonicalJsonWithin([request.responseFormat ?? null, request.tools ?? null, request.toolChoice ?? null, request.parallelToolCalls ?? null], this.opts.limits.maxSchemaBytes);
      if (base === null) throw new EngineRequestError(`${new SchemaLimitError("size", this.opts.limits.maxSchemaBytes).message}.`, param, "schema_too_complex");
    }
    const full = `${spec.kind === "tools" ? spec.syntax : "-"}|${base}`;
    const hit = this.grammars.get(full);
    if (hit) {
      // Most recently used last: the oldest is dropped first.
      this.grammars.delete(full);
      this.grammars.set(full, hit);
      this.counts.cacheHits++;
      return { grammar: hit.grammar, toolSyntax: plan.toolSyntax };
    }
    const refused = this.refusals.get(full);
    if (refused) {
      this.counts.cacheHits++;
      throw new EngineRequestError(refused.message, refused.param, refused.code);
    }
    const grammar = await new Promise<Grammar | null>((resolve, reject) => {
      let job = this.jobs.get(full);
      if (!job) {
        const fairness = request.fairnessKey ?? "";
        const mine = this.queues.get(fairness)?.length ?? 0;
        if (this.queued >= (this.opts.maxQueued ?? 64) || mine >= (this.opts.maxQueuedPerKey ?? 8)) {
          reject(new EngineBusyError(`Too many schemas are waiting to be compiled for the model ${this.model.info.id}${mine > 0 ? " from this account" : ""}. Retry later.`, 1));
          return;
        }
        job = { id: this.nextJob++, key: full, fairness, spec, param, waiters: new Map(), running: false };
        this.jobs.set(full, job);
        this.enqueue(job);
      }
      job.waiters.set(rid, { resolve, reject });
      this.byRid.set(rid, job);
      this.pump();
    });
    return { grammar, toolSyntax: plan.toolSyntax };
  }

  cancel(rid: number): void {
    const job = this.byRid.get(rid);
    if (!job) return;
    this.byRid.delete(rid);
    const w = job.waiters.get(rid);
    job.waiters.delete(rid);
    w?.reject(new EngineRequestError("The request was cancelled while its schema compiled.", null, "cancelled"));
    if (job.waiters.size > 0) return;
    this.counts.cancelled++;
    if (job.running) Atomics.store(new Int32Array(this.cancelFlag), 0, job.id);
    else this.dequeue(job);
  }

  close(): void {
    this.closed = true;
    if (this.running) this.countRunning(-1);
    this.running = null;
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.worker?.terminate();
    this.worker = null;
  }

  private enqueue(job: Job) {
    let q = this.queues.get(job.fairness);
    if (!q) {
      this.queues.set(job.fairness, (q = []));
      this.turn.push(job.fairness);
    }
    q.push(job);
    this.queued++;
  }

  private dequeue(job: Job) {
    const q = this.queues.get(job.fairness);
    const i = q?.indexOf(job) ?? -1;
    if (i < 0) return;
    q!.splice(i, 1);
    this.queued--;
    this.jobs.delete(job.key);
    if (q!.length === 0) {
      this.queues.delete(job.fairness);
      this.turn = this.turn.filter((k) => k !== job.fairness);
    }
  }

  /** Starts the next job, taking the fairness keys in turn. */
  private pump() {
    if (this.running || this.closed) return;
    if (this.turn.length === 0) {
      this.endWhenIdle();
      return;
    }
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = null;
    const fairness = this.turn.shift()!;
    const q = this.queues.get(fairness)!;
    const job = q.shift()!;
    this.queued--;
    if (q.length > 0) this.turn.push(fairness);
    else this.queues.delete(fairness);
    job.running = true;
    this.running = job;
    this.countRunning(1);
    const worker = this.thread();
    worker.postMessage({ type: "compile", job: job.id, spec: job.spec, limits: this.opts.limits });
    // The thread checks its CPU time itself; this catches a compile stuck where it does not look,
    // with room for a thread at low priority that waits long for a CPU on a busy machine.
    const grace = 9 * this.opts.limits.maxMillis + 5000;
    this.runningTimer = setTimeout(() => {
      this.opts.log("warn", "schema compile thread did not answer in time (starved of CPU, or stuck): restarting it", { model: this.model.info.id, ms: this.opts.limits.maxMillis + grace });
      this.counts.timedOut++;
      this.restartThread();
      this.finish(job, null, { message: `${new SchemaLimitError("time", this.opts.limits.maxMillis).message}.`, param: job.param, code: "schema_too_complex" });
    }, this.opts.limits.maxMillis + grace);
  }

  private countRunning(d: 1 | -1) {
    if (this.compiling) Atomics.add(this.compiling, 0, d);
  }

  private thread(): Worker {
    if (this.worker) return this.worker;
    const w = new Worker(this.opts.worker.url, { argv: this.opts.worker.argv } as WorkerOptions);
    w.addEventListener("message", (e: MessageEvent<CompileReply>) => this.onReply(e.data));
    w.addEventListener("error", (e) => this.opts.log("error", "schema compile thread failed", { model: this.model.info.id, error: (e as ErrorEvent).message }));
    w.addEventListener("close", () => {
      if (this.worker !== w) return;
      // Died (out of memory, or a bug): the job it ran is refused, the next starts a new thread.
      this.worker = null;
      const job = this.running;
      if (job) this.finish(job, null, { message: "The schema could not be compiled: the compiler ran out of resources on it. Simplify the schema.", param: job.param, code: "schema_too_complex" });
    });
    // planStructure built the model's vocabulary before any job could start a thread.
    w.postMessage({ type: "init", cancel: this.cancelFlag, compiling: this.opts.compiling ?? null, vocab: modelStructure(this.model).shared, builtIns: this.builtIns, builtInsDone: this.builtInsDone });
    this.worker = w;
    return w;
  }

  private endWhenIdle() {
    // An idle thread is still busy with the built-in tables until they are all done.
    if (!this.worker || this.idleTimer || !this.builtInsDone) return;
    this.idleTimer = setTimeout(() => {
      this.idleTimer = null;
      if (this.running || this.turn.length > 0) return;
      // A pure JavaScript thread (no native calls): terminating it is safe at any point.
      const w = this.worker;
      this.worker = null;
      this.heapBytes = 0;
      w?.terminate();
    }, IDLE_THREAD_MS);
    this.idleTimer.unref?.();
  }

  private restartThread() {
    const w = this.worker;
    this.worker = null;
    this.counts.threadRestarts++;
    w?.terminate();
  }

  private onReply(m: CompileReply) {
    if (m.type === "built-in") {
      // Budgets of this thread's grammars take them from their next search on (rule-tables.ts).
      adoptRuleTables(modelStructure(this.model).vocab, m.part.tables);
      this.builtIns.push(m.part);
      return;
    }
    this.heapBytes = m.heapBytes;
    if (m.type === "built-ins-done") {
      this.builtInsDone = true;
      const { builtInBytes } = this.stats();
      const ms = this.builtIns.reduce((n, p) => n + p.ms, 0);
      this.opts.log("info", "budget tables of json_object and the built-in formats computed", { model: this.model.info.id, ms: Math.round(ms), bytes: builtInBytes });
      if (!this.running) this.pump();
      return;
    }
    const job = this.running;
    if (!job || job.id !== m.job) return;
    if (m.type === "compiled") {
      this.counts.compiled++;
      // Matchers of this grammar start from the tables: admitting its requests searches nothing.
      if (m.grammar && m.budget) adoptCompletionTables(m.grammar, m.budget);
      this.finish(job, m.grammar, null, undefined, m.budget);
      return;
    }
    const f = m.failure;
    if (f.kind === "cancelled") this.finish(job, null, null, new EngineRequestError("The request was cancelled while its schema compiled.", null, "cancelled"));
    else if (f.kind === "refused") this.finish(job, null, { message: f.message, param: job.param, code: f.code });
    else {
      this.opts.log("error", "schema compilation failed", { model: this.model.info.id, error: f.message });
      this.finish(job, null, null, new Error("internal error while compiling the schema"));
    }
  }

  /** Ends the running job: a grammar, a refusal (remembered) or another error for its waiters. */
  private finish(job: Job, grammar: Grammar | null, refusal: Refusal | null, error?: Error, budget: CompletionTables | null = null) {
    if (this.running === job) {
      this.running = null;
      this.countRunning(-1);
      if (this.runningTimer) clearTimeout(this.runningTimer);
      this.runningTimer = null;
    }
    this.jobs.delete(job.key);
    for (const rid of job.waiters.keys()) this.byRid.delete(rid);
    if (refusal) {
      this.counts.refused++;
      this.refusals.set(job.key, refusal);
      if (this.refusals.size > REFUSALS_KEPT) this.refusals.delete(this.refusals.keys().next().value!);
      for (const w of job.waiters.values()) w.reject(new EngineRequestError(refusal.message, refusal.param, refusal.code));
    } else if (error) {
      for (const w of job.waiters.values()) w.reject(error);
    } else {
      this.remember(job.key, grammar, budget);
      for (const w of job.waiters.values()) w.resolve(grammar);
    }
    job.waiters.clear();
    this.pump();
  }

  private remember(key: string, grammar: Grammar | null, budget: CompletionTables | null) {
    const bytes = (grammar ? grammarBytes(grammar) : 64) + (budget ? completionTablesBytes(budget) : 0);
    // One grammar larger than the whole cache is used once and not kept.
    if (bytes > this.opts.cacheBytes) return;
    this.grammars.set(key, { grammar, bytes });
    this.grammarBytes += bytes;
    while (this.grammarBytes > this.opts.cacheBytes || this.grammars.size > GRAMMARS_KEPT) {
      const [oldest, entry] = this.grammars.entries().next().value!;
      this.grammars.delete(oldest);
      this.grammarBytes -= entry.bytes;
    }
  }
}
