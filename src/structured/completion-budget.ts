// How many tokens of this vocabulary it takes, at fewest, to finish the document from a parser
// state, and which next tokens still leave a finish within a given number of tokens. The engine
// uses it to close a document before the client's token budget runs out (see
// GrammarMatcher.fillNextTokenBitmask) and to refuse up front a budget too small for any
// document.
//
// The count is over tokens, not bytes: one token may close a string, a member and an object at
// once (`"}}`), so the rules on the stack cannot be costed one by one. The parser state is a
// rule state plus a stack of return states; what couples two rules is only the token left open
// where one ends and the next goes on. So each (state, partial token) pair gets its "exits":
// for each trie node the token in progress may be at when the state's rule ends, the fewest
// tokens cut before that (a shortest path where bytes inside a token cost nothing and each token
// boundary costs one). Such a search only follows the bytes of the token in progress: at a token
// boundary inside the rule it takes the exits of (that state, no partial token), at a call those
// of (the callee's start, the partial token), as other searches it waits on. Recursive rules wait
// on each other; all pending searches run together as one label-correcting shortest path. The
// distance of a state with a stack is then its exits folded through the exits of each return
// state, which depend on the grammar alone and are cached.
//
// Moves left out, because they only lengthen a completion (no vocabulary we know makes them
// shorter) and would take the search through most of the vocabulary: string content read inside
// a token that does not go on past the string's end, string content tokens ending inside a UTF-8
// character (outside counted strings) or longer than the state reads alike, an optional newline
// (layout) and a backslash that starts an escape where the state has another way on. String
// contents are not walked byte by byte: a state that reads every character alike (see
// token-walk.ts contentRun) is left through tokens of k characters, or through the first byte
// after k characters that is not content (a closing quote), listed once per vocabulary
// (content-below.ts; also below any trie node, for a token in progress). The positions of a
// counted string (minLength/maxLength: one state per count) are solved all at once per string
// before the first search (chain-solver.ts), and a budget mask at one of them takes its tokens of
// content by class (whole characters, decoding state at the end) rather than one by one. The
// distance is the exact minimum over the moves followed, so it never promises a finish that does
// not exist: after any token it allows, one that keeps the promise is allowed again (the tests
// check it against every token of small vocabularies). A search that the same rule had done in
// another grammar is taken from that rule's table instead (rule-tables.ts): json_object's whole
// grammar and the built-in formats have theirs computed once per model (built-in-tables.ts).

import { budgetTick, budgetTimeLeft } from "./compile-budget.ts";
import type { Grammar } from "./grammar.ts";
import { Configs, type Stack, type StackPool, simpleStates } from "./parser-state.ts";
import type { TokenVocabulary } from "./token-bytes.ts";
import { classRun, classRuns } from "./class-runs.ts";
import { type ChainContext, type ChainExits, chainDependencies, solveChain } from "./chain-solver.ts";
import { contentBelow, contentClasses, contentFrom, ENDS_INSIDE, PARTIAL_FIELDS } from "./content-below.ts";
import { chainFrom, chainPosition, chainUnits, chainUnitsAt, contentChains, runAt, stateAfter } from "./content-chains.ts";
import { byteDistancesWhere } from "./distances.ts";
import { ruleKey, ruleShapes } from "./rule-keys.ts";
import { type RuleTableData, type RuleTables, ServedRules } from "./rule-tables.ts";
import { contentRun, Levels } from "./token-walk.ts";
import { CONTENT_STEP, type TokenTrie } from "./trie.ts";

import { canLeave, classFactsOf, factsOf, prefixesAt, ROOT, type ClassFacts, type VocabFacts } from "./completion-facts.ts";
import { followBytes, loopIndex, optionalBytes, skipped } from "./completion-bytes.ts";
export { prepareCompletionFacts } from "./completion-facts.ts";
/** No way to finish. */
export const UNREACHABLE = 1 << 29;
/** contentRun's "reads content forever". */
const ENDLESS = 1 << 20;

const UNKNOWN_RUN = -1;

/** How CompletionBudget.expand reads one state (see walkPlan). */
interface WalkPlan {
  readonly run: number;
  readonly classRun: number;
  readonly cls: ClassFacts | null;
  readonly below: Uint8Array | null;
  readonly inside: ((b: number) => boolean) | null;
}

// ---------------------------------------------------------------------------------------------

/** A rule's ways out from one (state, partial token): trie node at the rule's end and tokens cut before it. */
interface Exits {
  readonly nodes: Int32Array;
  readonly costs: Int32Array;
}

/**
 * One (state, partial token) whose exits are wanted. Its own search covers only the bytes of the
 * token in progress: where a token ends inside the rule, the rest is the exits of (that state,
 * no partial token), another origin it waits on; where it calls a rule, it waits on the callee's
 * origin for that partial token.
 */
interface Origin {
  readonly state: number;
  readonly node: number;
  /** Exit node to fewest tokens cut. */
  readonly exits: Map<number, number>;
  /** Those waiting for these exits, flat triples: origin index, return state (-1: the exit is theirs too), cost so far. */
  readonly waiters: number[];
  /** Best cost per (state, node) of its search, while searches run. */
  items: Map<number, number> | null;
  /** The exits as arrays, once every search has finished. */
  frozen: Exits | null;
  /**
   * In the root rule, when nothing calls it, exits are only ever ended with the document: the
   * cheapest exit found so far; items costing as much are not searched further.
   */
  cap: number;
  /** Taken from a rule's table (rule-tables.ts): not exported with this grammar's own. */
  readonly shared: boolean;
}

/** The exits and waiters of searches found finished (adopted, or solved per chain): never written. */
const NO_EXITS = new Map<number, number>();
const NO_WAITERS: number[] = [];

/** Past this many cached entries a table starts over (values are recomputed on demand). */
const MEMO_LIMIT = 400_000;
/** Parser states whose next-token profile is kept (oldest dropped first). */
const PROFILE_LIMIT = 4096;

/** The next tokens of a parser state by the distance to the end each leaves. */
export interface NextProfile {
  /** The largest distance (UNREACHABLE when some token leads where no token sequence finishes). */
  readonly max: number;
  /** Distance to lists of ranges [lo, hi) of trie.sortedIds, flat pairs. */
  readonly groups: ReadonlyMap<number, readonly (readonly number[])[]>;
}

/**
 * What a budget has computed that depends only on its grammar and vocabulary: the finished
 * searches' exits and the per-state token reach, as arrays another thread can take over (see
 * adoptCompletionTables). The engine computes them where it compiles the grammar, not on the loop
 * that decodes: on a large vocabulary they take from tens of milliseconds to seconds.
 */
