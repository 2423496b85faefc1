// Token budgets over counted strings (minLength/maxLength), which the budget computes per chain of
// counts (content-chains.ts, chain-solver.ts) and masks per content class: checked against every
// token of small vocabularies, against a breadth-first search over whole vocabularies, and on
// Qwen3's vocabulary for the story schema of bench/grammar.ts under the default compile limits (but time, which bench/grammar.ts measures).
import { describe, expect, test } from "bun:test";
import { chainUnits, contentChains } from "../../src/structured/content-chains.ts";
import {
  compileJsonSchema,
  DEFAULT_COMPILE_LIMITS,
  type Grammar,
  GrammarMatcher,
  prepareCompletionFacts,
  type TokenVocabulary,
  vocabularyFromBytes,
  withCompileBudget,
} from "../../src/structured/index.ts";
import { mulberry32 } from "../engine/text/fixtures.ts";
import { allowedIds, budgetVocabularies, maskHas, QWEN_EOS, qwenVocab, tokensAfter, trickyVocabulary } from "./helpers.ts";

interface Counted {
  readonly schema: Record<string, unknown>;
  readonly min: number;
  readonly max: number;
}

const inObject = (s: Record<string, unknown>) => ({ type: "object", properties: { s: { type: "string", ...s } }, required: ["s"], additionalProperties: false });

const COUNTED: Record<string, Counted> = {
  "9 to 14 characters": { schema: inObject({ minLength: 9, maxLength: 14 }), min: 9, max: 14 },
  "exactly 8": { schema: inObject({ minLength: 8, maxLength: 8 }), min: 8, max: 8 },
  "at least 10": { schema: inObject({ minLength: 10 }), min: 10, max: Infinity },
  "at most 12": { schema: inObject({ maxLength: 12 }), min: 0, max: 12 },
  "a document that is a string of 9 to 12": { schema: { type: "string", minLength: 9, maxLength: 12 }, min: 9, max: 12 },
  "items of at most 10": { schema: { type: "array", items: { type: "string", maxLength: 10 }, minItems: 1, maxItems: 2 }, min: 0, max: 10 },
};

/** The strings of a document of one of COUNTED's schemas. */
const stringsOf = (value: unknown): string[] => (Array.isArray(value) ? value : typeof value === "string" ? [value] : [(value as { s: string }).s]);

const vocabularies: Array<[string, TokenVocabulary, number[]]> = [
  // Fragments of UTF-8 characters, escapes, quotes and long runs of multi-byte text; id 0 (no bytes) is the stop token.
  ["UTF-8 fragments and escapes", trickyVocabulary(3), [0]],
  ...budgetVocabularies(),
];

const decoder = new TextDecoder();
const has = maskHas;
const after = tokensAfter;

/** Tokens that test characters of several bytes and escapes (picked half the time on walks). */
const special = (vocab: TokenVocabulary, id: number) => {
  const b = vocab.bytes[id];
  return b !== null && b !== undefined && b.some((x) => x >= 0x80 || x === 0x5c);
};

/** The true fewest tokens to a finished document from the start: breadth-first over every token. */
function leastByBreadthFirst(g: Grammar, vocab: TokenVocabulary, stops: number[]): number {
  let frontier = [new GrammarMatcher(g, vocab, { stopTokenIds: stops })];
  const seen = new Set<string>();
  const mask = new Uint32Array(frontier[0]!.maskWords);
  for (let depth = 0; depth < 40 && frontier.length > 0; depth++) {
    if (frontier.some((m) => m.isComplete())) return depth + 1;
    const next: GrammarMatcher[] = [];
    for (const m of frontier) {
      m.fillNextTokenBitmask(mask);
      for (const id of allowedIds(mask, vocab.size)) {
        if (stops.includes(id)) continue;
        const c = m.clone();
        c.acceptToken(id);
        const key = c.stateKey();
        if (seen.has(key)) continue;
        seen.add(key);
        next.push(c);
      }
    }
    if (seen.size > 50_000) throw new Error("breadth-first search too wide");
    frontier = next;
  }
  throw new Error("no document within 40 tokens");
}

