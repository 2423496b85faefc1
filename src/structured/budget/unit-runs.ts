// Per grammar state, what a completion budget (../completion-budget.ts) works out once about the
// run of units the state reads alike (string characters, bytes of a class such as an email's
// letters): the states 0, 1, 2, ... units on, the class's lists of tokens, and how a search reads
// the state. Searches and walks ask these at every trie node they expand (hundreds of thousands
// on a large vocabulary), so they are kept per state, not worked out per node.

import { type ClassRuns, classRun, classRuns } from "../class-runs.ts";
import { chainFrom } from "../content-chains.ts";
import type { Grammar } from "../grammar.ts";
import type { TokenVocabulary } from "../token-bytes.ts";
import { contentRun } from "../token-walk.ts";
import { CONTENT_STEP } from "../trie.ts";
import { canLeave, classFactsOf, type ClassFacts, type VocabFacts } from "./vocab-facts.ts";

/** contentRun's "reads content forever". */
const ENDLESS = 1 << 20;

/** class-runs.ts's "not worked out yet". */
const UNKNOWN_RUN = -1;

/** How a search reads one state (see UnitRuns.walkPlan and search-moves.ts expand). */
export interface WalkPlan {
  /** Characters of string content it reads alike (contentRun). */
  readonly run: number;
  /** Bytes of its class it reads alike when it reads no content (classRuns). */
  readonly classRun: number;
  /** The vocabulary's lists of that class, when it has one. */
  readonly cls: ClassFacts | null;
  /** Per trie node, 1 where a path below it reaches a byte beyond the run (a token in progress that only reads inside it is not followed); null: every one is. */
  readonly below: Uint8Array | null;
  /** Whether byte b is read inside the run. */
  readonly inside: ((b: number) => boolean) | null;
}

export class UnitRuns {
  private readonly chains = new Map<number, Int32Array>();
  private readonly walkPlans: (WalkPlan | undefined)[] = [];
  private readonly classFactsByState = new Map<number, ClassFacts>();

  constructor(
    private readonly grammar: Grammar,
    private readonly vocab: TokenVocabulary,
    private readonly facts: VocabFacts,
  ) {}

  /**
   * States after 0, 1, 2, ... characters from s (at most run + 1 of them). A chain that loops
   * ends with its first repeated state, and loopIndex maps a longer count into the loop.
   */
  chain(s: number, run: number, unit: number): Int32Array {
    // A position of a counted string: a view of its chain (one array per chain, not per position).
    const counted = unit === 0x20 ? chainFrom(this.grammar, s) : null;
    if (counted) return counted;
    let ch = this.chains.get(s);
    if (!ch) {
      const g = this.grammar;
      const list = [s];
      const seen = new Map<number, number>([[s, 0]]);
      let x = s;
      for (let k = 0; k < Math.min(run, ENDLESS - 1); k++) {
        x = g.next[x * 256 + unit];
        const at = seen.get(x);
        if (at !== undefined) {
          list.push(x);
          break;
        }
        seen.set(x, list.length);
        list.push(x);
      }
      ch = Int32Array.from(list);
      this.chains.set(s, ch);
    }
    return ch;
  }

  /**
   * How a search reads state `s`: its run of string characters or of a byte class, and what a
   * token in progress may skip there. The same for every trie node the state expands (hundreds of
   * thousands on a large vocabulary), so worked out once per state.
   */
  walkPlan(s: number): WalkPlan {
    const known = this.walkPlans[s];
    if (known) return known;
    const g = this.grammar;
    const run = contentRun(g, s);
    const classes = classRuns(g);
    const classRun_ = run === 0 ? classRunOf(g, classes, s) : 0;
    const cls = run <= 0 && classRun_ > 0 ? this.classFacts(classes.outside, s) : null;
    // Inside a token, what a state reads alike (string content, a class such as an email's
    // letters) is read only on the way to a byte beyond it when the state could stop reading it
    // here: a token that only adds such bytes is never cheaper than going on without them.
    let below: Uint8Array | null = null;
    let inside: ((b: number) => boolean) | null = null;
    if (run > 0 && g.next[s * 256 + 0x22] >= 0) {
      below = this.facts.exitBelow;
      inside = (b) => CONTENT_STEP[b] >= 0;
    } else if (cls && canLeave(g, s, classes.outside)) {
      below = cls.exitBelow;
      inside = (b) => (classes.outside[s * 8 + (b >>> 5)] & (1 << (b & 31))) === 0;
    }
    const plan = { run, classRun: classRun_, cls, below, inside };
    this.walkPlans[s] = plan;
    return plan;
  }

  /** The per-vocabulary lists of a byte class (see ClassFacts), by the class's bytes. */
  classFacts(outside: Int32Array, s: number): ClassFacts {
    // Asked at every trie node a class state expands (hundreds of thousands on a large
    // vocabulary): looked up by the class's bytes once per state, not once per node.
    let f = this.classFactsByState.get(s);
    if (f === undefined) this.classFactsByState.set(s, (f = classFactsOf(this.vocab, outside.subarray(s * 8, s * 8 + 8))));
    return f;
  }
}

/** Bytes of its class state s reads in a row (class-runs.ts), worked out on first asking. */
export function classRunOf(g: Grammar, classes: ClassRuns, s: number): number {
  const run = classes.run[s];
  return run === UNKNOWN_RUN ? classRun(g, classes, s) : run;
}

/** Where count k falls in a chain (see UnitRuns.chain) that ends with a repeat of an earlier state: from there it cycles. */
export function loopIndex(chain: Int32Array, k: number): number {
  const last = chain[chain.length - 1];
  const start = chain.indexOf(last);
  const period = chain.length - 1 - start;
  return start + ((k - start) % period);
}

/**
 * Each way out of a run of `run` units (characters or class bytes) that an exits list names (per
 * byte: flat (trie node, units before the byte), by units): the byte read by the state that many
 * units on (`from`, given by `at`), where it leads (`to`) when it leads anywhere.
 */
export function forEachExit(
  g: Grammar,
  exits: readonly (Int32Array | null)[],
  run: number,
  at: (k: number) => number,
  visit: (exit: number, to: number, from: number, b: number) => void,
): void {
  for (let b = 0; b < 256; b++) {
    const list = exits[b];
    if (!list) continue;
    for (let e = 0; e < list.length; e += 2) {
      const k = list[e + 1];
      if (k > run) break;
      const from = at(k);
      const to = g.next[from * 256 + b];
      if (to >= 0) visit(list[e], to, from, b);
    }
  }
}
