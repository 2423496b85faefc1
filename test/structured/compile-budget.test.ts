// Compile limits: each one refuses with its name, its serve flag and the place in the schema;
// schemas within the limits compile as before; recursion without progress and allOf cycles are
// refused; a compile stops at its time limit or when cancelled through the shared flag.
import { describe, expect, test } from "bun:test";
import {
  canonicalJson,
  canonicalJsonWithin,
  checkSchemaShape,
  CompileCancelledError,
  compileJsonSchema,
  DEFAULT_COMPILE_LIMITS,
  SchemaLimitError,
  UnsupportedSchemaError,
  withCompileBudget,
  type CompileLimits,
} from "../../src/structured/index.ts";
import { cpuClock } from "../helpers/cpu-time.ts";

// The time limit is generous unless a test is about it: the others must not depend on the machine's load.
const compile = (schema: unknown, limits: Partial<CompileLimits> = {}, cancel: { flags: Int32Array; job: number } | null = null) =>
  withCompileBudget({ ...DEFAULT_COMPILE_LIMITS, maxMillis: 60_000, ...limits }, cancel, () => {
    checkSchemaShape(schema);
    // A fresh key each time: the grammar cache must not answer for an earlier compile.
    return compileJsonSchema({ ...(schema as object), $comment: `${Math.random()}` });
  });

function refusal(f: () => unknown): SchemaLimitError {
  try {
    f();
  } catch (e) {
    if (e instanceof SchemaLimitError) return e;
    throw e;
  }
  throw new Error("not refused");
}

describe("limits", () => {
  test("repetition counts, in patterns and string lengths, with the keyword and the place", () => {
    for (const [schema, keyword] of [
      [{ type: "string", pattern: "^a{1000000}$" }, "pattern"],
      [{ type: "string", pattern: "^\\d{2147483647}$" }, "pattern"],
      [{ type: "string", pattern: "^.{0,100000}$" }, "pattern"],
      [{ type: "string", minLength: 1_000_000_000 }, "minLength"],
      [{ type: "string", maxLength: 5000 }, "maxLength"],
    ] as const) {
      const e = refusal(() => compile({ type: "object", properties: { x: schema }, required: ["x"] }));
      expect(e.limit).toBe("repeat");
      expect(e.message).toContain(`"/properties/x" (${keyword})`);
      expect(e.message).toContain("serve --max-schema-repeat");
    }
    // At the limit it compiles (with time to spare for a busy machine).
    expect(compile({ type: "string", maxLength: 2000 }, { maxRepeat: 2000 }).stateCount).toBeGreaterThan(2000);
    expect(refusal(() => compile({ type: "string", maxLength: 2001 }, { maxRepeat: 2000 })).limit).toBe("repeat");
  });

  test("grammar states: nested repetition, thousands of properties or items", () => {
    for (const schema of [
      { type: "string", pattern: "^(a{1000}){1000}$" },
      { type: "object", properties: Object.fromEntries(Array.from({ length: 3000 }, (_, i) => [`p${i}`, { type: "integer" }])), required: Array.from({ length: 3000 }, (_, i) => `p${i}`) },
      { type: "array", prefixItems: Array.from({ length: 2000 }, () => ({ type: "integer" })) },
    ]) {
      const e = refusal(() => compile(schema, { maxStates: 20_000 }));
      expect(e.limit).toBe("states");
      expect(e.message).toContain("more than 20000 grammar states");
      expect(e.message).toContain("serve --max-schema-states");
    }
  });

  test("nesting depth, found without recursion even 100,000 levels deep", () => {
    let deep: unknown = { type: "string" };
    for (let i = 0; i < 100_000; i++) deep = { type: "object", properties: { a: deep } };
    const e = refusal(() => compile(deep));
    expect(e.limit).toBe("depth");
    expect(e.message).toContain("serve --max-schema-depth");
    expect(e.message).toContain("/properties/a/properties/a");
    // $ref chains count as nesting too.
    const chain = { $defs: Object.fromEntries(Array.from({ length: 200 }, (_, i) => [`d${i}`, i === 199 ? { type: "string" } : { $ref: `#/$defs/d${i + 1}` }])), $ref: "#/$defs/d0" };
    expect(refusal(() => compile(chain)).limit).toBe("depth");
    // Groups in a pattern.
    expect(refusal(() => compile({ type: "string", pattern: `${"(".repeat(100)}a${")".repeat(100)}` })).limit).toBe("depth");
    expect(compile({ type: "string", pattern: `^${"(".repeat(20)}a${")".repeat(20)}$` }).stateCount).toBeGreaterThan(0);
  });

  test("pattern length", () => {
    const e = refusal(() => compile({ type: "string", pattern: "a".repeat(5000) }));
    expect(e.limit).toBe("pattern-length");
    expect(e.message).toContain('"/pattern"');
  });

  test("wall time: a compile that runs long stops at the limit", () => {
    const t0 = performance.now();
    const e = refusal(() => compile({ type: "string", pattern: "a".repeat(4000) }, { maxMillis: 200 }));
    expect(e.limit).toBe("time");
    expect(e.message).toContain("serve --max-schema-seconds");
    expect(performance.now() - t0).toBeLessThan(1500);
  });

  test("schemas compiling at once beyond the cores share the time limit, as they go", () => {
    // A clock of 1 ms per look: the limit is counted in looks, whatever the machine's load.
    const spentAtRefusal = (running: Int32Array, onLook: (ms: number) => void = () => {}) => {
      let ms = 0;
      const clock = () => (onLook(ms), ms++);
      const e = refusal(() =>
        withCompileBudget({ ...DEFAULT_COMPILE_LIMITS, maxMillis: 1000 }, null, () => compileJsonSchema({ type: "string", pattern: "a".repeat(4000), $comment: `${Math.random()}` }), clock, { running, cores: 2 }),
      );
      return { ms, e };
    };
    const count = (n: number) => new Int32Array(new SharedArrayBuffer(4)).fill(n);
    // Two compiles on two cores: each has the whole limit.
    const alone = spentAtRefusal(count(2));
    expect(alone.e.limit).toBe("time");
    expect(alone.ms).toBeGreaterThan(1000);
    expect(alone.ms).toBeLessThan(1010);
    expect(alone.e.message).toContain("took more than 1 s to compile, over this server's limit");
    // Four: half each, and the refusal says why.
    const crowded = spentAtRefusal(count(4));
    expect(crowded.ms).toBeGreaterThan(500);
    expect(crowded.ms).toBeLessThan(510);
    expect(crowded.e.message).toContain("took more than 0.5 s to compile (1 s shared by 4 schemas compiling at once on 2 cores)");
    expect(crowded.e.message).toContain("serve --max-schema-seconds");
    // Two at first, four from 300 ms: the share from then on.
    const rising = count(2);
    const crowdedLater = spentAtRefusal(rising, (ms) => ms === 300 && Atomics.store(rising, 0, 4));
    expect(crowdedLater.ms).toBeGreaterThan(500);
    expect(crowdedLater.ms).toBeLessThan(510);
    // Four at first, two of them done at 400 ms: the share stays (the last of a burst is not
    // refused half a limit after the first), and the refusal names the crowd it had.
    const easing = count(4);
    const eased = spentAtRefusal(easing, (ms) => ms === 400 && Atomics.store(easing, 0, 2));
    expect(eased.ms).toBeGreaterThan(500);
    expect(eased.ms).toBeLessThan(510);
    expect(eased.e.message).toContain("(1 s shared by 4 schemas compiling at once on 2 cores)");
  });

  test("a compile stops when its job is cancelled through the shared flag", () => {
    const flags = new Int32Array(new SharedArrayBuffer(4));
    Atomics.store(flags, 0, 7);
    expect(() => compile({ type: "string", pattern: "a".repeat(3000) }, {}, { flags, job: 7 })).toThrow(CompileCancelledError);
    // Another job's flag does not stop this one.
    expect(compile({ type: "integer" }, {}, { flags, job: 8 }).stateCount).toBeGreaterThan(0);
  });
});

