// Worker entry: owns one model. ONNX Runtime's runs happen here, off the HTTP thread.
import { EngineBusyError, EngineRequestError } from "../types.ts";
import { ModelRunner } from "./model-runner.ts";
import type { HostMessage, RejectInfo, WorkerMessage } from "./protocol.ts";
import { RoundBatcher } from "./round-batcher.ts";
import { Scheduler } from "./scheduler.ts";
import { warmUp } from "./warm-up.ts";

declare const self: Worker;

const post = (m: WorkerMessage) => self.postMessage(m);
const rounds = new RoundBatcher((messages) => post({ type: "round", messages }));
let runner: ModelRunner | null = null;
let scheduler: Scheduler | null = null;

function rejectInfo(e: unknown): RejectInfo {
  if (e instanceof EngineRequestError) return { kind: "request", message: e.message, param: e.param, code: e.code };
  if (e instanceof EngineBusyError) {
    return { kind: "busy", message: e.message, param: null, code: null, retryAfterSeconds: e.retryAfterSeconds };
  }
  post({ type: "log", level: "error", msg: "request failed in the model worker", fields: { error: String((e as Error)?.stack ?? e) } });
  return { kind: "internal", message: "internal error in the model worker", param: null, code: null };
}

function kvCacheMode(r: ModelRunner): string {
  const { spec, stepMode } = r.decoder;
  if (!spec.sharedBuffer) return "standard, batches padded on the left";
  if (stepMode === "split") return "engine buffers written in place (attention split around the cache, no present)";
  if (stepMode === "gather") return "engine buffers written in place (new positions gathered from the presents)";
  return "in place (shared past/present buffer)";
}

self.onmessage = async (e: MessageEvent<HostMessage>) => {
  const m = e.data;
  switch (m.type) {
    case "load": {
      try {
        runner = await ModelRunner.load(m.options);
        scheduler = new Scheduler(runner, {
          events: (rid, events) => rounds.add({ type: "events", rid, events }),
          done: (rid, error) => rounds.add({ type: "done", rid, error }),
          endRound: (urgent) => rounds.endRound(urgent),
          stats: (stats) => post({ type: "stats", stats }),
        }, { kvBudgetBytes: m.options.kvBudgetBytes, maxQueue: m.options.maxQueue, speculate: m.options.speculate });
        void scheduler.run();
        // Before the model is reported loaded: no request is sent to it until then.
        const warm = await warmUp(runner, { budgetMs: m.options.warmupMs ?? 0, speculate: m.options.speculate ?? "ngram" });
        const s = scheduler.stats();
        const notes = [
          `model loaded on ${runner.info.provider}`,
          `KV cache: ${kvCacheMode(runner)}, ` +
            `budget ${Math.round(s.kvBudgetBytes / 2 ** 20)} MiB, queue of ${s.queueLimit}`,
        ];
        if (warm.requests > 0) notes.push(`warmed up with ${warm.requests} synthetic requests (${warm.tokens} tokens) in ${Math.round(warm.ms)} ms`);
        post({ type: "loaded", model: runner.info, notes: [...notes, ...runner.decoder.notes] });
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
        const promptTokens = await scheduler.admit(m.rid, m.request);
        post({ type: "started", rid: m.rid, promptTokens });
      } catch (err) {
        post({ type: "rejected", rid: m.rid, error: rejectInfo(err) });
      }
      return;
    }
    case "cancel":
      scheduler?.cancel(m.rid);
      return;
    case "close":
      scheduler?.stop();
      await runner?.decoder.release();
      await runner?.vision?.release();
      post({ type: "closed" });
      return;
  }
};