export interface CompletionTables {
  /** The vocabulary's trie size: tables apply only to the vocabulary they were computed on. */
  readonly nodeCount: number;
  /** Per finished search: its state and partial token (trie node), flat pairs. */
  readonly origins: Int32Array;
  /** Search i's exits are exitNodes/exitCosts[offsets[i] .. offsets[i + 1]). */
  readonly offsets: Int32Array;
  readonly exitNodes: Int32Array;
  readonly exitCosts: Int32Array;
  readonly reach: Float64Array | null;
  /** Per-grammar arrays the budget starts from (fixed points over every state: slow on large grammars). */
  readonly follow: Uint32Array;
  readonly skipByte: Uint8Array;
  readonly bytesLeft: Float64Array;
}

const adopted = new WeakMap<Grammar, CompletionTables>();

/** Budgets of `g` created from now on start from these tables (computed by another thread). */
export function adoptCompletionTables(g: Grammar, tables: CompletionTables): void {
  adopted.set(g, tables);
}

/** Bytes the tables hold (for the memory bound of a grammar cache). */
export function completionTablesBytes(t: CompletionTables): number {
  const n = t.origins.byteLength + t.offsets.byteLength + t.exitNodes.byteLength + t.exitCosts.byteLength + (t.reach?.byteLength ?? 0);
  return n + t.follow.byteLength + t.skipByte.byteLength + t.bytesLeft.byteLength;
}

/** Token-level completion distances of one grammar on one vocabulary (shared by its matchers). */
export class CompletionBudget {
  private readonly facts: VocabFacts;
  private readonly trie: TokenTrie;
  private readonly nodes: number;
  private origins: Origin[] = [];
  private originIds = new Map<number, number>();
  /** Origins whose searches run (unfrozen), frozen together when nothing is left to search (see run). */
  private readonly pending: number[] = [];
  /** Pending search items per cost, flat triples (origin, state, node); see run. */
  private readonly buckets: number[][] = [];
  private low = 0;
  private readonly d1Memo = new Map<number, number>();
  private readonly popMemo = new Map<number, number>();
  private readonly sameMemo = new Map<number, { readonly d: number; readonly upTo: number }>();
  private readonly profiles = new Map<string, NextProfile>();
  private readonly configMemo = new WeakMap<Configs, number>();
  private readonly chains = new Map<number, Int32Array>();
  private reach: Float64Array | undefined;
  private readonly follow: Uint32Array;
  /** Which rule tables of other grammars serve this grammar's rules (rule-tables.ts). */
  private readonly served: ServedRules;
  private readonly skipByte: Uint8Array;
  private readonly bytesLeft: Float64Array;
  private readonly levels = new Levels();
  private readonly rootRule: number;
  /** Nothing calls the root rule (see Origin.cap). */
  private readonly rootAlone: boolean;
  /** The grammar's content chains have their positions' exits (see solveChains). */
  private chainsSolved = false;

  /**
   * `open`: searches as though any byte could follow every rule and something called the root
   * (no exit left out, no cap), for tables that serve the same rules in any grammar (see
   * rule-tables.ts and built-in-tables.ts).
   */
  constructor(
    readonly grammar: Grammar,
    readonly vocab: TokenVocabulary,
    private readonly pool: StackPool,
    open = false,
  ) {
    this.facts = factsOf(vocab);
    this.trie = vocab.trie;
    this.nodes = this.trie.nodeCount;
    let tables = adopted.get(grammar);
    if (tables && tables.nodeCount !== this.nodes) tables = undefined;
    if (tables) {
      this.follow = tables.follow;
      this.skipByte = tables.skipByte;
      this.bytesLeft = tables.bytesLeft;
    } else {
      this.follow = followBytes(grammar);
      this.skipByte = optionalBytes(grammar);
      const skip = this.skipByte;
      this.bytesLeft = byteDistancesWhere(grammar, (state, b) => !skipped(skip[state], b));
    }
    if (open) this.follow = new Uint32Array(this.follow.length).fill(0xffffffff);
    this.rootRule = grammar.ruleOf[grammar.start];
    this.rootAlone = !open && !grammar.callStart.some((x) => grammar.ruleOf[x] === this.rootRule);
    this.served = new ServedRules(grammar, vocab, this.follow, (rule) => this.rootAlone && rule === this.rootRule);
    if (tables) this.adopt(tables);
  }

  /** The tables this budget computed so far (see CompletionTables); their buffers may be transferred. */
  exportTables(): CompletionTables {
    // Those taken from rule tables: the thread that adopts these has the same rule tables.
    const done = this.origins.filter((o) => o.frozen !== null && !o.shared);
    return {
      nodeCount: this.nodes,
      ...flatExits(done, 0),
      reach: this.reach ? this.reach.slice() : null,
      follow: this.follow.slice(),
      skipByte: this.skipByte.slice(),
      bytesLeft: this.bytesLeft.slice(),
    };
  }

  private adopt(t: CompletionTables): void {
    for (let i = 0; i < t.offsets.length - 1; i++) {
      const state = t.origins[2 * i];
      const node = t.origins[2 * i + 1];
      const frozen = { nodes: t.exitNodes.subarray(t.offsets[i], t.offsets[i + 1]), costs: t.exitCosts.subarray(t.offsets[i], t.offsets[i + 1]) };
      this.originIds.set(state * this.nodes + node, this.origins.length);
      // A finished search's exits and waiters are never touched again: shared empty ones (tens of thousands for a long string).
      this.origins.push({ state, node, exits: NO_EXITS, waiters: NO_WAITERS, items: null, frozen, cap: UNREACHABLE, shared: false });
    }
    if (t.reach) this.reach = t.reach;
  }

  /**
   * Fewest tokens that finish the document from `c` (0 when it is complete), stop token not
   * counted. `c` must not change afterwards unless `remember` is false.
   */
  distance(c: Configs, remember = true): number {
    if (c.bottom) return 0;
    const known = remember ? this.configMemo.get(c) : undefined;
    if (known !== undefined) return known;
    let best = UNREACHABLE;
    for (let i = 0; i < c.size; i++) best = Math.min(best, this.stateDistance(c.states[i], c.stacks[i]));
    if (remember) this.configMemo.set(c, best);
    return best;
  }