describe("counted strings", () => {
  test("each schema's string is a chain of counts whose states inside a character and after a backslash follow the decoding states (the path under test)", () => {
    for (const [name, c] of Object.entries(COUNTED)) {
      const g = compileJsonSchema(c.schema);
      const chains = contentChains(g);
      if (chains.length === 0) throw new Error(`${name}: no content chain`);
      for (const chain of chains) expect(chainUnits(g, chain)).not.toBeNull();
    }
  });

  for (const [vname, vocab, stops] of vocabularies) {
    test(`${vname}: from every state on walks through multi-byte characters and escapes, the count to finish is the least over all next tokens, and a budget keeps exactly the tokens that leave room`, () => {
      for (const [name, c] of Object.entries(COUNTED)) {
        const g = compileJsonSchema(c.schema);
        for (let seed = 1; seed <= 2; seed++) {
          const rand = mulberry32(seed);
          const m = new GrammarMatcher(g, vocab, { stopTokenIds: stops });
          const plain = new Uint32Array(m.maskWords);
          const budgeted = new Uint32Array(m.maskWords);
          let text = "";
          for (let step = 0; step < 40 && !m.isTerminated(); step++) {
            m.fillNextTokenBitmask(plain);
            const allowed = allowedIds(plain, vocab.size);
            const cost = new Map(allowed.map((id) => [id, after(m, id, stops)]));
            const best = Math.min(...cost.values());
            const least = m.tokensToFinish();
            if (best !== least) throw new Error(`${name} after ${JSON.stringify(text)}: ${least} tokens to finish, but the best next token leaves ${best}`);
            // At the minimum, one over it and two over it.
            const left = least + (step % 3);
            m.fillNextTokenBitmask(budgeted, left);
            for (const id of allowed) {
              if (has(budgeted, id) !== cost.get(id)! <= left) throw new Error(`${name} after ${JSON.stringify(text)} with ${left} left: token ${id} ${JSON.stringify(decoder.decode(vocab.bytes[id] ?? new Uint8Array()))} masked wrongly`);
            }
            const words = allowed.filter((id) => !stops.includes(id));
            const odd = words.filter((id) => special(vocab, id));
            const pool = odd.length > 0 && rand() < 0.5 ? odd : words;
            if (pool.length === 0) break;
            const pick = pool[Math.floor(rand() * pool.length)]!;
            m.acceptToken(pick);
            text += decoder.decode(vocab.bytes[pick]!, { stream: true });
          }
        }
      }
    }, 120_000);

    test(`${vname}: a budget exactly at the shortest document gives one within the counts, the least a search over every token finds; one token less cannot hold one`, () => {
      for (const [name, c] of Object.entries(COUNTED)) {
        const g = compileJsonSchema(c.schema);
        const least = new GrammarMatcher(g, vocab, { stopTokenIds: stops }).tokensToFinish();
        // The tricky vocabulary is too wide for a breadth-first search (thousands of tokens per state).
        if (vname !== "UTF-8 fragments and escapes") expect(leastByBreadthFirst(g, vocab, stops)).toBe(least);
        for (let seed = 1; seed <= 6; seed++) {
          const rand = mulberry32(seed);
          const m = new GrammarMatcher(g, vocab, { stopTokenIds: stops });
          const mask = new Uint32Array(m.maskWords);
          const bytes: number[] = [];
          for (let used = 0; !m.isTerminated(); used++) {
            if (used >= least) throw new Error(`${name}: budget ${least} spent on ${JSON.stringify(decoder.decode(Uint8Array.from(bytes)))}`);
            m.fillNextTokenBitmask(mask, least - used);
            const allowed = allowedIds(mask, vocab.size);
            const odd = allowed.filter((id) => special(vocab, id) && !stops.includes(id));
            const pool = odd.length > 0 && rand() < 0.5 ? odd : allowed;
            const pick = pool[Math.floor(rand() * pool.length)]!;
            m.acceptToken(pick);
            if (!stops.includes(pick)) bytes.push(...vocab.bytes[pick]!);
          }
          for (const s of stringsOf(JSON.parse(decoder.decode(Uint8Array.from(bytes))))) {
            expect([...s].length).toBeGreaterThanOrEqual(c.min);
            expect([...s].length).toBeLessThanOrEqual(c.max);
          }
        }
      }
    }, 120_000);
  }

  test("characters split across tokens: the shortest document ends a character in one token and finishes it in the next, and is found exactly", () => {
    const encoder = new TextEncoder();
    // Every byte is a token (so anything can be spelt), and: the start, 8 characters of three
    // bytes each, and the last bytes of 日 with the closing quote and brace.
    const pieces = [encoder.encode('{"s":"'), encoder.encode("日本日本日本日本"), Uint8Array.of(0xe6, 0x97), Uint8Array.of(0xa5, 0x22, 0x7d)];
    const bytes: (Uint8Array | null)[] = [null, ...Array.from({ length: 256 }, (_, b) => Uint8Array.of(b)), ...pieces];
    const vocab = vocabularyFromBytes(bytes);
    const stop = [0];
    const g = compileJsonSchema(inObject({ minLength: 10, maxLength: 10 }));
    // {"s":" + 日本日本日本日本 + x + [e6 97] + [a5 " }] and the stop token: 6. Closing with whole
    // characters takes x, x, ", } instead: 7.
    const m = new GrammarMatcher(g, vocab, { stopTokenIds: stop });
    expect(m.tokensToFinish()).toBe(6);
    expect(leastByBreadthFirst(g, vocab, stop)).toBe(6);
    // At 6 the budget forces that way; below it nothing fits.
    const mask = new Uint32Array(m.maskWords);
    const out: number[] = [];
    for (let used = 0; !m.isTerminated(); used++) {
      expect(used).toBeLessThan(6);
      m.fillNextTokenBitmask(mask, 6 - used);
      const pick = allowedIds(mask, vocab.size).at(-1)!;
      m.acceptToken(pick);
      if (pick !== 0) out.push(...vocab.bytes[pick]!);
    }
    expect([...JSON.parse(decoder.decode(Uint8Array.from(out))).s].length).toBe(10);
  });

  test("Qwen3's vocabulary: a string of 400 to 2,000 characters compiles with its budget tables under the default limits (but time), and a budget at its minimum ends in one", async () => {
    const vocab = await qwenVocab();
    prepareCompletionFacts(vocab);
    const schema = { type: "object", properties: { story: { type: "string", minLength: 400, maxLength: 2000 } }, required: ["story"], additionalProperties: false };
    // As the compile thread does (compile-worker.ts), under every default limit but the time: how
    // long it takes is bench/grammar.ts's to measure (the same story schema, under the default
    // --max-schema-seconds, in its table). Timed here, a busy machine failed it: even this
    // thread's CPU time doubles while another process spins on the other hyperthread.
    const { grammar, tables } = withCompileBudget(
      { ...DEFAULT_COMPILE_LIMITS, maxMillis: 60_000 },
      null,
      () => {
        const grammar = compileJsonSchema(schema);
        const m = new GrammarMatcher(grammar, vocab, { stopTokenIds: QWEN_EOS });
        m.prepareBudgetTables();
        return { grammar, tables: m.budgetTables() };
      },
    );
    // Every count of the string has its distance in the tables (2,000 positions and their states inside a character).
    expect(tables.offsets.length - 1).toBeGreaterThan(2000);
    const least = new GrammarMatcher(grammar, vocab, { stopTokenIds: QWEN_EOS }).tokensToFinish();
    expect(least).toBeGreaterThan(3);
    expect(least).toBeLessThan(30);
    for (const [seed, budget] of [[1, least], [2, least + 1], [3, 160]] as const) {
      const rand = mulberry32(seed);
      const m = new GrammarMatcher(grammar, vocab, { stopTokenIds: QWEN_EOS });
      const mask = new Uint32Array(m.maskWords);
      const bytes: number[] = [];
      for (let used = 0; !m.isTerminated(); used++) {
        expect(used).toBeLessThan(budget);
        expect(m.tokensToFinish()).toBeLessThanOrEqual(budget - used);
        m.fillNextTokenBitmask(mask, budget - used);
        const allowed = allowedIds(mask, vocab.size);
        // Every 97th allowed token, from a rotating offset: the room it leaves fits.
        for (let k = used % 97; k < allowed.length; k += 97) expect(after(m, allowed[k]!, QWEN_EOS)).toBeLessThanOrEqual(budget - used);
        const pick = allowed[Math.floor(rand() * allowed.length)]!;
        m.acceptToken(pick);
        if (!QWEN_EOS.includes(pick)) bytes.push(...vocab.bytes[pick]!);
      }
      const story: string = JSON.parse(decoder.decode(Uint8Array.from(bytes))).story;
      expect([...story].length).toBeGreaterThanOrEqual(400);
      expect([...story].length).toBeLessThanOrEqual(2000);
    }
  }, 120_000);
});
