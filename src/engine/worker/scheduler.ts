// The model's continuous-batching loop. Each round: drop cancelled requests, admit queued ones as
// KV memory allows (in the queue's order, see fair-queue.ts: by priority, then account by account
// by tokens served; or first come first served), prefill a bounded number of prompt tokens
// (chunked, so running streams keep flowing while a long prompt is read), then advance every
// decoding choice by one token in one batched forward pass. A finished or cancelled choice frees
// its cache at once; the batch never has to drain.
//
// When the request to admit next finds no memory, running requests may be preempted for it (fair
// order only): those of a lower priority, and those of an account holding more KV memory than the
// waiting request's account would after admission (so two accounts never preempt each other back
// and forth). A preempted request waits again in front of its account's later requests; when it
// is admitted again its sequences are recomputed from their tokens (prompt and tokens generated so
// far) and decoding goes on from the token it had sampled: its client sees a pause, nothing else.
// So an account's flood delays another account's request by about one round: the round running
// when it arrives, then its admission (preempting if need be) at the start of the next, whose
// prefill gives its first token when its prompt fits one prefill chunk.
import { KvBudget, defaultKvBudgetBytes } from "../batching/budget.ts";
import { FusedKvBackend } from "../batching/fused-kv.ts";
import type { KvBackend, PrefixKv } from "../batching/kv.ts";
import { PaddedKvBackend } from "../batching/padded-kv.ts";
import { PrefixCache } from "../batching/prefix-cache.ts";
import { heapSize } from "bun:jsc";
import { EngineBusyError, EngineRequestError, EngineUnavailableError, type GenerationEvent, type ModelStats, type SpeculateMode } from "../types.ts";
import { ChoiceStream } from "./choice.ts";
import { FairQueue, type QueueOrder } from "./fair-queue.ts";
import type { ModelRunner } from "./model-runner.ts";
import { mergeImageFeatures } from "../vision/vision-model.ts";
import type { WireRequest } from "./protocol.ts";
import { prefixKey } from "./prefix-key.ts";
import { NgramHistory, ownerSalt } from "../speculation/history.ts";
import { NgramDrafter } from "../speculation/ngram.ts";
import { ChoiceSpeculation, MAX_DRAFT, SpeculationPlanner, type Plan, type PlanRow } from "../speculation/planner.ts";
import { inlineStructures, type StructureSource } from "./structure-compiler.ts";
import { epochMs, RequestClock, type WorkerTimings } from "./request-clock.ts";
import { advanceChoice, keyed, replayKey, type ChoiceRun, type Job, type Row } from "./jobs.ts";

export interface JobSink {
  events(rid: number, events: GenerationEvent[]): void;
  /**
   * The request ended; `error` when it failed, with `code` when the request itself caused it;
   * `timings`: where its time went.
   */
  done(rid: number, error?: string, code?: string, timings?: WorkerTimings): void;
  /**
   * The end of a round (or of the work before going idle): what was reported may be sent on.
   * `urgent` when it must go now: a request's first token or its end is in it, or the scheduler
   * is about to go idle or to read a prompt (a long step); otherwise the sink may hold it briefly
   * to send several rounds together.
   */
  endRound?(urgent: boolean): void;
  stats?(stats: ModelStats): void;
}

export interface SchedulerOptions {
  /** KV memory for running sequences and the prefix cache; 0 or absent = a share of the machine's. */
  kvBudgetBytes?: number;
  /**
   * At most this many sequences at the model's full context (an automatic budget: a small model
   * is not given memory it can never fill). Absent: no cap.
   */
  kvCapSequences?: number;
  /**
   * Requests that may wait for memory; past it a new request gets EngineUnavailableError (the
   * model is full). 0 or absent = 64.
   */
  maxQueue?: number;
  /**
   * The part of the queue one fairness key may hold; its requests past it get EngineBusyError
   * (over its share), leaving the rest to other keys. Absent: 3/4.
   */
  keyQueueShare?: number;
  /** Admission order (see fair-queue.ts); absent: fair. */
  order?: QueueOrder;
  /** Prompt tokens prefilled per round (the rest waits for the next round). */
  prefillChunk?: number;
  /** Prompts shorter than this are not kept in the prefix cache. */
  prefixMinTokens?: number;
  /** Speculative decoding: "ngram" (prompt lookup, the default) or "off". */
  speculate?: SpeculateMode;
  /** When to speculate: as measured to pay (the default), or at every round (tests; see SpeculationPlanner). */
  speculatePolicy?: "measured" | "always";
  /** Wraps the KV cache the scheduler makes (the warm-up's, which skips most model runs). */
  wrapBackend?: (backend: KvBackend) => KvBackend;
  /** Where grammars come from (absent: compiled in this thread, for tests and benchmarks). */
  structures?: StructureSource;
  /** The clock of requests' timings, epoch ms (absent: epochMs; tests that control time give their own). */
  clock?: () => number;
}