  /** Fewest tokens from resting state s with stack st to the end of the document. */
  stateDistance(s: number, st: Stack | null): number {
    if (st === null && this.grammar.final[s]) return 0;
    const key = (st ? st.id : 0) * this.grammar.stateCount + s;
    let d = this.d1Memo.get(key);
    if (d === undefined) {
      const e = this.exits(s, ROOT);
      d = UNREACHABLE;
      for (let k = 0; k < e.nodes.length; k++) d = Math.min(d, e.costs[k] + this.pop(e.nodes[k], st));
      if (this.d1Memo.size >= MEMO_LIMIT) this.d1Memo.clear();
      this.d1Memo.set(key, d);
    }
    return d;
  }

  /** Fewest tokens to finish once the current rule has ended with token `node` in progress. */
  private pop(node: number, st: Stack | null): number {
    if (st === null) return node === ROOT ? 0 : this.trie.tokCount[node] > 0 ? 1 : UNREACHABLE;
    const key = st.id * this.nodes + node;
    let d = this.popMemo.get(key);
    if (d === undefined) {
      const e = this.exits(st.ret, node);
      d = UNREACHABLE;
      for (let k = 0; k < e.nodes.length; k++) d = Math.min(d, e.costs[k] + this.pop(e.nodes[k], st.next));
      if (this.popMemo.size >= MEMO_LIMIT) this.popMemo.clear();
      this.popMemo.set(key, d);
    }
    return d;
  }

  /** The exits of (state, partial token), searched for (with all they wait on) when first asked. */
  private exits(s: number, node: number): Exits {
    const started = this.start(s, node);
    if (typeof started !== "number") return started;
    this.run();
    return this.origins[started].frozen!;
  }

  /** The exits of (s, node) when known, else the origin whose search is now pending (see run). */
  private start(s: number, node: number): Exits | number {
    const found = this.frozenExits(s, node);
    if (found) return found;
    // Not while a search is under way (see searches): its items name origins by number.
    if (this.origins.length >= MEMO_LIMIT && this.buckets.length === 0) {
      this.origins = [];
      this.originIds = new Map();
      this.pending.length = 0;
      this.chainsSolved = false;
    }
    if (!this.chainsSolved) {
      this.chainsSolved = true;
      this.solveChains();
      const solved = this.frozenExits(s, node);
      if (solved) return solved;
    }
    return this.origin(s, node);
  }

  /**
   * Searches every resting state at a token boundary (in state order) while `ms` milliseconds
   * last: the states a budget mask meets after a token that its first searches did not reach
   * (inside a key, after a newline). Done where the grammar is compiled, so that a tight first
   * request does not search them on the loop that decodes (275 ms in one step for json_object on
   * Qwen3's vocabulary). Each search runs whole; the time only decides whether to start the next,
   * and under a compile budget none starts once half its time limit is spent (so that no schema is
   * refused for these: they are a cache).
   */
  searchStates(ms: number): void {
    const stop = performance.now() + ms;
    for (const _ of this.searches()) if (performance.now() > stop || budgetTimeLeft() < 0.5) return;
  }

  /**
   * Every search the budget can need, one by one: it yields before each (the caller decides
   * whether to go on, see searchStates) and, with `items`, also within one every that many search
   * items (one search may wait on thousands of others and take a quarter of a second: a thread
   * that answers other work in between yields there too); it ends when all are done. First every
   * resting state at a token boundary (in state order), then where a rule ends with a token in
   * progress, each caller's return state going on with it (what distances of states with a stack
   * fold in, see pop), also for the searches those add, until none is left.
   */
  *searches(items = Infinity): Generator<void, void, void> {
    const g = this.grammar;
    const search = function* (budget: CompletionBudget, s: number, node: number): Generator<void, void, void> {
      if (typeof budget.start(s, node) === "number") while (!budget.run(items)) yield;
    };
    for (let s = 0; s < g.stateCount; s++) {
      if (!g.hasBytes[s] || this.frozenExits(s, ROOT) !== null) continue;
      yield;
      yield* search(this, s, ROOT);
    }
    const returns: number[][] = Array.from({ length: g.ruleBase.length }, () => []);
    for (let j = 0; j < g.callStart.length; j++) returns[g.ruleOf[g.callStart[j]]].push(g.callReturn[j]);
    const seen = new Set<number>();
    for (let o = 0; o < this.origins.length; o++) {
      const { state, frozen } = this.origins[o];
      if (!frozen) continue;
      for (const node of frozen.nodes) {
        if (node === ROOT) continue;
        for (const r of returns[g.ruleOf[state]]) {
          const key = r * this.nodes + node;
          if (seen.has(key) || this.frozenExits(r, node) !== null) continue;
          seen.add(key);
          yield;
          yield* search(this, r, node);
        }
      }
    }
  }

  /** The exits of (s, node) when a search found them, or a rule table has them (taken now), else null. */
  private frozenExits(s: number, node: number): Exits | null {
    const id = this.originIds.get(s * this.nodes + node) ?? this.fromRuleTables(s, node);
    return id === undefined ? null : this.origins[id].frozen;
  }

  /**
   * The exits of (s, node) from a table of s's rule kept for another grammar (rule-tables.ts),
   * those whose token can go on with a byte that may follow the rule here, recorded as a finished
   * search of this grammar; undefined when no table has them.
   */
  private fromRuleTables(s: number, node: number): number | undefined {
    const g = this.grammar;
    const rule = g.ruleOf[s];
    const tables = this.served.tables(rule);
    if (!tables) return undefined;
    const local = s - g.ruleBase[rule];
    for (const table of tables) {
      const e = table.exits(local, node);
      if (!e) continue;
      let nodes = e.nodes;
      let costs = e.costs;
      const follow = this.follow.subarray(rule * 8, rule * 8 + 8);
      if (follow.some((w, i) => w !== table.data.follow[i])) {
        const kept: number[] = [];
        for (let k = 0; k < nodes.length; k++) if (nodes[k] === ROOT || this.goesOn(nodes[k], rule)) kept.push(k);
        nodes = Int32Array.from(kept, (k) => e.nodes[k]);
        costs = Int32Array.from(kept, (k) => e.costs[k]);
      }
      const id = this.origins.length;
      this.originIds.set(s * this.nodes + node, id);
      this.origins.push({ state: s, node, exits: NO_EXITS, waiters: NO_WAITERS, items: null, frozen: { nodes, costs }, cap: UNREACHABLE, shared: true });
      return id;
    }
    return undefined;
  }

