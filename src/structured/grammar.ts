// A grammar is a set of rules (per-rule DFAs over bytes that may call other rules), flattened into
// one numbering of states. This flat form is what the matcher walks.

import { compileRe, lit, type Re, type RuleDfa } from "./automaton.ts";
import { budgetGrammarStates } from "./compile-budget.ts";

export interface Grammar {
  /** Canonical content key; equal keys mean equal languages (used for caching). */
  readonly key: string;
  readonly stateCount: number;
  /** stateCount*256 transitions, -1 = none. */
  readonly next: Int32Array;
  /** 1 when the state has at least one byte transition. */
  readonly hasBytes: Uint8Array;
  /** How many bytes have a transition from the state. */
  readonly byteCount: Uint16Array;
  /** 1 when the state's rule may end here. */
  readonly final: Uint8Array;
  /** Calls of state s are pairs at callOffset[s]..callOffset[s+1] in callStart/callReturn. */
  readonly callOffset: Int32Array;
  readonly callStart: Int32Array;
  readonly callReturn: Int32Array;
  /** Start state of the root rule; the text is complete when the root rule ends with an empty stack. */
  readonly start: number;
  /** Per state, the rule it belongs to; rule r's states start at ruleBase[r]. */
  readonly ruleOf: Int32Array;
  readonly ruleBase: Int32Array;
  /**
   * Per rule, its automaton when the rule calls nothing (string contents, numbers, formats,
   * enums), else null. Equal automata mean equal states, so per-state token masks of such rules
   * are shared across grammars (see state-masks.ts, leafId).
   */
  readonly leafRules: readonly (RuleDfa | null)[];
}

export class GrammarError extends Error {}

const fingerprints = new WeakMap<Grammar, number>();

/**
 * A cheap hash of a grammar's tables (its state count, start and a sample of its transitions):
 * caches kept by content key across grammar objects (a grammar compiled again for each request,
 * see content-chains.ts) check it too, a guard against two grammars of one key that differ (say,
 * compiled under other options), not a proof that two grammars are the same.
 */
export function grammarFingerprint(g: Grammar): number {
  let h = fingerprints.get(g);
  if (h === undefined) {
    h = g.stateCount ^ (g.start << 16);
    for (let i = 0; i < g.next.length; i += 251) h = Math.imul(h ^ g.next[i]!, 0x01000193);
    fingerprints.set(g, h);
  }
  return h;
}

/**
 * What is derived from a grammar's content, kept by grammar object and by content key: a model
 * worker gets a new grammar object for the same schema per compile (one larger than
 * --grammar-cache-mb is compiled again for each request), and deriving it again each time cost
 * milliseconds per request. `kept` bounds the content keys held (a few grammars: per-state arrays).
 */
export function byGrammarContent<T>(kept: number, derive: (g: Grammar) => T): (g: Grammar) => T {
  const byGrammar = new WeakMap<Grammar, T>();
  const byContent = new Map<string, { fingerprint: number; value: T }>();
  return (g) => {
    let value = byGrammar.get(g);
    if (value !== undefined) return value;
    const fingerprint = grammarFingerprint(g);
    const known = byContent.get(g.key);
    if (known && known.fingerprint === fingerprint) value = known.value;
    else {
      value = derive(g);
      if (byContent.size >= kept) byContent.delete(byContent.keys().next().value!);
      byContent.set(g.key, { fingerprint, value });
    }
    byGrammar.set(g, value);
    return value;
  };
}

/** Collects rules (which may refer to each other by id, recursively) and flattens them. */
export class GrammarBuilder {
  private readonly rules: (RuleDfa | null)[] = [];

  /** A rule id to call before its body is defined (for recursion). */
  reserve(): number {
    this.rules.push(null);
    return this.rules.length - 1;
  }

  define(id: number, body: Re): RuleDfa {
    const dfa = compileRe(body);
    this.defineDfa(id, dfa);
    return dfa;
  }

  /** Defines a rule by an automaton compiled before (e.g. cached from an earlier grammar). */
  defineDfa(id: number, dfa: RuleDfa): void {
    if (dfa.count === 0) throw new GrammarError(`rule ${id} matches nothing`);
    budgetGrammarStates(dfa.count);
    this.rules[id] = dfa;
  }

  /** Gives up a reserved rule whose body failed to compile; nothing may call it. */
  abandon(id: number): void {
    this.rules[id] = compileRe(lit("null"));
  }

  add(body: Re): number {
    const id = this.reserve();
    this.define(id, body);
    return id;
  }

  build(root: number, key: string): Grammar {
    const base: number[] = [];
    let total = 0;
    this.rules.forEach((r, i) => {
      if (!r) throw new GrammarError(`rule ${i} was reserved but never defined`);
      base.push(total);
      total += r.count;
    });
    const next = new Int32Array(total * 256).fill(-1);
    const hasBytes = new Uint8Array(total);
    const byteCount = new Uint16Array(total);
    const final = new Uint8Array(total);
    const callOffset = new Int32Array(total + 1);
    const starts: number[] = [];
    const returns: number[] = [];
    const ruleOf = new Int32Array(total);
    this.rules.forEach((r, i) => {
      const b = base[i];
      ruleOf.fill(i, b, b + r!.count);
      for (let s = 0; s < r!.count; s++) {
        const g = b + s;
        for (let c = 0; c < 256; c++) {
          const t = r!.next[s * 256 + c];
          if (t >= 0) {
            next[g * 256 + c] = b + t;
            hasBytes[g] = 1;
            byteCount[g]++;
          }
        }
        final[g] = r!.final[s];
        callOffset[g] = starts.length;
        const calls = r!.calls[s];
        for (let j = 0; j < calls.length; j += 2) {
          starts.push(base[calls[j]]);
          returns.push(b + calls[j + 1]);
        }
      }
    });
    callOffset[total] = starts.length;
    return {
      key,
      stateCount: total,
      next,
      hasBytes,
      byteCount,
      final,
      callOffset,
      callStart: Int32Array.from(starts),
      callReturn: Int32Array.from(returns),
      start: base[root],
      ruleOf,
      ruleBase: Int32Array.from(base),
      leafRules: this.rules.map((r) => (r!.calls.every((c) => c.length === 0) ? r : null)),
    };
  }
}
