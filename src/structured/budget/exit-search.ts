// The exit searches of a completion budget (../completion-budget.ts): per (state, partial token),
// the trie nodes the token in progress may be at when the state's rule ends and the fewest tokens
// cut before each. Searches wait on each other (a token ending inside the rule, a call), so all
// that are pending run together as one label-correcting shortest path (run); the moves of one
// item are search-moves.ts's, the positions of counted strings are solved per chain first
// (chain-exits.ts), and searches another grammar did for the same rule are taken from its table
// (rule-tables.ts).

import { budgetTick } from "../compile-budget.ts";
import type { Grammar } from "../grammar.ts";
import type { TokenTrie } from "../trie.ts";
import { type ChainSearch, solveChains } from "./chain-exits.ts";
import { type BudgetContext, MEMO_LIMIT } from "./context.ts";
import { type Exits, finishedOrigin, type Origin, pendingOrigin } from "./origins.ts";
import { expand, type SearchSteps } from "./search-moves.ts";
import type { CompletionTables } from "./tables.ts";
import { ROOT } from "./vocab-facts.ts";

export class ExitSearch implements SearchSteps, ChainSearch {
  private origins: Origin[] = [];
  private originIds = new Map<number, number>();
  /** Origins whose searches run (unfrozen), frozen together when nothing is left to search (see run). */
  private readonly pending: number[] = [];
  /** Pending search items per cost, flat triples (origin, state, node); see run. */
  private readonly buckets: number[][] = [];
  private low = 0;
  /** The grammar's content chains have their positions' exits (see solveChains). */
  private chainsSolved = false;
  // The context's fields read per search item, held here to spare a load each.
  private readonly grammar: Grammar;
  private readonly trie: TokenTrie;
  private readonly nodes: number;
  private readonly follow: Uint32Array;

  constructor(private readonly cx: BudgetContext) {
    this.grammar = cx.grammar;
    this.trie = cx.trie;
    this.nodes = cx.nodes;
    this.follow = cx.follow;
  }

  /** Takes over the finished searches of tables computed by another thread. */
  adopt(t: CompletionTables): void {
    for (let i = 0; i < t.offsets.length - 1; i++) {
      const state = t.origins[2 * i];
      const node = t.origins[2 * i + 1];
      const frozen = { nodes: t.exitNodes.subarray(t.offsets[i], t.offsets[i + 1]), costs: t.exitCosts.subarray(t.offsets[i], t.offsets[i + 1]) };
      this.originIds.set(state * this.nodes + node, this.origins.length);
      this.origins.push(finishedOrigin(state, node, frozen, false));
    }
  }

  /** The finished searches of this budget's own (those taken from rule tables left out), for its tables. */
  ownFinished(): Origin[] {
    return this.origins.filter((o) => o.frozen !== null && !o.shared);
  }

  /** The exits of (state, partial token), searched for (with all they wait on) when first asked. */
  exits(s: number, node: number): Exits {
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
      solveChains(this.cx, this);
      const solved = this.frozenExits(s, node);
      if (solved) return solved;
    }
    return this.origin(s, node);
  }

  /**
   * Every search the budget can need, one by one: it yields before each (the caller decides
   * whether to go on, see CompletionBudget.searchStates) and, with `items`, also within one every
   * that many search items (one search may wait on thousands of others and take a quarter of a
   * second: a thread that answers other work in between yields there too); it ends when all are
   * done. First every resting state at a token boundary (in state order), then where a rule ends
   * with a token in progress, each caller's return state going on with it (what distances of
   * states with a stack fold in, see CompletionBudget's pop), also for the searches those add,
   * until none is left.
   */
  *searches(items = Infinity): Generator<void, void, void> {
    const g = this.grammar;
    const search = function* (exits: ExitSearch, s: number, node: number): Generator<void, void, void> {
      if (typeof exits.start(s, node) === "number") while (!exits.run(items)) yield;
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
  frozenExits(s: number, node: number): Exits | null {
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
    const tables = this.cx.served.tables(rule);
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
      this.origins.push(finishedOrigin(s, node, { nodes, costs }, true));
      return id;
    }
    return undefined;
  }

  freeze(state: number, exits: Exits): void {
    const key = state * this.nodes + ROOT;
    if (this.originIds.has(key)) return;
    this.originIds.set(key, this.origins.length);
    this.origins.push(finishedOrigin(state, ROOT, exits, false));
  }

  origin(s: number, node: number): number {
    const key = s * this.nodes + node;
    let id = this.originIds.get(key) ?? this.fromRuleTables(s, node);
    if (id === undefined) {
      id = this.origins.length;
      this.origins.push(pendingOrigin(s, node));
      this.originIds.set(key, id);
      this.pending.push(id);
      this.relax(id, s, node, 0);
    }
    return id;
  }

  relax(o: number, s: number, node: number, c: number): void {
    const items = this.origins[o].items!;
    const key = s * this.nodes + node;
    const old = items.get(key);
    if (old !== undefined && old <= c) return;
    items.set(key, c);
    (this.buckets[c] ??= []).push(o, s, node);
    if (c < this.low) this.low = c;
  }

  wait(t: number, o: number, ret: number, c: number): void {
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

  addExit(o: number, node: number, c: number): void {
    const origin = this.origins[o];
    // A token that cannot go on with a byte that may follow the rule is cut at its end (that
    // path is an exit at the root, one token later).
    if (node !== ROOT && !this.goesOn(node, this.grammar.ruleOf[origin.state])) return;
    const old = origin.exits.get(node);
    if (old !== undefined && old <= c) return;
    origin.exits.set(node, c);
    if (this.cx.rootAlone && this.grammar.ruleOf[origin.state] === this.cx.rootRule) {
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
  run(items = Infinity): boolean {
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
      const origin = this.origins[o];
      if (origin.items!.get(s * this.nodes + node)! < c) continue;
      expand(this.cx, this, o, origin, s, node, c);
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
}