  /**
   * This grammar's finished searches per rule, as tables for other grammars with the same rules
   * (rule-tables.ts); those taken from such tables are left out.
   */
  exportRuleTables(): RuleTables {
    const g = this.grammar;
    const byRule = new Map<number, Origin[]>();
    for (const o of this.origins) {
      if (!o.frozen || o.shared) continue;
      const rule = g.ruleOf[o.state];
      let list = byRule.get(rule);
      if (!list) byRule.set(rule, (list = []));
      list.push(o);
    }
    const rules: RuleTableData[] = [];
    for (const [rule, list] of byRule) {
      const key = ruleKey(g, rule)!;
      rules.push({ key, follow: this.follow.slice(rule * 8, rule * 8 + 8), capped: this.rootAlone && rule === this.rootRule, ...flatExits(list, g.ruleBase[rule]) });
    }
    return { nodeCount: this.nodes, rules, shapes: [...new Set(ruleShapes(g))] };
  }

  /**
   * The exits of every position of the grammar's counted string contents, each chain at once
   * (content-chains.ts): the searches they continue into first, then the positions from the end of
   * the chain back. Run before the first search, so that searches reaching a position find it
   * finished instead of searching it as a state of its own.
   */
  private solveChains(): void {
    const g = this.grammar;
    const cx: ChainContext = {
      grammar: g,
      vocab: this.vocab,
      skipped: (s, b) => skipped(this.skipByte[s], b),
    };
    for (const chain of contentChains(g)) {
      const units = chainUnits(g, chain);
      const states = [...chain.positions];
      if (units) for (let k = 0; k < chain.positions.length; k++) states.push(...units.mid.subarray(k * 8 + 1, k * 8 + 8), units.escape[k]);
      if (states.every((s) => s < 0 || this.frozenExits(s, ROOT) !== null)) continue;
      chainDependencies(cx, chain, units, (state, node) => void this.origin(state, node));
      this.run();
      const solved = solveChain(cx, chain, units, (state, node) => this.frozenExits(state, node)!, (state) => this.frozenExits(state, ROOT));
      const keep = this.rootAlone && g.ruleOf[chain.positions[0]] === this.rootRule ? (e: ChainExits) => this.cheapestEnds(e) : (e: ChainExits) => e;
      solved.forEach((p, k) => {
        this.freeze(chain.positions[k], keep(p.boundary));
        if (!units) return;
        for (let q = 1; q < 8; q++) if (p.mid[q]) this.freeze(units.mid[k * 8 + q], keep(p.mid[q]!));
        if (p.escape) this.freeze(units.escape[k], keep(p.escape));
      });
    }
  }

  /**
   * In the root rule, when nothing calls it, an exit ends the document: only those that end it
   * in the fewest tokens matter (a token in progress is one more; see pop and Origin.cap). The
   * rest only fill the tables (megabytes for the 2,000 positions of a long string).
   */
  private cheapestEnds(e: ChainExits): ChainExits {
    const t = this.trie;
    const total = (i: number) => e.costs[i] + (e.nodes[i] === ROOT ? 0 : t.tokCount[e.nodes[i]] > 0 ? 1 : UNREACHABLE);
    let least = UNREACHABLE;
    for (let i = 0; i < e.nodes.length; i++) least = Math.min(least, total(i));
    const kept: number[] = [];
    for (let i = 0; i < e.nodes.length; i++) if (total(i) === least) kept.push(i);
    if (kept.length === e.nodes.length) return e;
    return { nodes: Int32Array.from(kept, (i) => e.nodes[i]), costs: Int32Array.from(kept, (i) => e.costs[i]) };
  }

  /** Records the exits of (state, no token in progress) found without a search of its own. */
  private freeze(state: number, exits: ChainExits): void {
    const key = state * this.nodes + ROOT;
    if (this.originIds.has(key)) return;
    this.originIds.set(key, this.origins.length);
    this.origins.push({ state, node: ROOT, exits: NO_EXITS, waiters: NO_WAITERS, items: null, frozen: exits, cap: UNREACHABLE, shared: false });
  }

  private origin(s: number, node: number): number {
    const key = s * this.nodes + node;
    let id = this.originIds.get(key) ?? this.fromRuleTables(s, node);
    if (id === undefined) {
      id = this.origins.length;
      this.origins.push({ state: s, node, exits: new Map(), waiters: [], items: new Map(), frozen: null, cap: UNREACHABLE, shared: false });
      this.originIds.set(key, id);
      this.pending.push(id);
      this.relax(id, s, node, 0);
    }
    return id;
  }

  private relax(o: number, s: number, node: number, c: number): void {
    const items = this.origins[o].items!;
    const key = s * this.nodes + node;
    const old = items.get(key);
    if (old !== undefined && old <= c) return;
    items.set(key, c);
    (this.buckets[c] ??= []).push(o, s, node);
    if (c < this.low) this.low = c;
  }

  /** `o` waits on origin `t`: each exit of t continues o's search at `ret` (or is o's exit, ret -1). */
  private wait(t: number, o: number, ret: number, c: number): void {
    const target = this.origins[t];
    if (target.frozen) {
      // Finished (possibly in another thread, see adopt): its exits are final, no need to wait.
      const f = target.frozen;
      for (let k = 0; k < f.nodes.length; k++) this.deliver(o, ret, f.nodes[k], c + f.costs[k]);
      return;
    }
    target.waiters.push(o, ret, c);
    for (const [node, cost] of target.exits) this.deliver(o, ret, node, c + cost);
  }

  private deliver(o: number, ret: number, node: number, c: number): void {
    if (ret < 0) this.addExit(o, node, c);
    else this.relax(o, ret, node, c);
  }

  private addExit(o: number, node: number, c: number): void {
    const origin = this.origins[o];
    // A token that cannot go on with a byte that may follow the rule is cut at its end (that
    // path is an exit at the root, one token later).
    if (node !== ROOT && !this.goesOn(node, this.grammar.ruleOf[origin.state])) return;
    const old = origin.exits.get(node);
    if (old !== undefined && old <= c) return;
    origin.exits.set(node, c);
    if (this.rootAlone && this.grammar.ruleOf[origin.state] === this.rootRule) {
      origin.cap = Math.min(origin.cap, node === ROOT ? c : c + 1);
    }
    const w = origin.waiters;
    for (let k = 0; k < w.length; k += 3) this.deliver(w[k], w[k + 1], node, w[k + 2] + c);
  }