export class Scheduler {
  readonly backend: KvBackend;
  readonly budget: KvBudget;
  readonly prefix: PrefixCache;
  private readonly maxQueue: number;
  private readonly prefillChunk: number;
  private readonly queue: FairQueue<Job>;
  private readonly keyQueueLimit: number;
  private active: Job[] = [];
  private admissions = 0;
  private wake: (() => void) | null = null;
  private running = true;
  /** This round started or ended a request (see JobSink.endRound). */
  private urgent = false;
  private counters = {
    promptTokensComputed: 0,
    generatedTokens: 0,
    decodeSteps: 0,
    lastBatchSize: 0,
    rejectedBusy: 0,
    rejectedFull: 0,
    preemptions: 0,
    recomputedTokens: 0,
    draftTokens: 0,
    acceptedTokens: 0,
  };
  /** Null when speculation is off or the KV cache cannot verify. */
  readonly speculation: SpeculationPlanner | null;
  /** With speculation: each account's earlier sequences on this model, drafts for its next ones. */
  private readonly history: NgramHistory | null;
  /** The last decode round: when it began and ended, the prompt tokens computed by then, its batch, width (0: plain) and tokens. */
  private lastRound = { begin: 0, end: 0, promptTokens: -1, rows: 0, width: 0, tokens: 0 };
  private lastStats = "";
  private lastStatsAt = 0;
  readonly structures: StructureSource;
  /** Requests being admitted (prompt read, grammar compiled), and whether their client left meanwhile. */
  private readonly admitting = new Map<number, { cancelled: boolean }>();
  private readonly now: () => number;

  constructor(
    private readonly model: ModelRunner,
    private readonly sink: JobSink,
    opts: SchedulerOptions = {},
  ) {
    const decoder = model.decoder;
    let budget = opts.kvBudgetBytes || defaultKvBudgetBytes();
    if (opts.kvCapSequences) {
      // Sized like the backends size a full-context sequence (the two agree on bytes per position).
      budget = Math.min(budget, opts.kvCapSequences * decoder.spec.layers.length * 2 * model.info.contextLength * decoder.positionBytes);
    }
    this.budget = new KvBudget(budget);
    const backend = decoder.spec.sharedBuffer ? new FusedKvBackend(decoder, this.budget.totalBytes) : new PaddedKvBackend(decoder);
    this.backend = opts.wrapBackend ? opts.wrapBackend(backend) : backend;
    this.prefix = new PrefixCache(this.budget, opts.prefixMinTokens ?? 16, Math.floor(this.budget.totalBytes / 2));
    this.maxQueue = opts.maxQueue || 64;
    this.keyQueueLimit = Math.max(1, Math.ceil(this.maxQueue * (opts.keyQueueShare ?? 0.75)));
    this.queue = new FairQueue(opts.order ?? "fair");
    this.prefillChunk = opts.prefillChunk ?? 256;
    this.speculation = (opts.speculate ?? "ngram") === "ngram" && this.backend.canVerify ? new SpeculationPlanner(opts.speculatePolicy) : null;
    this.history = this.speculation ? new NgramHistory() : null;
    this.structures = opts.structures ?? inlineStructures(model);
    this.now = opts.clock ?? epochMs;
  }

  /**
   * Validates and queues; resolves with the prompt's token count or throws a request/busy error.
   * `structureKey`: the canonical text of what decides the request's grammar, when known.
   */
  async admit(rid: number, request: WireRequest, structureKey: string | null = null): Promise<number> {
    const admission = { cancelled: false };
    this.admitting.set(rid, admission);
    try {
      return await this.admitNow(rid, request, structureKey, admission);
    } finally {
      this.admitting.delete(rid);
    }
  }

