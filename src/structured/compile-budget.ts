// What compiling one request's schemas may cost: grammar states, schema size, nesting depth,
// repetition counts, pattern length and wall time. A schema is client input: without a bound,
// `{"anyOf":[...10,000 branches]}` or `(a{1000}){1000}` keeps a thread busy for minutes and
// allocates gigabytes. The limits are checked before compiling (size, depth, pattern length) and
// while compiling (states as automata are built, time and cancellation at regular ticks of the
// hot loops). Each refusal names the limit, the serve flag that sets it and the place in the schema.

export interface CompileLimits {
  /** States of the whole grammar (each state costs 1 KiB of transitions). */
  readonly maxStates: number;
  /** Length of the schemas' canonical JSON text, in characters. */
  readonly maxSchemaBytes: number;
  /** Nesting of objects and arrays in a schema, of subschemas through $ref, and of groups in a pattern. */
  readonly maxDepth: number;
  /** Largest count of one repetition: a pattern's {n,m}, minLength and maxLength. */
  readonly maxRepeat: number;
  /** Length of one `pattern`, in characters. */
  readonly maxPatternLength: number;
  /**
   * Time of one compilation, in milliseconds: the compiling thread's CPU time where the caller
   * gives a CPU clock (a thread at low priority may wait long for a CPU without working), else
   * wall time.
   */
  readonly maxMillis: number;
}

export const DEFAULT_COMPILE_LIMITS: CompileLimits = {
  maxStates: 50_000,
  maxSchemaBytes: 1024 * 1024,
  maxDepth: 64,
  maxRepeat: 4096,
  maxPatternLength: 4096,
  maxMillis: 1000,
};

export type LimitName = "states" | "size" | "depth" | "repeat" | "pattern-length" | "time";

/** The serve flag of each limit, named in refusals so an operator knows what to raise. */
export const LIMIT_FLAGS: Record<LimitName, string> = {
  states: "--max-schema-states",
  size: "--max-schema-bytes",
  depth: "--max-schema-depth",
  repeat: "--max-schema-repeat",
  "pattern-length": "--max-schema-pattern-length",
  time: "--max-schema-seconds",
};

const WHAT: Record<LimitName, (max: number) => string> = {
  states: (m) => `needs more than ${m} grammar states`,
  size: (m) => `is longer than ${m} characters of JSON`,
  depth: (m) => `nests deeper than ${m} levels`,
  repeat: (m) => `repeats something more than ${m} times`,
  "pattern-length": (m) => `has a pattern longer than ${m} characters`,
  time: (m) => `took more than ${m / 1000} s to compile`,
};

/** A schema over one of the limits. Maps to a 400 naming the limit and where in the schema. */
export class SchemaLimitError extends Error {
  /** JSON pointer of the innermost subschema being compiled when the limit was hit. */
  pointer: string | undefined;
  /** The keyword being compiled (e.g. "pattern"), when known. */
  keyword: string | undefined;

  constructor(
    readonly limit: LimitName,
    readonly max: number,
    pointer?: string,
    readonly detail?: string,
  ) {
    super("");
    this.name = "SchemaLimitError";
    this.pointer = pointer;
    this.message = this.describe();
  }

  /** Notes where it happened, unless a more precise place was noted already. */
  at(pointer: string, keyword?: string): this {
    if (this.pointer === undefined) this.pointer = pointer;
    if (this.keyword === undefined && keyword !== undefined) this.keyword = keyword;
    this.message = this.describe();
    return this;
  }

  private describe(): string {
    const p = this.pointer && this.pointer.length > 120 ? `${this.pointer.slice(0, 60)}…${this.pointer.slice(-60)}` : this.pointer;
    const where = `${p ? `"${p}"` : "the root"}${this.keyword ? ` (${this.keyword})` : ""}`;
    const detail = this.detail ? ` (${this.detail})` : "";
    return `the schema at ${where} ${WHAT[this.limit](this.max)}${detail}, over this server's limit (serve ${LIMIT_FLAGS[this.limit]})`;
  }
}

/** The client left (or the job was withdrawn) while its schema was compiling. */
export class CompileCancelledError extends Error {
  constructor() {
    super("schema compilation cancelled");
    this.name = "CompileCancelledError";
  }
}

/** Ticks between two looks at the clock and the cancellation flag. */
const CHECK_EVERY = 1024;

/**
 * Compilations running at once in the process (every model's compile thread counts itself in
 * `running[0]`) and the cores they share. When more run than there are cores, each may spend its
 * share of the time limit, maxMillis × cores / running, at the most crowded the cores have been
 * during its compile (looked up as it goes): a burst of schemas refused by time is then refused
 * within about maxMillis of wall time however many come at once (all the compile threads together
 * spend at most maxMillis of each core), where a fixed limit each took maxMillis × running / cores
 * (four refusals of 1 s on two cores: over 2 s). The share does not grow back when others end: the
 * last of a burst would otherwise be refused half a limit later than the first.
 */
export interface CompileShare {
  running: Int32Array;
  cores: number;
}

class Budget {
  ticks = 0;
  states = 0;
  nfaStates = 0;
  failure: Error | null = null;
  readonly start: number;
  /** Compilations per core at the most crowded so far (at least 1). */
  private crowded = 1;
  constructor(
    readonly limits: CompileLimits,
    private readonly cancel: { flags: Int32Array; job: number } | null,
    readonly clock: () => number,
    private readonly share: CompileShare | null,
  ) {
    this.start = clock();
  }