describe("schemas that describe no progress", () => {
  test("recursion before any value is written is refused; recursion inside values compiles", () => {
    for (const schema of [{ $ref: "#" }, { anyOf: [{ $ref: "#" }, { $ref: "#" }] }, { anyOf: [{ $ref: "#" }, { type: "string" }] }, { $defs: { a: { $ref: "#/$defs/b" }, b: { anyOf: [{ $ref: "#/$defs/a" }, { type: "null" }] } }, $ref: "#/$defs/a" }]) {
      expect(() => compile(schema)).toThrow(/recursion without progress/);
    }
    const tree = { type: "object", properties: { v: { type: "integer" }, kids: { type: "array", items: { $ref: "#" }, maxItems: 2 } }, required: ["v"], additionalProperties: false };
    expect(compile(tree).stateCount).toBeGreaterThan(0);
  });

  test("allOf that merges back into itself is refused at once", () => {
    const cpu = cpuClock();
    expect(() => compile({ allOf: [{ $ref: "#" }] })).toThrow(UnsupportedSchemaError);
    expect(() => compile({ type: "object", allOf: [{ allOf: [{ $ref: "#" }] }] })).toThrow(/allOf refers back to itself/);
    expect(cpu()).toBeLessThan(1000);
  });
});

test("canonical JSON: any depth, keys sorted, and a length bound", () => {
  let deep: unknown = 1;
  for (let i = 0; i < 100_000; i++) deep = { b: deep, a: [i] };
  const text = canonicalJson(deep);
  expect(text.startsWith('{"a":[99999],"b":{"a":[99998],"b":')).toBe(true);
  expect(canonicalJson({ b: 1, a: [undefined, { d: undefined, c: null }] })).toBe('{"a":[null,{"c":null}],"b":1}');
  expect(canonicalJsonWithin({ a: "x".repeat(100) }, 50)).toBeNull();
  expect(canonicalJsonWithin({ a: "x" }, 50)).toBe('{"a":"x"}');
});