  private async admitNow(rid: number, request: WireRequest, structureKey: string | null, admission: { cancelled: boolean }): Promise<number> {
    const gone = () => new EngineRequestError("The request was cancelled before it started.", null, "cancelled");
    const received = this.now();
    const { ids: prompt, images, thinking } = await this.model.prompt(request);
    if (admission.cancelled) throw gone();
    const read = this.now();
    // Compiled on its own thread: the rounds of the running requests go on meanwhile.
    const structure = await this.structures.resolve(rid, request, structureKey);
    if (admission.cancelled) throw gone();
    const compiled = this.now();
    const maxNew = Math.min(request.maxTokens ?? Number.MAX_SAFE_INTEGER, this.model.info.contextLength - prompt.length);
    const need = request.n * this.backend.sequenceBytes(this.backend.capacityFor(prompt.length + maxNew));
    if (need > this.budget.totalBytes) {
      throw new EngineRequestError(
        `This request needs ${mib(need)} MiB of KV cache (n=${request.n}, up to ${prompt.length + maxNew} tokens each), ` +
          `more than this model's ${mib(this.budget.totalBytes)} MiB. Lower n or max_tokens.`,
        request.n > 1 ? "n" : "max_tokens",
        "kv_cache_exceeded",
      );
    }
    const key = request.fairnessKey ?? "";
    // Roughly one round of the running requests per queued one ahead; at least a second.
    const retryAfter = Math.max(1, Math.ceil(this.queue.length / Math.max(1, this.active.length)));
    if (this.queue.waitingFor(key) >= this.keyQueueLimit) {
      this.counters.rejectedBusy++;
      throw new EngineBusyError(
        `Too many of your requests are waiting for the model ${this.model.info.id} (${this.queue.waitingFor(key)}, the most one account may have waiting). Retry after some of them have started.`,
        retryAfter,
      );
    }
    if (this.queue.length >= this.maxQueue) {
      this.counters.rejectedFull++;
      throw new EngineUnavailableError(`The model ${this.model.info.id} is at capacity (${this.queue.length} requests waiting). Retry later.`, retryAfter, "server_busy");
    }
    const choices: ChoiceRun[] = [];
    for (let index = 0; index < request.n; index++) {
      choices.push({ stream: new ChoiceStream(index, request, this.model, maxNew, structure, thinking), seq: null, next: null });
    }
    this.queue.push({
      rid,
      request,
      prompt,
      images,
      key: prefixKey(prompt, images),
      maxNew,
      state: "queued",
      choices,
      cancelled: false,
      out: [],
      fairKey: key,
      priority: request.priority ?? 0,
      arrival: this.queue.stamp(),
      startedOnce: false,
      replay: null,
      charged: 0,
      admittedAt: 0,
      clock: new RequestClock(compiled, { start: received, end: read }, structure.grammar ? { start: read, end: compiled } : null),
    });
    this.wake?.();
    return prompt.length;
  }

  cancel(rid: number): void {
    const admission = this.admitting.get(rid);
    if (admission) {
      admission.cancelled = true;
      this.structures.cancel(rid);
    }
    const job = [...this.queue.items()].find((j) => j.rid === rid) ?? this.active.find((j) => j.rid === rid);
    if (job) job.cancelled = true;
    this.wake?.();
  }

  stop(): void {
    this.running = false;
    this.wake?.();
  }

  stats(): ModelStats {
    const compiles = this.structures.stats?.();
    return {
      model: this.model.info.id,
      runningRequests: this.active.length,
      runningSequences: this.active.reduce((n, j) => n + j.choices.filter((c) => c.seq !== null).length, 0),
      queuedRequests: this.queue.length,
      queueLimit: this.maxQueue,
      lastBatchSize: this.counters.lastBatchSize,
      kvBudgetBytes: this.budget.totalBytes,
      kvUsedBytes: this.budget.usedBytes,
      prefixCacheBytes: this.prefix.usedBytes,
      prefixCacheEntries: this.prefix.size,
      prefixCacheHits: this.prefix.hits,
      prefixCacheReusedTokens: this.prefix.reusedTokens,
      promptTokensComputed: this.counters.promptTokensComputed,
      generatedTokens: this.counters.generatedTokens,
      decodeSteps: this.counters.decodeSteps,
      hostToDeviceBytes: this.model.decoder.traffic.toDevice,
      deviceToHostBytes: this.model.decoder.traffic.toHost,
      draftTokens: this.counters.draftTokens,
      acceptedDraftTokens: this.counters.acceptedTokens,
      rejectedBusy: this.counters.rejectedBusy,
      rejectedFull: this.counters.rejectedFull,
      preemptions: this.counters.preemptions,
      recomputedTokens: this.counters.recomputedTokens,
      grammarCacheBytes: compiles?.cachedBytes ?? 0,
      schemasCompiled: compiles?.compiled ?? 0,
      schemasRefused: compiles?.refused ?? 0,
      workerHeapBytes: heapSize(),
      compileHeapBytes: compiles?.heapBytes ?? 0,
      builtInTablesBytes: compiles?.builtInBytes ?? 0,
    };
  }