  /** Whether the token in progress at `node` can go on with a byte that may follow `rule`. */
  private goesOn(node: number, rule: number): boolean {
    const t = this.trie;
    const fo = rule * 8;
    for (let child = node + 1; child < t.end[node]; child = t.end[child]) {
      const b = t.byte[child];
      if ((this.follow[fo + (b >>> 5)] & (1 << (b & 31))) !== 0) return true;
    }
    return false;
  }

  /**
   * Runs every pending search to its end. Costs only grow along a search, so items are taken
   * cheapest first; an exit found late can still lower items already taken in a waiting origin
   * (recursive rules wait on each other), which are then taken again: this is a label-correcting
   * shortest path, exact once nothing is pending. Searches that have ended keep only their exits.
   * With `items`, it stops after that many items and returns false (the next call goes on);
   * true once nothing is pending.
   */
  private run(items = Infinity): boolean {
    const b = this.buckets;
    let left = items;
    while (this.low < b.length) {
      const bucket = b[this.low];
      if (!bucket || bucket.length === 0) {
        this.low++;
        continue;
      }
      // Stopped here, the search goes on at the next call (the items wait in their buckets).
      if (left-- <= 0) return false;
      const c = this.low;
      // Under a compile budget (the compile thread prepares these tables): its time limit and cancellation.
      budgetTick();
      const node = bucket.pop()!;
      const s = bucket.pop()!;
      const o = bucket.pop()!;
      if (this.origins[o].items!.get(s * this.nodes + node)! < c) continue;
      this.expand(o, s, node, c);
    }
    b.length = 0;
    this.low = 0;
    for (const o of this.pending) {
      const origin = this.origins[o];
      const nodes = new Int32Array(origin.exits.size);
      const costs = new Int32Array(origin.exits.size);
      let k = 0;
      for (const [n, cost] of origin.exits) ((nodes[k] = n), (costs[k] = cost), k++);
      origin.frozen = { nodes, costs };
      origin.items = null;
    }
    this.pending.length = 0;
    return true;
  }

  private expand(o: number, s: number, node: number, c: number): void {
    const g = this.grammar;
    const t = this.trie;
    const origin = this.origins[o];
    if (c >= origin.cap) return;
    if (node !== ROOT && t.tokCount[node] > 0) this.relax(o, s, ROOT, c + 1);
    if (node === ROOT && !(s === origin.state && origin.node === ROOT)) {
      // A token ended inside the rule: the rest is that state's own exits.
      this.wait(this.origin(s, ROOT), o, -1, c);
      return;
    }
    if (g.final[s]) this.addExit(o, node, c);
    for (let j = g.callOffset[s]; j < g.callOffset[s + 1]; j++) this.wait(this.origin(g.callStart[j], node), o, g.callReturn[j], c);
    if (!g.hasBytes[s]) return;
    const { run, classRun: classRun_, cls, below, inside } = this.walkPlan(s);
    if (run > 0 && node === ROOT) {
      const f = this.facts;
      this.runMoves(o, s, c, run, 0x20, f.contentTokenChars, f.exits);
      return;
    }
    if (run > 0) {
      this.runMovesBelow(o, s, node, c, run);
      return;
    }
    if (cls && node === ROOT) {
      this.runMoves(o, s, c, classRun_, cls.first, cls.lengths, cls.exits);
      return;
    }
    const skip = this.skipByte[s];
    for (let child = node + 1; child < t.end[node]; child = t.end[child]) {
      const b = t.byte[child];
      if (skip && skipped(skip, b)) continue;
      if (below && !below[child] && inside!(b)) continue;
      const to = g.next[s * 256 + b];
      if (to >= 0) this.relax(o, to, child, c);
    }
  }

