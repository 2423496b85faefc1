// The searches of a completion budget (exit-search.ts), one per (state, partial token) whose
// exits are wanted: what each holds while it runs and once it has finished.

import { UNREACHABLE } from "./unreachable.ts";

/** A rule's ways out from one (state, partial token): trie node at the rule's end and tokens cut before it. */
export interface Exits {
  readonly nodes: Int32Array;
  readonly costs: Int32Array;
}

/**
 * One (state, partial token) whose exits are wanted. Its own search covers only the bytes of the
 * token in progress: where a token ends inside the rule, the rest is the exits of (that state,
 * no partial token), another origin it waits on; where it calls a rule, it waits on the callee's
 * origin for that partial token.
 */
export interface Origin {
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

/** An origin whose search is to run from (state, node). */
export function pendingOrigin(state: number, node: number): Origin {
  return { state, node, exits: new Map(), waiters: [], items: new Map(), frozen: null, cap: UNREACHABLE, shared: false };
}

/**
 * An origin found finished with these exits, without a search of this budget: adopted from
 * another thread, solved per chain, or taken from a rule's table (`shared`). Its exits and
 * waiters are never touched again: shared empty ones (tens of thousands for a long string).
 */
export function finishedOrigin(state: number, node: number, frozen: Exits, shared: boolean): Origin {
  return { state, node, exits: NO_EXITS, waiters: NO_WAITERS, items: null, frozen, cap: UNREACHABLE, shared };
}