  async run(): Promise<void> {
    while (this.running) {
      this.dropCancelled();
      this.startQueued();
      if (this.active.length === 0) {
        this.sink.endRound?.(true);
        this.publishStats(true);
        // Idle a while after work: a full collection gives back what the burst left (prompts of
        // megabytes, grammars, masks) instead of holding it until the next one.
        const collect = setTimeout(() => Bun.gc(true), IDLE_GC_MS);
        await new Promise<void>((resolve) => (this.wake = resolve));
        clearTimeout(collect);
        this.wake = null;
        continue;
      }
      if (this.active.some((j) => j.state === "prefill")) this.sink.endRound?.(true);
      await this.prefillRound();
      await this.decodeRound();
      for (const job of this.active) this.flush(job);
      this.sink.endRound?.(this.urgent);
      this.urgent = false;
      this.publishStats(false);
      // Let cancel and start messages in between rounds.
      await new Promise<void>((r) => setImmediate(r));
    }
    this.sink.endRound?.(true);
  }

  private dropCancelled() {
    for (const job of [...this.queue.items()].filter((j) => j.cancelled)) {
      this.queue.take(job);
      // A preempted request has sent events: its choices end as a running request's would.
      if (job.startedOnce) {
        for (const c of job.choices) c.stream.finish("stop", job.out);
        this.flush(job);
      }
      this.sink.done(job.rid, undefined, undefined, job.clock.timings(this.now()));
    }
    for (const job of this.active.filter((j) => j.cancelled)) {
      for (const c of job.choices) this.endChoice(c, job, false);
      for (const c of job.choices) c.stream.finish("stop", job.out);
      this.retire(job);
    }
  }

  /** The cache capacity of each of a job's sequences, and the bytes it reserves when admitted. */
  private reservation(job: Job): { capacity: number; need: number } {
    const capacity = this.backend.capacityFor(job.prompt.length + job.maxNew);
    // A resumed request needs sequences for its choices still going only.
    const sequences = job.replay ? job.choices.filter((c) => !c.stream.finished).length : job.choices.length;
    return { capacity, need: this.backend.sequenceBytes(capacity) * sequences };
  }

  /** Frees prefix-cache entries until `need` bytes are free; false when even that is not enough. */
  private makeRoom(need: number): boolean {
    return this.budget.freeBytes + this.prefix.usedBytes >= need && this.prefix.makeRoom(need);
  }

  /** Moves queued requests to running while their KV reservation fits, in the queue's order. */
  private startQueued() {
    this.chargeService();
    for (let job = this.queue.peek(); job; job = this.queue.peek()) {
      const { capacity, need } = this.reservation(job);
      if (!this.makeRoom(need) && !this.preemptFor(job, need)) return;
      this.budget.tryReserve(need);
      this.queue.take(job);
      this.queue.started(job.fairKey);
      job.admittedAt = ++this.admissions;
      job.clock.admit(this.now());
      job.state = "prefill";
      this.active.push(job);
      if (job.replay) {
        for (const c of job.choices) {
          if (c.stream.finished) continue;
          c.seq = this.backend.open(capacity);
          if (job.images?.rope) c.seq.rope = job.images.rope;
          // The prompt (and maybe more) may still be in the prefix cache: only the rest is recomputed.
          const tokens = job.replay[c.stream.index]!;
          const hit = this.prefix.lookup(replayKey(job, tokens), tokens.length - 1, job.fairKey);
          if (hit) this.backend.restore(c.seq, hit.entry, hit.length);
        }
        continue;
      }
      for (const c of job.choices) {
        c.seq = this.backend.open(capacity);
        // Every choice decodes past the prompt at its length + the prompt's rope delta.
        if (job.images?.rope) c.seq.rope = job.images.rope;
      }
      const first = job.choices[0]!.seq!;
      const hit = this.prefix.lookup(job.key, job.prompt.length - 1, job.fairKey);
      if (hit) this.backend.restore(first, hit.entry, hit.length);
      // What the cache served is the request's cached_tokens (usage.prompt_tokens_details), once.
      if (!job.startedOnce) job.out.push({ type: "prompt", cachedTokens: hit?.length ?? 0 });
      job.startedOnce = true;
    }
  }

