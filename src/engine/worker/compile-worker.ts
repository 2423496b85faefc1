// The compile thread of one model: schemas and tool definitions to grammars, off the model's
// decode loop, so a schema that takes a second to compile (or is refused after one) never stalls
// the other streams of the model. Each grammar's token budget tables (the fewest tokens that
// finish a document, on the model's vocabulary: up to seconds on a large grammar and a 150k
// vocabulary) are computed here too, under the same limits. Stateless apart from the caches of
// the structured room; grammars and tables are transferred to the model worker, which caches them.
// Between jobs, once per model, it computes the budget tables of json_object and the built-in
// formats (structured/built-in-tables.ts) a search at a time, and hands each part to the model
// worker; jobs take what is done of them.
import {
  adoptRuleTables,
  type BuiltInPart,
  builtInSearches,
  CompileCancelledError,
  type CompileShare,
  configureGrammarCache,
  GrammarMatcher,
  prepareCompletionFacts,
  SchemaLimitError,
  vocabularyFromShared,
  withCompileBudget,
  type CompletionTables,
  type Grammar,
  type TokenVocabulary,
} from "../../structured/index.ts";
import { heapSize } from "bun:jsc";
import { availableParallelism } from "node:os";
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
/** The process's compilations running at once (see CompileShare): null where the host gave none. */
let share: CompileShare | null = null;
let vocab: TokenVocabulary | null = null;

const post = (m: CompileReply, transfer: Transferable[] = []) => self.postMessage(m, transfer);

/**
 * A slice of the built-in tables' searches runs this long before the thread looks at its
 * messages again (a search runs whole: a job waits for at most one, a few milliseconds).
 */
const BUILT_IN_SLICE_MS = 10;

/** Computes the built-in tables a slice at a time, from timers, so that jobs are taken in between. */
function computeBuiltIns(v: TokenVocabulary, finished: readonly BuiltInPart[]): void {
  for (const part of finished) adoptRuleTables(v, part.tables);
  const searches = builtInSearches(
    v,
    (part) => {
      adoptRuleTables(v, part.tables);
      post({ type: "built-in", part });
    },
    new Set(finished.map((p) => p.name)),
  );
  const slice = () => {
    const stop = performance.now() + BUILT_IN_SLICE_MS;
    while (performance.now() < stop) {
      if (searches.next().done) {
        post({ type: "built-ins-done", heapBytes: heapSize() });
        return;
      }
    }
    setTimeout(slice, 0);
  };
  setTimeout(slice, 0);
}

/** The grammar's and its tables' own arrays (freshly built, owned by nobody else here). */
function buffers(g: Grammar, t: CompletionTables | null): ArrayBuffer[] {
  const arrays: ArrayBufferView[] = [g.next, g.hasBytes, g.byteCount, g.final, g.callOffset, g.callStart, g.callReturn, g.ruleOf, g.ruleBase];
  if (t) arrays.push(t.origins, t.offsets, t.exitNodes, t.exitCosts, t.follow, t.skipByte, t.bytesLeft, ...(t.reach ? [t.reach] : []));
  return arrays.map((a) => a.buffer as ArrayBuffer);
}

/** The grammar and, on the model's vocabulary, the budget tables its first request needs. */
function compile(m: Extract<CompileRequest, { type: "compile" }>): { grammar: Grammar | null; budget: CompletionTables | null } {
  const grammar = compileStructureSpec(m.spec);
  if (!grammar || !vocab) return { grammar, budget: null };
  const matcher = new GrammarMatcher(grammar, vocab);
  matcher.prepareBudgetTables();
  return { grammar, budget: matcher.budgetTables() };
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
    share = m.compiling ? { running: new Int32Array(m.compiling), cores: availableParallelism() } : null;
    if (!m.vocab) {
      // No vocabulary, no budgets: nothing to compute.
      post({ type: "built-ins-done", heapBytes: heapSize() });
      return;
    }
    vocab = vocabularyFromShared(m.vocab);
    // Per vocabulary, once per thread: not counted against any one schema's time.
    prepareCompletionFacts(vocab);
    if (m.builtInsDone) for (const part of m.builtIns) adoptRuleTables(vocab, part.tables);
    else computeBuiltIns(vocab, m.builtIns);
    return;
  }
  const started = performance.now();
  try {
    const { grammar, budget } = withCompileBudget(m.limits, { flags, job: m.job }, () => compile(m), clock, share);
    post({ type: "compiled", job: m.job, grammar, budget, ms: performance.now() - started, heapBytes: heapSize() }, grammar ? buffers(grammar, budget) : []);
  } catch (err) {
    post({ type: "failed", job: m.job, failure: failure(err, specParam(m.spec), m.limits.maxDepth), ms: performance.now() - started, heapBytes: heapSize() });
  }
};
