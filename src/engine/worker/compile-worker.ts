// The compile thread of one model: schemas and tool definitions to grammars, off the model's
// decode loop, so a schema that takes a second to compile (or is refused after one) never stalls
// the other streams of the model. Stateless apart from the automata caches of the structured
// room; the grammars themselves are transferred to the model worker, which caches them.
import { CompileCancelledError, configureGrammarCache, SchemaLimitError, withCompileBudget, type Grammar } from "../../structured/index.ts";
import { heapStats } from "bun:jsc";
import type { CompileFailure, CompileReply, CompileRequest } from "./compile-protocol.ts";
import { compileStructureSpec, schemaRefusal, specParam } from "./structured-support.ts";
import { lowerThreadPriority, threadCpuClock } from "./thread-priority.ts";

declare const self: Worker;

// Every grammar leaves this thread (its buffers are transferred): keeping one would keep a
// detached copy.
configureGrammarCache(0);
// Compiling yields the CPU to the model's decode loop whenever both want it.
lowerThreadPriority();
// The time limit is this thread's CPU time: at low priority it may wait for a CPU without working.
const clock = threadCpuClock() ?? (() => performance.now());
let flags: Int32Array<ArrayBufferLike> = new Int32Array(1);

const post = (m: CompileReply, transfer: Transferable[] = []) => self.postMessage(m, transfer);

/** The grammar's own arrays (freshly built, owned by nobody else here). */
function buffers(g: Grammar): ArrayBuffer[] {
  return [g.next, g.hasBytes, g.byteCount, g.final, g.callOffset, g.callStart, g.callReturn, g.ruleOf, g.ruleBase].map((a) => a.buffer as ArrayBuffer);
}

function failure(e: unknown, param: string, maxDepth: number): CompileFailure {
  if (e instanceof CompileCancelledError) return { kind: "cancelled" };
  // A schema that still overflowed the stack is refused as too deep (the compiler recursed on it).
  if (e instanceof RangeError && /call stack/i.test(e.message)) e = new SchemaLimitError("depth", maxDepth, undefined, "the compiler's stack overflowed");
  const refusal = schemaRefusal(e, param);
  if (refusal) return { kind: "refused", message: refusal.message, code: refusal.code! };
  return { kind: "internal", message: String((e as Error)?.stack ?? e) };
}

self.onmessage = (e: MessageEvent<CompileRequest>) => {
  const m = e.data;
  if (m.type === "init") {
    flags = new Int32Array(m.cancel);
    return;
  }
  const started = performance.now();
  try {
    const grammar = withCompileBudget(m.limits, { flags, job: m.job }, () => compileStructureSpec(m.spec), clock);
    post({ type: "compiled", job: m.job, grammar, ms: performance.now() - started, heapBytes: heapStats().heapSize }, grammar ? buffers(grammar) : []);
  } catch (err) {
    post({ type: "failed", job: m.job, failure: failure(err, specParam(m.spec), m.limits.maxDepth), ms: performance.now() - started, heapBytes: heapStats().heapSize });
  }
};