  /**
   * Preempts running requests so that `job` fits, when the rules allow (see the header): lower
   * priorities first, then the fairness key holding the most memory, its latest admitted request
   * first. Nothing is preempted unless it makes enough room.
   */
  private preemptFor(job: Job, need: number): boolean {
    if (this.queue.order !== "fair") return false;
    const held = new Map<string, number>();
    const bytes = new Map<Job, number>();
    for (const j of this.active) {
      const b = j.choices.reduce((n, c) => n + (c.seq ? this.backend.sequenceBytes(c.seq.capacity) : 0), 0);
      bytes.set(j, b);
      held.set(j.fairKey, (held.get(j.fairKey) ?? 0) + b);
    }
    const mine = held.get(job.fairKey) ?? 0;
    let room = this.budget.freeBytes + this.prefix.usedBytes;
    const victims: Job[] = [];
    while (room < need) {
      let pick: Job | null = null;
      for (const j of this.active) {
        if (j.fairKey === job.fairKey || victims.includes(j) || j.priority > job.priority) continue;
        const h = held.get(j.fairKey)!;
        // Same priority: only from a key that still holds at least what this one would.
        if (j.priority === job.priority && h - bytes.get(j)! < mine + need) continue;
        if (
          !pick ||
          j.priority < pick.priority ||
          (j.priority === pick.priority && (h > held.get(pick.fairKey)! || (h === held.get(pick.fairKey)! && j.admittedAt > pick.admittedAt)))
        ) {
          pick = j;
        }
      }
      if (!pick) return false;
      victims.push(pick);
      room += bytes.get(pick)!;
      held.set(pick.fairKey, held.get(pick.fairKey)! - bytes.get(pick)!);
    }
    for (const v of victims) this.preempt(v);
    return this.makeRoom(need);
  }

  /** Frees a running request's memory and queues it again, to be recomputed when it resumes. */
  private preempt(job: Job) {
    this.chargeJob(job);
    if (job.state === "decode") {
      job.replay = job.choices.map((c) => (c.seq ? c.seq.tokens.slice() : null));
    }
    for (const c of job.choices) {
      const seq = c.seq;
      if (!seq) continue;
      c.seq = null;
      this.budget.release(this.backend.sequenceBytes(seq.capacity));
      this.backend.close(seq);
    }
    this.flush(job);
    this.active = this.active.filter((j) => j !== job);
    this.queue.ended(job.fairKey);
    job.state = "queued";
    this.queue.requeue(job);
    this.counters.preemptions++;
    job.clock.preempted();
  }

  /** Tokens served to a request so far: its prompt as far as it was read, and every token generated. */
  private served(job: Job): number {
    const seq = job.choices[0]!.seq;
    const prompt = job.state === "prefill" && !job.replay && seq ? Math.min(seq.tokens.length, job.prompt.length) : job.startedOnce ? job.prompt.length : 0;
    return prompt + job.choices.reduce((n, c) => n + c.stream.generated, 0);
  }

  /** Charges a request's key with what it was served since the last charge (recomputing is free). */
  private chargeJob(job: Job) {
    const served = this.served(job);
    if (served > job.charged) {
      this.queue.charge(job.fairKey, served - job.charged);
      job.charged = served;
    }
  }

  private chargeService() {
    for (const job of this.active) this.chargeJob(job);
  }

