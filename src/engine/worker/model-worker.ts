// Worker entry: owns one model. ONNX Runtime's runs happen here, off the HTTP thread.
import type { Decoder } from "../runtime/decoder.ts";
import { quiesceNativeCalls, shareNativeCallFlags } from "../../native-calls.ts";
import { EngineBusyError, EngineRequestError, EngineUnavailableError } from "../types.ts";
import { ModelRunner } from "./model-runner.ts";
import type { HostMessage, RejectInfo, WorkerMessage } from "./protocol.ts";
import { RoundBatcher } from "./round-batcher.ts";
import { Scheduler } from "./scheduler.ts";
import { ThreadedStructures } from "./structure-compiler.ts";
import { modelStructure } from "./structured-support.ts";
import { warmUp } from "./warm-up.ts";

declare const self: Worker;

const post = (m: WorkerMessage) => self.postMessage(m);
const rounds = new RoundBatcher((messages) => post({ type: "round", messages }));
let runner: ModelRunner | null = null;
let scheduler: Scheduler | null = null;
let structures: ThreadedStructures | null = null;
/** The scheduler's loop: a close waits for its round to end before the sessions are released. */
let loop: Promise<void> | null = null;
let testHooks = false;

function rejectInfo(e: unknown): RejectInfo {
  if (e instanceof EngineRequestError) return { kind: "request", message: e.message, param: e.param, code: e.code };
  if (e instanceof EngineBusyError) {
    return { kind: "busy", message: e.message, param: null, code: null, retryAfterSeconds: e.retryAfterSeconds };
  }
  if (e instanceof EngineUnavailableError) {
    return { kind: "unavailable", message: e.message, param: null, code: e.code, retryAfterSeconds: e.retryAfterSeconds };
  }
  post({ type: "log", level: "error", msg: "request failed in the model worker", fields: { error: String((e as Error)?.stack ?? e) } });
  return { kind: "internal", message: "internal error in the model worker", param: null, code: null };
}

let failing = false;
/**
 * An uncaught error: the scheduler's state cannot be trusted, so the thread ends and the host
 * starts a fresh one. Not at once: a native call still in flight would complete into a torn-down
 * thread and abort the process. New native calls stop here; the thread exits when none is left.
 */
function fatal(err: unknown) {
  if (failing) return;
  failing = true;
  const error = String((err as Error)?.stack ?? err);
  post({ type: "fatal", error: (error.split("\n")[0] ?? error).slice(0, 500) });
  post({ type: "log", level: "error", msg: "model worker failed", fields: { error } });
  const exit = () => process.exit(1);
  if (nativeCalls) void quiesceNativeCalls(nativeCalls).then(exit, exit);
  else exit();
}
let nativeCalls: SharedArrayBuffer | null = null;
process.on("uncaughtException", fatal);
process.on("unhandledRejection", fatal);

function kvCacheMode(r: ModelRunner): string {
  const { spec, stepMode, memory } = r.decoder;
  const where = memory.resident ? "in the provider's memory" : "in JavaScript arrays fed to each run";
  return `${kvCacheLayout(spec.sharedBuffer, stepMode)}, ${where}`;
}

function kvCacheLayout(sharedBuffer: boolean, stepMode: Decoder["stepMode"]): string {
  if (!sharedBuffer) return "standard, batches padded on the left";
  if (stepMode === "split") return "engine buffers written in place (attention split around the cache, no present)";
  if (stepMode === "gather") return "engine buffers written in place (new positions gathered from the presents)";
  return "in place (shared past/present buffer)";
}

self.onmessage = async (e: MessageEvent<HostMessage>) => {
  const m = e.data;
  switch (m.type) {
    case "load": {
      try {
        if (m.options.nativeCalls) {
          nativeCalls = m.options.nativeCalls;
          shareNativeCallFlags(nativeCalls);
        }
        runner = await ModelRunner.load(m.options);
        testHooks = m.options.testHooks === true;
        // The token vocabulary that grammar masks walk takes seconds on a 150k vocabulary: built
        // now for models that offer structured output or tools, not during the first such request
        // (when it would stall every stream of the model).
        if (runner.info.supportsStructuredOutput || runner.info.supportsTools) modelStructure(runner);
        structures = new ThreadedStructures(runner, {
          limits: m.options.compileLimits,
          compiling: m.options.compiling,
          cacheBytes: m.options.grammarCacheBytes,
          worker: m.options.compileWorker,
          log: (level, msg, fields) => post({ type: "log", level, msg, fields }),
        });
        if (m.options.streamIntervalMs !== undefined) rounds.intervalMs = m.options.streamIntervalMs;
        // The budget tables every grammar of the model shares, in the background from now on.
        if (runner.info.supportsStructuredOutput || runner.info.supportsTools) structures.prepareBuiltIns();
        scheduler = new Scheduler(runner, {
          events: (rid, events) => rounds.add({ type: "events", rid, events }),
          done: (rid, error, code, timings) => rounds.add({ type: "done", rid, error, code, timings }),
          endRound: (urgent) => rounds.endRound(urgent),
          stats: (stats) => post({ type: "stats", stats }),
        }, {
          kvBudgetBytes: m.options.kvBudgetBytes,
          kvCapSequences: m.options.kvCapSequences,
          maxQueue: runner.queueLimit ?? m.options.maxQueue,
          keyQueueShare: m.options.keyQueueShare,
          order: m.options.queueOrder,
          speculate: m.options.speculate,
          structures,
        });
        // A failed loop ends the thread (see fatal): its requests get an error, not a hang.
        loop = scheduler.run().catch(fatal);
        // Before the model is reported loaded: no request is sent to it until then.
        const warm = await warmUp(runner, { budgetMs: m.options.warmupMs ?? 0, speculate: m.options.speculate ?? "ngram" });
        const s = scheduler.stats();
        const notes = [
          `model loaded on ${runner.info.provider}`,
          `KV cache: ${kvCacheMode(runner)}, ` +
            `budget ${Math.round(s.kvBudgetBytes / 2 ** 20)} MiB, queue of ${s.queueLimit}`,
        ];
        if (warm.requests > 0) notes.push(`warmed up with ${warm.requests} synthetic requests (${warm.tokens} tokens) in ${Math.round(warm.ms)} ms`);
        post({ type: "loaded", model: runner.info, notes: [...notes, ...runner.decoder.notes], kvBudgetBytes: s.kvBudgetBytes });
      } catch (err) {
        post({ type: "load-failed", error: (err as Error).message });
      }
      return;
    }
    case "start": {
      if (!scheduler) {
        post({ type: "rejected", rid: m.rid, error: { kind: "internal", message: "model not loaded", param: null, code: null } });
        return;
      }
      try {
        const promptTokens = await scheduler.admit(m.rid, m.request, m.structureKey ?? null);
        // What the other requests made before this one was queued reaches their clients before
        // this one's first chunk does, as it would with no rounds held.
        rounds.endRound(true);
        post({ type: "started", rid: m.rid, promptTokens });
      } catch (err) {
        post({ type: "rejected", rid: m.rid, error: rejectInfo(err) });
      }
      return;
    }
    case "cancel":
      scheduler?.cancel(m.rid);
      return;
    case "ping":
      post({ type: "pong" });
      return;
    case "block": {
      if (!testHooks) return;
      const until = performance.now() + m.ms;
      while (performance.now() < until) {}
      return;
    }
    case "close":
      structures?.close();
      scheduler?.stop();
      // A session released while a run of it is in flight is freed under the run.
      await loop;
      await runner?.decoder.release();
      await runner?.vision?.release();
      post({ type: "closed" });
      return;
  }
};