  /** Schemas compiling at once per core, at the most crowded since this compile began (1 when they fit); records a new most. */
  private crowdedSoFar(): number {
    if (!this.share) return 1;
    return (this.crowded = Math.max(this.crowded, Atomics.load(this.share.running, 0) / Math.max(1, this.share.cores)));
  }

  /** This compilation's time limit now, milliseconds: its share of the cores (see CompileShare). */
  limitNow(): number {
    return this.limits.maxMillis / this.crowdedSoFar();
  }

  check(): void {
    if (this.failure) throw this.failure;
    if (this.cancel && Atomics.load(this.cancel.flags, 0) === this.cancel.job) this.fail(new CompileCancelledError());
    const limit = this.limitNow();
    if (this.clock() - this.start <= limit) return;
    const detail = this.crowded > 1 ? `${this.limits.maxMillis / 1000} s shared by ${Math.round(this.crowded * this.share!.cores)} schemas compiling at once on ${this.share!.cores} cores` : undefined;
    this.fail(new SchemaLimitError("time", Math.round(limit), undefined, detail));
  }

  fail(e: Error): never {
    // Kept: cleanup code that runs while the error unwinds (and ticks) throws the same error,
    // so the place noted first stays the one reported.
    this.failure = e;
    throw e;
  }
}

let active: Budget | null = null;

/**
 * Runs `fn` (a synchronous compilation) under the limits. `cancel`: a shared flag another thread
 * sets to `job` to stop this compilation at its next tick. `clock` (milliseconds) measures the time
 * limit: the thread's CPU time where available, else wall time. `share`: the process's count of
 * compilations running at once, which divides the limit when they outnumber the cores.
 */
export function withCompileBudget<T>(
  limits: CompileLimits,
  cancel: { flags: Int32Array; job: number } | null,
  fn: () => T,
  clock: () => number = () => performance.now(),
  share: CompileShare | null = null,
): T {
  const outer = active;
  active = new Budget(limits, cancel, clock, share);
  try {
    return fn();
  } finally {
    active = outer;
  }
}

/**
 * The share of the running compilation's time limit still left (1 when none runs): work that is
 * only worth doing while it cannot push a schema over its limit asks first.
 */
export function budgetTimeLeft(): number {
  if (active === null) return 1;
  const limit = active.limitNow();
  return (limit - (active.clock() - active.start)) / limit;
}

/** The limits of the compilation running on this thread, if any. */
export function activeLimits(): CompileLimits | null {
  return active?.limits ?? null;
}

/** One unit of work in a hot loop: every CHECK_EVERY ticks, the clock and the cancel flag. */
export function budgetTick(): void {
  if (active !== null && (++active.ticks & (CHECK_EVERY - 1)) === 0) active.check();
}

/** Automaton states built for one rule (before minimisation): bounded like the grammar's. */
export function budgetAutomatonState(count: number): void {
  if (active === null) return;
  if ((++active.ticks & (CHECK_EVERY - 1)) === 0) active.check();
  // Determinisation may pass through more states than minimisation keeps; twice the grammar's
  // limit for one rule still bounds the memory.
  if (count > 2 * active.limits.maxStates) active.fail(new SchemaLimitError("states", active.limits.maxStates));
}

/** NFA states of one expression: an expanded repetition shows here before any DFA exists. */
export function budgetNfaState(count: number): void {
  if (active === null) return;
  if ((++active.ticks & (CHECK_EVERY - 1)) === 0) active.check();
  if (count > 4 * active.limits.maxStates) active.fail(new SchemaLimitError("states", active.limits.maxStates));
}

/** States added to the grammar being built. */
export function budgetGrammarStates(added: number): void {
  if (active === null) return;
  active.states += added;
  if (active.states > active.limits.maxStates) active.fail(new SchemaLimitError("states", active.limits.maxStates));
}

/** A counted repetition {min,max} (max may be Infinity). */
export function budgetRepeat(min: number, max: number): void {
  if (active === null) return;
  const n = max === Infinity ? min : max;
  if (n > active.limits.maxRepeat) throw new SchemaLimitError("repeat", active.limits.maxRepeat, undefined, `a count of ${n}`);
}

/** Nesting depth reached (subschemas, $ref chains, pattern groups). */
export function budgetDepth(depth: number): void {
  if (active === null) return;
  if (depth > active.limits.maxDepth) throw new SchemaLimitError("depth", active.limits.maxDepth);
}

/**
 * The checks that need no compiling: nesting depth and pattern lengths, walked without recursion
 * (a schema nested 10,000 levels deep must not overflow the stack that refuses it).
 */
export function checkSchemaShape(schema: unknown, pointer = ""): void {
  const limits = active?.limits;
  if (!limits) return;
  const stack: Array<{ v: unknown; p: string; d: number; key: string }> = [{ v: schema, p: pointer, d: 0, key: "" }];
  while (stack.length > 0) {
    const { v, p, d, key } = stack.pop()!;
    budgetTick();
    if (typeof v === "string") {
      if (key === "pattern" && v.length > limits.maxPatternLength) {
        throw new SchemaLimitError("pattern-length", limits.maxPatternLength, p, `${v.length} characters`);
      }
      continue;
    }
    if (v === null || typeof v !== "object") continue;
    if (d >= limits.maxDepth) throw new SchemaLimitError("depth", limits.maxDepth, p);
    if (Array.isArray(v)) v.forEach((x, i) => stack.push({ v: x, p: `${p}/${i}`, d: d + 1, key: "" }));
    else {
      for (const [k, x] of Object.entries(v as Record<string, unknown>)) {
        stack.push({ v: x, p: `${p}/${k.replace(/~/g, "~0").replace(/\//g, "~1")}`, d: d + 1, key: k });
      }
    }
  }
}