  /**
   * Up to `prefillChunk` tokens this round: prompts, and the tokens of resumed requests. Higher
   * priorities first, then the keys served the fewest tokens, then the earliest admitted.
   */
  private async prefillRound() {
    let room = this.prefillChunk;
    const order = this.active
      .filter((j) => j.state === "prefill")
      .sort((a, b) => b.priority - a.priority || this.queue.servedTo(a.fairKey) - this.queue.servedTo(b.fairKey) || a.admittedAt - b.admittedAt);
    for (const job of order) {
      if (room <= 0) break;
      if (job.state !== "prefill") continue;
      if (job.replay) {
        room -= await this.recompute(job, room);
        continue;
      }
      const seq = job.choices[0]!.seq!;
      const start = seq.tokens.length;
      const chunk = job.prompt.slice(start, start + room);
      let logits: Float32Array;
      try {
        logits = await this.backend.prefill(seq, chunk, await this.embeds(job, chunk, start));
      } catch (e) {
        this.fail(job, e);
        continue;
      }
      room -= chunk.length;
      this.counters.promptTokensComputed += chunk.length;
      if (seq.tokens.length < job.prompt.length) continue;
      try {
        this.beginDecoding(job, logits);
      } catch (e) {
        // One choice's token pipeline failed (e.g. nothing left allowed): that request ends, not the loop.
        this.fail(job, e);
      }
    }
  }

  /** A chunk's image features, for a prompt with images (its positions past the prompt have none). */
  private async embeds(job: Job, chunk: number[], start: number): Promise<Float32Array | undefined> {
    return job.images ? mergeImageFeatures(await this.model.decoder.embed(chunk), chunk.length, job.images, start) : undefined;
  }

  /**
   * Refills a resumed request's caches, up to `room` tokens; once every choice holds its tokens
   * again it decodes on from the token each had sampled. The tokens used.
   */
  private async recompute(job: Job, room: number): Promise<number> {
    let used = 0;
    let complete = true;
    for (const c of job.choices) {
      const seq = c.seq;
      if (!seq) continue;
      const tokens = job.replay![c.stream.index]!;
      const start = seq.tokens.length;
      const chunk = tokens.slice(start, start + room - used);
      if (chunk.length > 0) {
        try {
          await this.backend.prefill(seq, chunk, await this.embeds(job, chunk, start));
        } catch (e) {
          this.fail(job, e);
          return used;
        }
        used += chunk.length;
        this.counters.promptTokensComputed += chunk.length;
        this.counters.recomputedTokens += chunk.length;
      }
      if (seq.tokens.length < tokens.length) complete = false;
    }
    if (complete) {
      job.replay = null;
      job.state = "decode";
    }
    return used;
  }

  private beginDecoding(job: Job, logits: Float32Array) {
    const first = job.choices[0]!.seq!;
    let snapshot: PrefixKv | null = null;
    const promptKv = () => (snapshot ??= keyed(this.backend.snapshot(first, job.prompt.length), job.key, job.fairKey));
    if (job.prompt.length >= this.prefix.minTokens && !this.prefix.covers(job.key, job.fairKey)) this.prefix.insert(promptKv());
    // Taken before the first choice samples: it may finish at once (max_tokens 1) and free its cache.
    if (job.choices.length > 1) promptKv();
    const at = this.now();
    job.choices.forEach((c, i) => {
      if (i > 0) this.backend.restore(c.seq!, promptKv(), job.prompt.length);
      c.next = advanceChoice(c.stream, i === 0 ? logits : logits.slice(), job.out);
      job.clock.tokens(c.stream.index, at);
      this.counters.generatedTokens++;
      if (c.next === null) this.endChoice(c, job, true);
    });
    job.state = "decode";
    this.urgent = true;
    if (job.choices.every((c) => c.stream.finished)) this.retire(job);
  }

  /**
   * One batched forward pass: every decoding choice of every request advances one token, or, with
   * speculation, verifies its draft and advances by the accepted part and one token more.
   */
  private async decodeRound() {
    const batch: Row[] = [];
    for (const job of this.active) {
      if (job.state !== "decode") continue;
      for (const choice of job.choices) if (choice.next !== null && choice.seq) batch.push({ job, choice });
    }
    if (batch.length === 0) return;
    const planner = this.speculation;
    const begin = performance.now();
    // The work between two decode rounds with nothing else in between (no prompt read, no wait),
    // and the last round's whole cycle.
    const last = this.lastRound;
    if (planner && this.counters.promptTokensComputed === last.promptTokens && begin - last.end < 5) {
      planner.observeOverhead(begin - last.end);
      planner.observeCycle(last.rows, last.width, begin - last.begin, last.tokens);
    }
    const generated = this.counters.generatedTokens;
    // A round's cost counts from here: the lookups of drafts are part of it.
    const plan = planner?.speculating(batch.length) ? planner.plan(batch.map((r) => this.planRow(r))) : null;
    // Requests whose token pipeline failed (e.g. nothing left allowed): they end, not the loop.
    const failed = new Map<Job, unknown>();
    const ran = plan ? await this.verifyRound(batch, plan, begin, failed) : await this.plainRound(batch, begin, failed);
    // A failed run has ended its requests already.
    if (!ran) return;
    for (const [job, e] of failed) this.fail(job, e);
    for (const job of new Set(batch.map((b) => b.job))) {
      if (!failed.has(job) && job.choices.every((c) => c.stream.finished)) this.retire(job);
    }
    this.lastRound = {
      begin,
      end: performance.now(),
      promptTokens: this.counters.promptTokensComputed,
      rows: batch.length,
      width: plan ? plan.width : 0,
      tokens: this.counters.generatedTokens - generated,
    };
  }

