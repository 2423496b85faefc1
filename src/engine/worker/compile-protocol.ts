// Messages between a model's worker and its compile thread. Structured-clone data only; the
// grammar's typed arrays are transferred, not copied.
import type { BuiltInPart, CompileLimits, CompletionTables, Grammar, SharedVocabulary } from "../../structured/index.ts";
import type { StructureSpec } from "./structured-support.ts";

export type CompileRequest =
  /**
   * Once, first: the flag the model worker sets to a job's id to cancel that job, and the model's
   * token vocabulary (shared memory), on which each grammar's token budget is prepared. With the
   * vocabulary, the thread computes the model's built-in budget tables between jobs
   * (structured/built-in-tables.ts), leaving out the parts an earlier compile thread finished
   * (`builtIns`, in shared memory), and none when `builtInsDone`.
   */
  | { type: "init"; cancel: SharedArrayBuffer; compiling: SharedArrayBuffer | null; vocab: SharedVocabulary | null; builtIns: BuiltInPart[]; builtInsDone: boolean }
  | { type: "compile"; job: number; spec: StructureSpec; limits: CompileLimits };

export type CompileFailure =
  /** The schema's fault: a 400 with this message (code unsupported_schema or schema_too_complex). */
  | { kind: "refused"; message: string; code: string }
  | { kind: "cancelled" }
  /** A bug or an exhausted thread: logged, the client gets a generic error. */
  | { kind: "internal"; message: string };

/**
 * `heapBytes`: the compile thread's JavaScript heap after the job. `budget`: the grammar's token
 * budget tables on the model's vocabulary (see structured/completion-budget.ts), computed there so
 * that admitting its first request costs the decode loop nothing.
 */
export type CompileReply =
  | { type: "compiled"; job: number; grammar: Grammar | null; budget: CompletionTables | null; ms: number; heapBytes: number }
  | { type: "failed"; job: number; failure: CompileFailure; ms: number; heapBytes: number }
  /** A part of the built-in budget tables, finished (its tables in shared memory): the model worker adopts it. */
  | { type: "built-in"; part: BuiltInPart }
  /** Every part of the built-in tables is finished. */
  | { type: "built-ins-done"; heapBytes: number };
