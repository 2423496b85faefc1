// Parser configurations: a resting DFA state plus a persistent, interned stack of return states.
// A set of them is the parser state (usually one; several where alternatives overlap).

import type { Grammar } from "./grammar.ts";

export class Stack {
  constructor(
    readonly ret: number,
    readonly next: Stack | null,
    readonly id: number,
    readonly size: number,
  ) {}
}

/** Cached closures kept per pool; past this the cache starts over (they are recomputed on demand). */
const CLOSURES_LIMIT = 200_000;

/** Interns stacks so equal stacks are the same object (cheap dedup of configurations). */
export class StackPool {
  private readonly table = new Map<number, Stack>();
  /** Token ids valid past the end of a rule, per (boundary list, stack id): see fillNextTokenBitmask. */
  readonly continuations = new Map<number, Int32Array>();
  private counter = 1;
  private readonly closures = new Map<number, Configs>();
  constructor(private readonly stateCount: number) {}

  /**
   * The closure of (s, st), computed once and shared: trie walks step into the same few
   * configurations at thousands of nodes. The result must not be modified.
   */
  closure(g: Grammar, s: number, st: Stack | null): Configs {
    const key = (st ? st.id : 0) * this.stateCount + s;
    let c = this.closures.get(key);
    if (!c) {
      if (this.closures.size >= CLOSURES_LIMIT) this.closures.clear();
      c = new Configs();
      c.addClosure(g, this, s, st);
      this.closures.set(key, c);
    }
    return c;
  }

  push(ret: number, next: Stack | null): Stack {
    const key = (next ? next.id : 0) * this.stateCount + ret;
    let s = this.table.get(key);
    if (!s) {
      s = new Stack(ret, next, this.counter++, (next?.size ?? 0) + 1);
      this.table.set(key, s);
    }
    return s;
  }
}

/** Recursion deeper than this is cut (it only arises from left-recursive schemas). */
const MAX_STACK = 4096;

export class Configs {
  readonly states: number[] = [];
  readonly stacks: (Stack | null)[] = [];
  /** The bottom of the stack was reached: the root is complete (or, locally, the rule ended). */
  bottom = false;
  private readonly seenS: number[] = [];
  private readonly seenK: (Stack | null)[] = [];

  clear(): void {
    this.states.length = 0;
    this.stacks.length = 0;
    this.seenS.length = 0;
    this.seenK.length = 0;
    this.bottom = false;
  }

  get size(): number {
    return this.states.length;
  }

  /** Adds (s, st) and everything reachable from it without consuming a byte. */
  addClosure(g: Grammar, pool: StackPool, s: number, st: Stack | null): void {
    const seenS = this.seenS;
    const seenK = this.seenK;
    for (let i = 0; i < seenS.length; i++) if (seenS[i] === s && seenK[i] === st) return;
    seenS.push(s);
    seenK.push(st);
    if (g.hasBytes[s]) {
      this.states.push(s);
      this.stacks.push(st);
    }
    const cEnd = g.callOffset[s + 1];
    for (let c = g.callOffset[s]; c < cEnd; c++) {
      if (st && st.size >= MAX_STACK) continue;
      this.addClosure(g, pool, g.callStart[c], pool.push(g.callReturn[c], st));
    }
    if (g.final[s]) {
      if (st === null) this.bottom = true;
      else this.addClosure(g, pool, st.ret, st.next);
    }
  }

  /**
   * This set advanced by one byte: a shared closure when one configuration moves (the usual
   * case), else computed into `scratch`. The result must not be modified.
   */
  advance(g: Grammar, pool: StackPool, byte: number, scratch: Configs): Configs {
    const next = g.next;
    let moved = -1;
    let target = -1;
    for (let i = 0; i < this.states.length; i++) {
      const t = next[this.states[i] * 256 + byte];
      if (t < 0) continue;
      if (moved >= 0) {
        this.step(g, pool, byte, scratch);
        return scratch;
      }
      moved = i;
      target = t;
    }
    return moved < 0 ? NO_CONFIGS : pool.closure(g, target, this.stacks[moved]);
  }

  /** This set advanced by one byte, into `out`. */
  step(g: Grammar, pool: StackPool, byte: number, out: Configs): void {
    out.clear();
    const next = g.next;
    for (let i = 0; i < this.states.length; i++) {
      const t = next[this.states[i] * 256 + byte];
      if (t >= 0) out.addClosure(g, pool, t, this.stacks[i]);
    }
  }

  copy(): Configs {
    const c = new Configs();
    c.states.push(...this.states);
    c.stacks.push(...this.stacks);
    c.bottom = this.bottom;
    return c;
  }
}


/** The empty set (shared; never modified). */
const NO_CONFIGS = new Configs();

const simpleCache = new WeakMap<Grammar, Uint8Array>();
/** States with byte transitions, no calls and not final: stepping into them needs no closure. */
export function simpleStates(g: Grammar): Uint8Array {
  let s = simpleCache.get(g);
  if (!s) {
    s = new Uint8Array(g.stateCount);
    for (let i = 0; i < g.stateCount; i++) {
      s[i] = g.hasBytes[i] && !g.final[i] && g.callOffset[i] === g.callOffset[i + 1] ? 1 : 0;
    }
    simpleCache.set(g, s);
  }
  return s;
}