  /** The backend's run for the batch; null (the batch's requests failed) when it throws. */
  private async tryRun<T>(batch: Row[], run: () => Promise<T>): Promise<T | null> {
    try {
      const out = await run();
      this.counters.decodeSteps++;
      this.counters.lastBatchSize = batch.length;
      return out;
    } catch (e) {
      for (const job of new Set(batch.map((b) => b.job))) this.fail(job, e);
      return null;
    }
  }

  /**
   * A decode step. Now and then, with speculation on, a few rows first look up a one-token
   * draft, to learn how drafts would fare without verifying any (see SpeculationPlanner).
   */
  private async plainRound(batch: Row[], begin: number, failed: Map<Job, unknown>): Promise<boolean> {
    const planner = this.speculation;
    const shadows = planner ? planner.shadowRows(batch.length) : 0;
    const first = shadows > 0 ? this.counters.decodeSteps % batch.length : 0;
    const guesses = [];
    for (let k = 0; k < shadows; k++) {
      const row = batch[(first + k) % batch.length]!;
      guesses.push({ row, draft: this.planRow(row).spec.drafter.propose(1) });
    }
    const logits = await this.tryRun(batch, () =>
      this.backend.decode(
        batch.map((b) => b.choice.seq!),
        batch.map((b) => b.choice.next!),
      ),
    );
    if (!logits) return false;
    const ran = performance.now();
    const at = this.now();
    let advanced = 0;
    batch.forEach(({ job, choice }, i) => {
      if (job.cancelled || failed.has(job)) return;
      try {
        choice.next = advanceChoice(choice.stream, logits[i]!, job.out);
      } catch (e) {
        failed.set(job, e);
        return;
      }
      job.clock.tokens(choice.stream.index, at);
      advanced++;
      this.counters.generatedTokens++;
      if (choice.next === null) this.endChoice(choice, job, true);
    });
    if (!planner) return true;
    planner.observeRound(batch.length, 0, ran - begin, performance.now() - ran, advanced);
    for (const { row, draft } of guesses) {
      if (draft.tokens.length > 0 && row.choice.next !== null && !failed.has(row.job)) planner.observeShadow(batch.length, row.choice.spec!, draft.match, draft.tokens[0] === row.choice.next);
    }
    return true;
  }

  /**
   * What the planner needs of a decoding choice. Its drafter holds the prompt and every token
   * sampled for it: brought up to date here, from the cache past the prompt (the tokens fed, all
   * of them kept ones) and the token about to be fed.
   */
  private planRow({ job, choice }: Row): PlanRow {
    const seq = choice.seq!;
    choice.spec ??= new ChoiceSpeculation(new NgramDrafter(job.prompt, [], this.history && { table: this.history, salt: ownerSalt(job.fairKey) }));
    const drafter = choice.spec.drafter;
    if (drafter.length < seq.tokens.length + 1) {
      for (let i = Math.max(drafter.length, job.prompt.length); i < seq.tokens.length; i++) drafter.push(seq.tokens[i]!);
      drafter.push(choice.next!);
    }
    const space = seq.capacity - seq.tokens.length;
    return { spec: choice.spec, room: Math.min(MAX_DRAFT, job.maxNew - choice.stream.generated - 1, space - 1), space };
  }