  /**
   * How expand reads state `s`: its run of string characters or of a byte class, and what a
   * token in progress may skip there. The same for every trie node the state expands (hundreds of
   * thousands on a large vocabulary), so worked out once per state.
   */
  private walkPlan(s: number): WalkPlan {
    const known = this.walkPlans[s];
    if (known) return known;
    const g = this.grammar;
    const run = contentRun(g, s);
    const classes = classRuns(g);
    let classRun_ = 0;
    if (run === 0) {
      classRun_ = classes.run[s];
      if (classRun_ === UNKNOWN_RUN) classRun_ = classRun(g, classes, s);
    }
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
  private readonly walkPlans: (WalkPlan | undefined)[] = [];

  /** The per-vocabulary lists of a byte class (see ClassFacts), by the class's bytes. */
  private classFacts(outside: Int32Array, s: number): ClassFacts {
    // Asked at every trie node a class state expands (hundreds of thousands on a large
    // vocabulary): looked up by the class's bytes once per state, not once per node.
    let f = this.classFactsByState.get(s);
    if (f === undefined) this.classFactsByState.set(s, (f = classFactsOf(this.vocab, outside.subarray(s * 8, s * 8 + 8))));
    return f;
  }
  private readonly classFactsByState = new Map<number, ClassFacts>();

  /**
   * Tokens from a token boundary at a state that reads `run` units alike (string characters, or
   * bytes of a class), `unit` being one of them: k units (to the state k units on, for each k
   * some token has), or k units and then a byte beyond them, continued in the state that byte
   * leads to with the token still open.
   */
  private runMoves(o: number, s: number, c: number, run: number, unit: number, lengths: Int32Array, exits: readonly (Int32Array | null)[]): void {
    const g = this.grammar;
    const chain = this.chain(s, run, unit);
    const at = (k: number) => chain[k < chain.length ? k : loopIndex(chain, k)];
    for (const k of lengths) {
      if (k > run) break;
      this.relax(o, at(k), ROOT, c + 1);
    }
    const distinct = [...new Set(chain)];
    for (let b = 0; b < 256; b++) {
      const list = exits[b];
      if (distinct.every((x) => skipped(this.skipByte[x], b))) continue;
      if (!list || !distinct.some((x) => g.next[x * 256 + b] >= 0)) continue;
      for (let j = 0; j < list.length; j += 2) {
        const k = list[j + 1];
        if (k > run) break;
        const to = g.next[at(k) * 256 + b];
        if (to >= 0) this.relax(o, to, list[j], c);
      }
    }
  }

  /**
   * The rest of a token in progress (at trie node `node`) from a state that reads `run`
   * characters alike, from the lists of content below that node (content-chains.ts
   * contentBelow): a token ending after j whole characters (to the state j on, at a token
   * boundary), a byte that is not content after j of them (continued from where it leads), and a
   * token ending inside a character or a byte breaking one off (read from the state j on). What a
   * search of the subtree byte by byte would find, but the subtree is listed once per vocabulary
   * instead of walked per state.
   */
  private runMovesBelow(o: number, s: number, node: number, c: number, run: number): void {
    const g = this.grammar;
    const t = this.trie;
    const below = contentBelow(this.vocab, node);
    const chain = this.chain(s, run, 0x20);
    const at = (k: number) => chain[k < chain.length ? k : loopIndex(chain, k)];
    for (const k of below.lengths) {
      if (k > run) break;
      this.relax(o, at(k), ROOT, c + 1);
    }
    forEachExit(g, below.exits, run, at, (exit, to, from, b) => {
      if (!skipped(this.skipByte[from], b)) this.relax(o, to, exit, c);
    });
    const p = below.partial;
    const path: number[] = [];
    for (let j = 0; j < p.length; j += PARTIAL_FIELDS) {
      const end = p[j];
      const k = p[j + 1];
      if (k >= run) continue;
      path.length = 0;
      for (let n = end; n !== p[j + 2]; n = t.parent[n]) path.push(t.byte[n]);
      path.push(t.byte[p[j + 2]]);
      let x = at(k);
      for (let i = path.length - 1; i >= 0 && x >= 0; i--) x = g.next[x * 256 + path[i]];
      if (x < 0) continue;
      // A token ending here is a token boundary; a byte breaking the character off goes on in the token.
      if (p[j + 3] === ENDS_INSIDE) this.relax(o, x, ROOT, c + 1);
      else this.relax(o, x, end, c);
    }
  }

  /**
   * States after 0, 1, 2, ... characters from s (at most run + 1 of them). A chain that loops
   * ends with its first repeated state, and loopIndex maps a longer count into the loop.
   */
  private chain(s: number, run: number, unit: number): Int32Array {
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
   * The next tokens from `c` grouped by the distance each leaves (computed once per parser
   * state, named by `key`): a step whose budget is short clears the groups beyond it.
   */
  nextProfile(c: Configs, key: string): NextProfile {
    let p = this.profiles.get(key);
    if (p === undefined) {
      p = this.walk(c);
      if (this.profiles.size >= PROFILE_LIMIT) this.profiles.delete(this.profiles.keys().next().value!);
      this.profiles.set(key, p);
    }
    return p;
  }

  /**
   * An upper bound on what any next token can leave to finish, from byte distances alone: the
   * byte distance of the state plus the most a token (of at most the vocabulary's longest token's
   * bytes) can add to it from there (see tokenReach); a vocabulary holding every byte as a token
   * finishes a text of B bytes in at most B tokens. Lets requests with ample budgets skip the
   * token-level work entirely.
   */
  byteBound(c: Configs): number {
    if (!this.facts.byteComplete) return UNREACHABLE;
    const dist = this.bytesLeft;
    const reach = this.tokenReach();
    let worst = 0;
    for (let i = 0; i < c.size; i++) {
      let d = dist[c.states[i]] + reach[c.states[i]];
      for (let st = c.stacks[i]; st; st = st.next) d += dist[st.ret];
      worst = Math.max(worst, d);
    }
    return Number.isFinite(worst) ? worst : UNREACHABLE;
  }

  /**
   * Per resting state, the most one token can raise the byte distance of the document from it:
   * a dynamic program over the token's bytes (up to the vocabulary's longest token) through byte
   * transitions, calls (the callee's distance added) and returns (to any return state, which
   * over-counts safely). Computed once per grammar, on the first budgeted step that needs it.
   */
  private tokenReach(): Float64Array {
    if (this.reach) return this.reach;
    const g = this.grammar;
    const n = g.stateCount;
    const dist = this.bytesLeft;
    const targets: Int32Array[] = [];
    for (let s = 0; s < n; s++) {
      const set = new Set<number>();
      for (let b = 0; b < 256; b++) if (g.next[s * 256 + b] >= 0) set.add(g.next[s * 256 + b]);
      targets.push(Int32Array.from(set));
    }
    const returns = Int32Array.from(new Set(g.callReturn));
    let h = new Float64Array(n);
    let clo = new Float64Array(n);
    const UNSEEN = -1;
    const IN_PROGRESS = -2;
    for (let k = 1; k <= this.trie.maxDepth; k++) {
      // h: a token of at most k bytes from resting state s; clo (of k - 1 bytes): what the rest
      // of it adds after landing on s, through s's calls and returns.
      const next = new Float64Array(n);
      for (let s = 0; s < n; s++) {
        budgetTick();
        let best = 0;
        for (const t of targets[s]) best = Math.max(best, dist[t] - dist[s] + Math.max(0, clo[t]));
        next[s] = best;
      }
      h = next;
      const memo = new Float64Array(n).fill(UNSEEN);
      let popValue = 0;
      const closure = (t: number): number => {
        if (memo[t] >= 0) return memo[t];
        if (memo[t] === IN_PROGRESS) return Infinity;
        memo[t] = IN_PROGRESS;
        let v = g.hasBytes[t] ? h[t] : 0;
        for (let j = g.callOffset[t]; j < g.callOffset[t + 1]; j++) {
          v = Math.max(v, dist[g.callStart[j]] + dist[g.callReturn[j]] - dist[t] + closure(g.callStart[j]));
        }
        if (g.final[t]) v = Math.max(v, popValue);
        memo[t] = v;
        return v;
      };
      // Returns may lead to finals that return again: iterate the returns' value to a fixed point.
      for (let round = 0; ; round++) {
        memo.fill(UNSEEN);
        let pop = 0;
        for (const r of returns) pop = Math.max(pop, closure(r));
        if (pop === popValue) break;
        if (round > 16 || !Number.isFinite(pop)) {
          popValue = Infinity;
          memo.fill(UNSEEN);
          break;
        }
        popValue = pop;
      }
      const nextClo = new Float64Array(n);
      let same = true;
      for (let s = 0; s < n; s++) {
        nextClo[s] = closure(s);
        if (nextClo[s] !== clo[s]) same = false;
      }
      clo = nextClo;
      // h of k + 1 bytes depends only on clo of k: once clo repeats, so does every longer step
      // (a pattern of 10,000 states on a vocabulary whose longest token is 256 bytes settles in a
      // few steps instead of 256 passes over every state).
      if (same) break;
    }
    this.reach = h;
    return h;
  }

  /**
   * Walks the tokens valid from `start` (as fillNextTokenBitmask allows them) and groups them by
   * the distance each leaves. Subtrees of plain string content whose tokens all leave the same
   * distance (judged by the states k characters on) are taken at once.
   */
  private walk(start: Configs): NextProfile {
    const groups = new Map<number, number[][]>();
    let worst = 0;
    const add = (d: number, lo: number, hi: number) => {
      if (hi <= lo) return;
      worst = Math.max(worst, d);
      let lists = groups.get(d);
      if (!lists) groups.set(d, (lists = [[]]));
      const r = lists[0]!;
      // Walks visit tokens in trie order: neighbouring ranges of one distance are merged.
      if (r.length && r[r.length - 1] === lo) r[r.length - 1] = hi;
      else r.push(lo, hi);
    };
    const addList = (d: number, ranges: readonly number[]) => {
      worst = Math.max(worst, d);
      let lists = groups.get(d);
      if (!lists) groups.set(d, (lists = [[]]));
      lists.push(ranges as number[]);
    };
    // At a position of a counted string: its content by class, and only the subtrees that leave the content walked.
    const leaving = this.contentByClass(start, addList) ?? this.classByLength(start, addList, add);
    if (leaving) {
      for (let k = 0; k < leaving.length; k += 2) {
        const node = leaving[k] as number;
        const config = leaving[k + 1] as Configs;
        const t = this.trie;
        if (t.tokCount[node] > 0) add(this.distance(config), t.tokStart[node], t.tokStart[node] + t.tokCount[node]);
        this.walkBelow(node, config, add);
      }
    } else this.walkBelow(ROOT, start, add);
    return { max: worst, groups };
  }

  /**
   * Walks the tokens below trie node `root` (its bytes read already, leading to `start`) and adds
   * each with the distance it leaves. Subtrees of string content or of a byte class whose tokens
   * all leave the same distance (judged by the states k characters or bytes on) are taken at once.
   */
  private walkBelow(root: number, start: Configs, add: (d: number, lo: number, hi: number) => void): void {
    const g = this.grammar;
    const t = this.trie;
    const pool = this.pool;
    const levels = this.levels;
    const simple = simpleStates(g);
    const midChar = this.facts.midCharEnd;
    levels.at(t.maxDepth + 1);
    const ref = levels.ref;
    ref[t.depth[root]] = start;
    const stop = t.end[root];
    let i = root + 1;
    while (i < stop) {
      const d = t.depth[i];
      const prev = ref[d - 1];
      const cc = t.contentChars[i];
      if (cc > 0 && prev.size === 1 && !prev.bottom && simple[prev.states[0]] && !midChar[i]) {
        const s = prev.states[0];
        const run = contentRun(g, s);
        if (run >= cc) {
          const chain = this.chain(s, run, 0x20);
          let lo = UNREACHABLE;
          let hi = 0;
          for (let k = 1; k <= cc; k++) {
            const v = this.stateDistance(chain[k < chain.length ? k : loopIndex(chain, k)], prev.stacks[0]);
            lo = Math.min(lo, v);
            hi = Math.max(hi, v);
          }
          if (lo === hi) {
            add(hi, t.subLo[i], t.subHi[i]);
            i = t.end[i];
            continue;
          }
        }
      }
      if (t.height[i] > 1 && prev.size === 1 && !prev.bottom && simple[prev.states[0]]) {
        const same = this.classSubtreeDistance(prev.states[0], prev.stacks[0], i);
        if (same >= 0) {
          add(same, t.subLo[i], t.subHi[i]);
          i = t.end[i];
          continue;
        }
      }
      const scratch = levels.at(d);
      const cur = prev.advance(g, pool, t.byte[i], scratch);
      ref[d] = cur;
      if (cur.size === 0 && !cur.bottom) {
        i = t.end[i];
        continue;
      }
      if (t.tokCount[i] > 0) add(this.distance(cur, cur !== scratch), t.tokStart[i], t.tokStart[i] + t.tokCount[i]);
      i = cur.size === 0 ? t.end[i] : i + 1;
    }
  }

  /**
   * When state s reads the bytes of a class alike (class-runs.ts: an email's letters, a
   * pattern's digits) for at least the height of the subtree at trie node i, every byte below i
   * is in the class, and the states 1 .. height bytes on all leave the same distance: that
   * distance (the subtree's tokens are taken at once, as the mask walk accepts them), else -1.
   */
  private classSubtreeDistance(s: number, st: Stack | null, i: number): number {
    const g = this.grammar;
    const t = this.trie;
    if (contentRun(g, s) > 0) return -1;
    const classes = classRuns(g);
    let run = classes.run[s];
    if (run === UNKNOWN_RUN) run = classRun(g, classes, s);
    const h = t.height[i];
    if (run < h) return -1;
    const outside = classes.outside;
    const sb = t.subtreeBytes;
    for (let w = 0; w < 8; w++) if ((sb[i * 8 + w] & outside[s * 8 + w]) !== 0) return -1;
    const same = this.sameAlongRun(s, st, run);
    return h <= same.upTo ? same.d : -1;
  }

  /**
   * For state s reading its class for `run` bytes, with stack st: the distance of the state one
   * byte on, and up to how many bytes on (at most the longest token) the distance stays the same.
   * Kept per (state, stack): a walk below a node such as "." (thousands of subtrees spelt in an
   * email's class) asks it for each subtree.
   */
  private sameAlongRun(s: number, st: Stack | null, run: number): { readonly d: number; readonly upTo: number } {
    const key = (st ? st.id : 0) * this.grammar.stateCount + s;
    let same = this.sameMemo.get(key);
    if (!same) {
      const outside = classRuns(this.grammar).outside;
      let first = 0;
      while ((outside[s * 8 + (first >>> 5)] & (1 << (first & 31))) !== 0) first++;
      const chain = this.chain(s, run, first);
      const at = (k: number) => chain[k < chain.length ? k : loopIndex(chain, k)];
      const d = this.stateDistance(at(1), st);
      const limit = Math.min(run, this.trie.maxDepth);
      let upTo = 1;
      while (upTo < limit && this.stateDistance(at(upTo + 1), st) === d) upTo++;
      if (this.sameMemo.size >= MEMO_LIMIT) this.sameMemo.clear();
      this.sameMemo.set(key, (same = { d, upTo }));
    }
    return same;
  }

  /**
   * At a state that reads a byte class alike (class-runs.ts: an email's letters, a pattern's
   * digits; one configuration) for a run of bytes: the tokens made of the class no longer than
   * the run by length, each length at once with the distance of the state that many bytes on,
   * and the rest to walk (flat (trie node, configuration there) pairs, where a byte outside the
   * class follows class bytes), as contentByClass does for string content. Tokens longer than a
   * bounded run (an email's local part of at most 24 bytes, a uuid's 8 hex digits) go on past
   * it in the state the run ends in: when that state reads no byte of the class they are
   * refused (as the grammar mask refuses them), else they are walked from the nodes of the
   * run's length (walkBelow, with `add`). Null for other states.
   */
  private classByLength(
    start: Configs,
    addList: (d: number, ranges: readonly number[]) => void,
    add: (d: number, lo: number, hi: number) => void,
  ): (number | Configs)[] | null {
    const g = this.grammar;
    if (start.size !== 1 || start.bottom) return null;
    const s = start.states[0];
    if (!simpleStates(g)[s] || contentRun(g, s) > 0) return null;
    const classes = classRuns(g);
    let run = classes.run[s];
    if (run === UNKNOWN_RUN) run = classRun(g, classes, s);
    if (run <= 0) return null;
    const cls = this.classFacts(classes.outside, s);
    if (cls.lengths.length === 0) return null;
    const st = start.stacks[0];
    const chain = this.chain(s, run, cls.first);
    const at = (k: number) => chain[k < chain.length ? k : loopIndex(chain, k)];
    for (const [k, ranges] of cls.tokens) if (k <= run) addList(this.stateDistance(at(k), st), ranges);
    if (cls.lengths[cls.lengths.length - 1] <= run) return this.leavingSubtrees(cls.exits, run, at, st);
    // A bounded run: what the state after it does with more bytes of the class.
    const after = this.pool.closure(g, at(run), st);
    if (!readsAny(g, after, cls.outside)) return this.leavingSubtrees(cls.exits, run, at, st);
    // Paths longer than the run are walked from its length on (a byte outside the class right
    // after the run's last byte included): the lists give the shorter ones.
    for (const node of prefixesAt(this.vocab, cls, run)) this.walkBelow(node, after, add);
    return this.leavingSubtrees(cls.exits, run - 1, at, st);
  }

  /**
   * At a position of a counted string (one configuration, its chain's states inside characters
   * following the decoding states, see content-chains.ts): its tokens of string content by class
   * (whole characters, decoding state at the end), each class taken at once with the distance of
   * the state it leads to, instead of walking a hundred thousand tokens per position. Returns
   * the rest to walk, flat (trie node, configuration there) pairs: where a byte that is not
   * content follows whole characters (a closing quote, a backslash), the lists of content-below.ts
   * name the nodes. Null when the start is no such position (the whole vocabulary is walked).
   */
  private contentByClass(start: Configs, addList: (d: number, ranges: readonly number[]) => void): (number | Configs)[] | null {
    const g = this.grammar;
    if (start.size !== 1 || start.bottom) return null;
    const s = start.states[0];
    const at = chainPosition(g, s);
    // The positions a token can reach from here (at most the longest token's bytes in characters).
    const units = at && chainUnitsAt(g, at.chain, at.k, at.k + this.trie.maxDepth);
    if (!at || !units) return null;
    const { chain, k } = at;
    const st = start.stacks[0];
    const run = runAt(g, chain, k);
    const count = chain.positions.length;
    const classes = contentClasses(this.vocab);
    for (let c = 0; c < classes.keys.length; c++) {
      const j = classes.keys[c] >>> 3;
      const q = classes.keys[c] & 7;
      // The grammar refuses the others: a count past the run, or a character it cannot start there.
      if (q === 0 ? j < 1 || j > run : j >= run) continue;
      const state = q === 0 ? stateAfter(chain, k, j) : units.mid[Math.min(k + j, count) * 8 + q];
      if (state >= 0) addList(this.stateDistance(state, st), classes.ranges[c]);
    }
    // Bytes breaking a character off are refused by the states inside it (chainUnits checks it).
    return this.leavingSubtrees(contentFrom(this.vocab, 0).exits, run, (j) => stateAfter(chain, k, j), st);
  }

  /** The subtrees below an exits list's nodes (see forEachExit) to walk, with the configurations there: flat pairs. */
  private leavingSubtrees(exits: readonly (Int32Array | null)[], run: number, at: (k: number) => number, st: Stack | null): (number | Configs)[] {
    const leaving: (number | Configs)[] = [];
    forEachExit(this.grammar, exits, run, at, (exit, to) => {
      const config = this.pool.closure(this.grammar, to, st);
      if (config.size > 0 || config.bottom) leaving.push(exit, config);
    });
    return leaving;
  }
}

/**
 * Finished searches as flat arrays (see CompletionTables): states less `base` (a rule's first
 * state, for rule tables) and partial tokens, flat pairs, and their exits one after another.
 */
function flatExits(done: readonly Origin[], base: number): { origins: Int32Array; offsets: Int32Array; exitNodes: Int32Array; exitCosts: Int32Array } {
  const origins = new Int32Array(2 * done.length);
  const offsets = new Int32Array(done.length + 1);
  let total = 0;
  done.forEach((o, i) => {
    origins[2 * i] = o.state - base;
    origins[2 * i + 1] = o.node;
    offsets[i] = total;
    total += o.frozen!.nodes.length;
  });
  offsets[done.length] = total;
  const exitNodes = new Int32Array(total);
  const exitCosts = new Int32Array(total);
  done.forEach((o, i) => {
    exitNodes.set(o.frozen!.nodes, offsets[i]);
    exitCosts.set(o.frozen!.costs, offsets[i]);
  });
  return { origins, offsets, exitNodes, exitCosts };
}

/** Whether a state of `c` reads some byte that is not in `outside` (8 words of bits). */
function readsAny(g: Grammar, c: Configs, outside: Int32Array): boolean {
  for (const x of c.states) {
    for (let b = 0; b < 256; b++) if ((outside[b >>> 5] & (1 << (b & 31))) === 0 && g.next[x * 256 + b] >= 0) return true;
  }
  return false;
}

/**
 * Each way out of a run of `run` units (characters or class bytes) that an exits list names (per
 * byte: flat (trie node, units before the byte), by units): the byte read by the state that many
 * units on (`from`, given by `at`), where it leads (`to`) when it leads anywhere.
 */
function forEachExit(
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

const budgets = new WeakMap<StackPool, CompletionBudget>();

/** The completion costs of a grammar and vocabulary, shared by the matchers of one stack pool. */
export function completionBudget(g: Grammar, vocab: TokenVocabulary, pool: StackPool): CompletionBudget {
  let b = budgets.get(pool);
  if (!b) budgets.set(pool, (b = new CompletionBudget(g, vocab, pool)));
  return b;
}