  /**
   * Feeds each choice's token and its draft in one run, then walks the positions in order,
   * sampling each from its logits exactly as a plain step would and accepting the draft token
   * only when the sample is that token. The first sample that differs is the choice's next token;
   * the cache forgets the positions after it. Nothing but the cache needs undoing: the choice's
   * sampler, grammar, penalties and stop matching only ever saw the tokens it kept.
   */
  private async verifyRound(batch: Row[], plan: Plan, begin: number, failed: Map<Job, unknown>): Promise<boolean> {
    const planner = this.speculation!;
    const lists = batch.map(({ choice }, i) => [choice.next!, ...plan.drafts[i]!]);
    const logits = await this.tryRun(batch, () =>
      this.backend.verify(
        batch.map((b) => b.choice.seq!),
        lists,
      ),
    );
    if (!logits) return false;
    const ran = performance.now();
    const at = this.now();
    let advanced = 0;
    batch.forEach(({ job, choice }, i) => {
      if (job.cancelled || failed.has(job)) return;
      const list = lists[i]!;
      const seq = choice.seq!;
      const base = seq.tokens.length - list.length;
      let used = 0;
      let next: number | null = null;
      try {
        while (used < list.length) {
          next = advanceChoice(choice.stream, logits[i]![used]!, job.out);
          used++;
          if (next === null || used === list.length || next !== list[used]) break;
        }
      } catch (e) {
        // The request ends (its cache with it); what it kept before this position was reported.
        failed.set(job, e);
        return;
      }
      advanced += used;
      job.clock.tokens(choice.stream.index, at, used);
      this.counters.generatedTokens += used;
      this.counters.draftTokens += list.length - 1;
      this.counters.acceptedTokens += used - 1;
      planner.observeDraft(choice.spec!, plan.matches[i]!, list.length - 1, used - 1, next !== null && used < list.length);
      // The cache keeps the fed token and the accepted drafts.
      this.backend.truncate(seq, base + used);
      choice.next = next;
      if (next === null) this.endChoice(choice, job, true);
    });
    planner.observeRound(batch.length, plan.width, ran - begin, performance.now() - ran, advanced);
    return true;
  }

  /** Frees a choice's cache; a completed one first leaves its conversation in the prefix cache. */
  private endChoice(c: ChoiceRun, job: Job, completed: boolean) {
    const seq = c.seq;
    if (!seq) return;
    c.seq = null;
    c.next = null;
    this.budget.release(this.backend.sequenceBytes(seq.capacity));
    // What the choice wrote becomes drafts for the account's next requests.
    if (this.history && seq.tokens.length > job.prompt.length) this.history.learn(ownerSalt(job.fairKey), seq.tokens, job.prompt.length);
    if (completed && c === job.choices[0] && seq.tokens.length >= this.prefix.minTokens) {
      // The prompt part by its key, then the generated tokens (ordinary ids).
      const key = [...job.key, ...seq.tokens.slice(job.key.length)];
      if (!this.prefix.covers(key, job.fairKey)) this.prefix.insert(keyed(this.backend.snapshot(seq, seq.tokens.length), key, job.fairKey));
    }
    this.backend.close(seq);
  }

  private fail(job: Job, e: unknown) {
    for (const c of job.choices) this.endChoice(c, job, false);
    this.retire(job, (e as Error).message ?? String(e), e instanceof EngineRequestError ? (e.code ?? undefined) : undefined);
  }

  private flush(job: Job) {
    if (job.out.length) {
      this.sink.events(job.rid, job.out);
      job.out = [];
    }
  }

  private retire(job: Job, error?: string, code?: string) {
    this.urgent = true;
    this.chargeJob(job);
    const before = this.active.length;
    this.active = this.active.filter((j) => j !== job);
    if (this.active.length < before) this.queue.ended(job.fairKey);
    for (const c of job.choices) this.endChoice(c, job, false);
    this.flush(job);
    this.sink.done(job.rid, error, code, job.clock.timings(this.now()));
  }

  /** At most every 250 ms while busy, and once on going idle, when something changed. */
  private publishStats(idle: boolean) {
    if (!this.sink.stats) return;
    const now = performance.now();
    if (!idle && now - this.lastStatsAt < 250) return;
    const s = this.stats();
    const key = JSON.stringify(s);
    if (key === this.lastStats) return;
    this.lastStats = key;
    this.lastStatsAt = now;
    this.sink.stats(s);
  }
}

const mib = (b: number) => Math.ceil(b / 2 ** 20);
const IDLE_GC_MS = 2000;
