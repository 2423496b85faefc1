// Token masks from a grammar. The parser state is a small set of configurations: a resting DFA
// state plus a stack of return states (persistent, interned). For every resting state we compute
// once, over the whole vocabulary trie, which tokens are valid whatever the stack holds
// (context-independent: they never leave the state's rule) and which trie nodes are points where
// the rule may end mid-token; only the subtrees below those points are walked per step, against
// the real stack. This is the adaptive token mask cache idea of xgrammar.

import type { Grammar } from "./grammar.ts";
import type { TokenVocabulary } from "./token-bytes.ts";
import type { TokenTrie } from "./trie.ts";

class Stack {
  constructor(
    readonly ret: number,
    readonly next: Stack | null,
    readonly id: number,
    readonly size: number,
  ) {}
}

/** Interns stacks so equal stacks are the same object (cheap dedup of configurations). */
class StackPool {
  private readonly table = new Map<number, Stack>();
  /** Token ids valid past the end of state s's rule, per (stack id, state): see fillNextTokenBitmask. */
  readonly continuations = new Map<number, Int32Array>();
  private counter = 1;
  constructor(private readonly stateCount: number) {}

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

class Configs {
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

/** What one resting state allows, independent of the stack below it. */
interface StateMask {
  /** Dense bitmask when many tokens are accepted, else null and the ids are in acceptedIds. */
  readonly accepted: Uint32Array | null;
  readonly acceptedIds: Int32Array | null;
  /** Trie nodes after which the state's rule may have ended with bytes of the token left over. */
  readonly boundaries: Int32Array;
}

const setBit = (mask: Uint32Array, id: number) => {
  mask[id >>> 5] |= 1 << (id & 31);
};

function bitsToIds(mask: Uint32Array): Int32Array {
  const out: number[] = [];
  for (let w = 0; w < mask.length; w++) {
    let bits = mask[w];
    while (bits) {
      const low = bits & -bits;
      out.push(w * 32 + (31 - Math.clz32(low)));
      bits ^= low;
    }
  }
  return Int32Array.from(out);
}

/**
 * Applies a token mask to a row of logits: disallowed tokens (and ids past the mask, such as
 * padding rows of the output layer) get -Infinity.
 */
export function applyTokenBitmask(logits: Float32Array, mask: Uint32Array): void {
  for (let i = 0; i < logits.length; i++) {
    const w = i >>> 5;
    if (w >= mask.length || !(mask[w] & (1 << (i & 31)))) logits[i] = -Infinity;
  }
}

function markTokens(trie: TokenTrie, node: number, mask: Uint32Array): void {
  const n = trie.tokCount[node];
  if (n === 0) return;
  const start = trie.tokStart[node];
  for (let k = 0; k < n; k++) setBit(mask, trie.sortedIds[start + k]);
}

/**
 * Reusable per-depth state for trie walks. Most levels hold a single configuration whose state
 * has no calls and cannot end its rule ("simple"): those are kept as plain numbers (the fast path,
 * which is what makes walking the whole vocabulary for string contents cheap).
 */
class Levels {
  private readonly sets: Configs[] = [];
  fastState = new Int32Array(64);
  fastStack: (Stack | null)[] = [];
  at(d: number): Configs {
    while (this.sets.length <= d) this.sets.push(new Configs());
    if (d >= this.fastState.length) {
      const grown = new Int32Array(this.fastState.length * 2);
      grown.set(this.fastState);
      this.fastState = grown;
    }
    return this.sets[d];
  }
}

const simpleCache = new WeakMap<Grammar, Uint8Array>();
/** States with byte transitions, no calls and not final: stepping into them needs no closure. */
function simpleStates(g: Grammar): Uint8Array {
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

const runCache = new WeakMap<Grammar, Int32Array>();
const UNBOUNDED_RUN = 1 << 20;
const PLAIN_BYTES: number[] = [];
for (let b = 0x20; b <= 0x7e; b++) if (b !== 0x22 && b !== 0x5c) PLAIN_BYTES.push(b);

/**
 * Per state, how many plain string bytes (see TokenTrie.plainHeight) can be read in a row through
 * simple states that treat all plain bytes alike; a trie subtree of plain bytes no taller than
 * that is accepted whole, without visiting its nodes.
 */
function plainRuns(g: Grammar): Int32Array {
  let runs = runCache.get(g);
  if (runs) return runs;
  const simple = simpleStates(g);
  const computed = new Int32Array(g.stateCount).fill(-1);
  const uniformTarget = (s: number): number => {
    if (!simple[s]) return -1;
    const t = g.next[s * 256 + PLAIN_BYTES[0]];
    if (t < 0 || !simple[t]) return -1;
    for (const b of PLAIN_BYTES) if (g.next[s * 256 + b] !== t) return -1;
    return t;
  };
  for (let s0 = 0; s0 < g.stateCount; s0++) {
    if (computed[s0] >= 0) continue;
    // Follow the chain of uniform targets; a chain returning to itself reads plain bytes forever.
    const chain: number[] = [];
    const onChain = new Set<number>();
    let s = s0;
    let tailRun = 0;
    for (;;) {
      if (computed[s] >= 0) {
        tailRun = computed[s];
        break;
      }
      if (onChain.has(s)) {
        tailRun = UNBOUNDED_RUN;
        break;
      }
      chain.push(s);
      onChain.add(s);
      const t = uniformTarget(s);
      if (t < 0) {
        computed[s] = 0;
        chain.pop();
        tailRun = 0;
        break;
      }
      s = t;
    }
    for (let k = chain.length - 1; k >= 0; k--) {
      tailRun = tailRun >= UNBOUNDED_RUN ? UNBOUNDED_RUN : tailRun + 1;
      computed[chain[k]] = tailRun;
    }
  }
  runs = computed;
  runCache.set(g, runs);
  return runs;
}

/**
 * Walks the subtree below `root` (exclusive) starting from `start`; marks tokens that can be fully
 * consumed. With `boundaries`, reaching the bottom of the stack mid-token is recorded instead of
 * counting as an ending (the local, stack-independent walk).
 */
function walk(
  g: Grammar,
  trie: TokenTrie,
  pool: StackPool,
  levels: Levels,
  root: number,
  start: Configs,
  mask: Uint32Array,
  boundaries: number[] | null,
): void {
  const base = trie.depth[root];
  const stop = trie.end[root];
  const { byte, depth, end, tokCount, tokStart, sortedIds, plainHeight, subLo, subHi } = trie;
  const next = g.next;
  const runs = plainRuns(g);
  const simple = simpleStates(g);
  levels.at(trie.maxDepth + 1);
  const fastState = levels.fastState;
  const fastStack = levels.fastStack;
  // Level 0 is `start`; fastState[d] >= 0 marks a level held as one simple configuration.
  fastState[0] = start.size === 1 && !start.bottom && simple[start.states[0]] ? start.states[0] : -1;
  fastStack[0] = start.stacks[0] ?? null;
  let i = root + 1;
  while (i < stop) {
    const d = depth[i] - base;
    const b = byte[i];
    const ps = fastState[d - 1];
    let cur: Configs;
    if (ps >= 0) {
      const ph = plainHeight[i];
      if (ph > 0 && runs[ps] >= ph) {
        for (let k = subLo[i]; k < subHi[i]; k++) {
          const id = sortedIds[k];
          mask[id >>> 5] |= 1 << (id & 31);
        }
        i = end[i];
        continue;
      }
      const t = next[ps * 256 + b];
      if (t < 0) {
        i = end[i];
        continue;
      }
      if (simple[t]) {
        fastState[d] = t;
        fastStack[d] = fastStack[d - 1];
        const n = tokCount[i];
        if (n) {
          const first = tokStart[i];
          for (let k = 0; k < n; k++) {
            const id = sortedIds[first + k];
            mask[id >>> 5] |= 1 << (id & 31);
          }
        }
        i++;
        continue;
      }
      cur = levels.at(d);
      cur.clear();
      cur.addClosure(g, pool, t, fastStack[d - 1]);
    } else {
      cur = levels.at(d);
      (d === 1 ? start : levels.at(d - 1)).step(g, pool, b, cur);
    }
    if (cur.size > 0 || cur.bottom) markTokens(trie, i, mask);
    if (boundaries && cur.bottom && end[i] > i + 1) boundaries.push(i);
    if (cur.size === 0) {
      i = end[i];
      continue;
    }
    if (cur.size === 1 && !cur.bottom && simple[cur.states[0]]) {
      fastState[d] = cur.states[0];
      fastStack[d] = cur.stacks[0];
    } else fastState[d] = -1;
    i++;
  }
}

const maskCaches = new WeakMap<Grammar, WeakMap<TokenVocabulary, (StateMask | undefined)[]>>();

function stateMasks(g: Grammar, vocab: TokenVocabulary): (StateMask | undefined)[] {
  let byVocab = maskCaches.get(g);
  if (!byVocab) maskCaches.set(g, (byVocab = new WeakMap()));
  let list = byVocab.get(vocab);
  if (!list) byVocab.set(vocab, (list = new Array(g.stateCount)));
  return list;
}

/** States reachable from a state beyond which its signature is not computed (no sharing). */
const SIGNATURE_LIMIT = 64;

/**
 * A canonical description of everything reachable from state s (transitions, calls, finals,
 * renumbered in discovery order). The stack-independent mask of s depends on nothing else, so
 * equal signatures share one mask across grammars: the string contents of every schema on a
 * vocabulary are computed once.
 */
function signature(g: Grammar, s: number): string | null {
  const order = new Map<number, number>([[s, 0]]);
  const queue = [s];
  const parts: string[] = [];
  const id = (t: number): number => {
    let n = order.get(t);
    if (n === undefined) {
      n = order.size;
      order.set(t, n);
      queue.push(t);
    }
    return n;
  };
  for (let q = 0; q < queue.length; q++) {
    if (order.size > SIGNATURE_LIMIT) return null;
    const x = queue[q];
    let row = g.final[x] ? "F" : "";
    let b = 0;
    while (b < 256) {
      const t = g.next[x * 256 + b];
      if (t < 0) {
        b++;
        continue;
      }
      let e = b;
      while (e + 1 < 256 && g.next[x * 256 + e + 1] === t) e++;
      row += `${b}-${e}>${id(t)};`;
      b = e + 1;
    }
    for (let c = g.callOffset[x]; c < g.callOffset[x + 1]; c++) row += `C${id(g.callStart[c])}>${id(g.callReturn[c])};`;
    parts.push(row);
  }
  return parts.join("|");
}

const sharedMasks = new WeakMap<TokenVocabulary, Map<string, StateMask>>();

function stateMask(g: Grammar, vocab: TokenVocabulary, s: number): StateMask {
  const sig = signature(g, s);
  if (sig === null) return computeStateMask(g, vocab, s);
  let shared = sharedMasks.get(vocab);
  if (!shared) sharedMasks.set(vocab, (shared = new Map()));
  let m = shared.get(sig);
  if (!m) shared.set(sig, (m = computeStateMask(g, vocab, s)));
  return m;
}

const SPARSE_LIMIT = 1024;

function popcount(x: number): number {
  x -= (x >>> 1) & 0x55555555;
  x = (x & 0x33333333) + ((x >>> 2) & 0x33333333);
  return (((x + (x >>> 4)) & 0x0f0f0f0f) * 0x01010101) >>> 24;
}

function computeStateMask(g: Grammar, vocab: TokenVocabulary, s: number): StateMask {
  const words = (vocab.size + 31) >>> 5;
  const accepted = new Uint32Array(words);
  const boundaries: number[] = [];
  const start = new Configs();
  start.states.push(s);
  start.stacks.push(null);
  walk(g, vocab.trie, new StackPool(g.stateCount), new Levels(), 0, start, accepted, boundaries);
  // Most states allow a handful of tokens: a list keeps thousands of cached states small.
  let count = 0;
  for (let w = 0; w < words && count <= SPARSE_LIMIT; w++) if (accepted[w]) count += popcount(accepted[w]);
  if (count <= SPARSE_LIMIT) return { accepted: null, acceptedIds: bitsToIds(accepted), boundaries: Int32Array.from(boundaries) };
  return { accepted, acceptedIds: null, boundaries: Int32Array.from(boundaries) };
}

const distanceCache = new WeakMap<Grammar, Float64Array>();
/** Per state, the fewest bytes that end its rule (shortest paths, solved to a fixed point). */
function completionDistances(g: Grammar): Float64Array {
  const cached = distanceCache.get(g);
  if (cached) return cached;
  const n = g.stateCount;
  const targets: number[][] = [];
  for (let s = 0; s < n; s++) {
    const set = new Set<number>();
    for (let b = 0; b < 256; b++) {
      const t = g.next[s * 256 + b];
      if (t >= 0) set.add(t);
    }
    targets.push([...set]);
  }
  const dist = new Float64Array(n).fill(Infinity);
  for (let changed = true; changed; ) {
    changed = false;
    for (let s = 0; s < n; s++) {
      let d = g.final[s] ? 0 : Infinity;
      for (const t of targets[s]) d = Math.min(d, 1 + dist[t]);
      for (let c = g.callOffset[s]; c < g.callOffset[s + 1]; c++) d = Math.min(d, dist[g.callStart[c]] + dist[g.callReturn[c]]);
      if (d < dist[s]) {
        dist[s] = d;
        changed = true;
      }
    }
  }
  distanceCache.set(g, dist);
  return dist;
}

/**
 * Computes the shareable masks (states of small, self-contained automata: string and key
 * contents, numbers, literals) of the given grammars on a vocabulary. Meant for model load, so
 * the first requests with new schemas do not pay for the vocabulary-wide walks of string contents.
 */
export function warmStateMasks(vocab: TokenVocabulary, grammars: readonly Grammar[]): void {
  for (const g of grammars) {
    const list = stateMasks(g, vocab);
    for (let s = 0; s < g.stateCount; s++) {
      if (!g.hasBytes[s] || list[s]) continue;
      if (signature(g, s) !== null) list[s] = stateMask(g, vocab, s);
    }
  }
}

export interface MatcherOptions {
  /** Tokens that end generation (EOS, end of turn): allowed only when the text is complete. */
  readonly stopTokenIds?: readonly number[];
}

/** Parser state for one generation; tells which tokens may come next. */
export class GrammarMatcher {
  private readonly pool: StackPool;
  private readonly masks: (StateMask | undefined)[];
  private readonly levels = new Levels();
  private readonly stopIds: ReadonlySet<number>;
  private history: Configs[];
  private terminated = false;

  constructor(
    readonly grammar: Grammar,
    readonly vocab: TokenVocabulary,
    options: MatcherOptions = {},
    initial?: { pool: StackPool; history: Configs[]; terminated: boolean },
  ) {
    this.masks = stateMasks(grammar, vocab);
    this.stopIds = new Set(options.stopTokenIds ?? []);
    if (initial) {
      this.pool = initial.pool;
      this.history = [...initial.history];
      this.terminated = initial.terminated;
    } else {
      this.pool = new StackPool(grammar.stateCount);
      const first = new Configs();
      first.addClosure(grammar, this.pool, grammar.start, null);
      this.history = [first];
    }
  }

  private get current(): Configs {
    return this.history[this.history.length - 1];
  }

  /** Words needed for a mask over this vocabulary. */
  get maskWords(): number {
    return (this.vocab.size + 31) >>> 5;
  }

  /** The value is complete: a stop token would be accepted now. */
  isComplete(): boolean {
    return !this.terminated && this.current.bottom;
  }

  /** A stop token was accepted; nothing more may follow. */
  isTerminated(): boolean {
    return this.terminated;
  }

  /**
   * Sets bit i of `mask` (word i>>5, bit i&31) for every token allowed next, clears the others.
   * Ids at or beyond the vocabulary size (padding rows of the logits) are never allowed.
   */
  fillNextTokenBitmask(mask: Uint32Array): void {
    mask.fill(0);
    if (this.terminated) return;
    const cur = this.current;
    const g = this.grammar;
    const words = Math.min(mask.length, this.maskWords);
    for (let i = 0; i < cur.size; i++) {
      const s = cur.states[i];
      let m = this.masks[s];
      if (!m) m = this.masks[s] = stateMask(g, this.vocab, s);
      const acc = m.accepted;
      if (acc) for (let w = 0; w < words; w++) mask[w] |= acc[w];
      else {
        const ids = m.acceptedIds!;
        for (let k = 0; k < ids.length; k++) setBit(mask, ids[k]);
      }
      const st = cur.stacks[i];
      if (m.boundaries.length === 0 || st === null) continue;
      // Tokens that end this rule and go on in the caller depend on the stack: walked once per
      // (state, stack) and remembered, since loops (array items, object members) revisit them.
      const key = st.id * g.stateCount + s;
      let ids = this.pool.continuations.get(key);
      if (!ids) {
        const parent = new Configs();
        parent.addClosure(g, this.pool, st.ret, st.next);
        const scratch = new Uint32Array(this.maskWords);
        if (parent.size > 0) {
          for (const node of m.boundaries) walk(g, this.vocab.trie, this.pool, this.levels, node, parent, scratch, null);
        }
        ids = bitsToIds(scratch);
        this.pool.continuations.set(key, ids);
      }
      for (let k = 0; k < ids.length; k++) setBit(mask, ids[k]);
    }
    if (cur.bottom) for (const id of this.stopIds) if (id >>> 5 < mask.length) setBit(mask, id);
  }

  /** Whether `id` is allowed next (without computing the whole mask). */
  isAllowed(id: number): boolean {
    return this.advance(id) !== null;
  }

  private advance(id: number): Configs | "stop" | null {
    if (this.terminated) return null;
    if (this.stopIds.has(id)) return this.current.bottom ? "stop" : null;
    const bytes = this.vocab.bytes[id];
    if (!bytes) return null;
    let cur = this.current;
    for (let k = 0; k < bytes.length; k++) {
      const next = new Configs();
      cur.step(this.grammar, this.pool, bytes[k], next);
      if (next.size === 0 && !(k === bytes.length - 1 && next.bottom)) return null;
      cur = next;
    }
    return cur;
  }

  /** Advances by one token; false (and no change) when the token is not allowed. */
  acceptToken(id: number): boolean {
    const r = this.advance(id);
    if (r === null) return false;
    if (r === "stop") {
      this.history.push(this.current);
      this.terminated = true;
    } else this.history.push(r);
    return true;
  }

  /** Advances over raw text (e.g. a forced prefix); false and no change if it does not fit. */
  acceptString(text: string): boolean {
    const bytes = new TextEncoder().encode(text);
    let cur = this.current;
    for (let k = 0; k < bytes.length; k++) {
      const next = new Configs();
      cur.step(this.grammar, this.pool, bytes[k], next);
      if (next.size === 0 && !(k === bytes.length - 1 && next.bottom)) return false;
      cur = next;
    }
    this.history.push(cur);
    return true;
  }

  /** Undoes the last `count` accepted tokens (e.g. after speculative decoding). */
  rollback(count: number): void {
    if (count < 0 || count >= this.history.length) throw new RangeError(`cannot roll back ${count} tokens`);
    this.history.length -= count;
    if (count > 0) this.terminated = false;
  }

  /** An independent matcher in the same state (for n > 1 choices or beam search). */
  clone(): GrammarMatcher {
    return new GrammarMatcher(this.grammar, this.vocab, { stopTokenIds: [...this.stopIds] }, {
      pool: this.pool,
      history: this.history,
      terminated: this.terminated,
    });
  }

  /** Identifies the parser state (equal keys: same continuations); for search and caching. */
  stateKey(): string {
    const c = this.current;
    const parts = c.states.map((s, i) => `${s}:${c.stacks[i]?.id ?? 0}`).sort();
    return `${parts.join(",")}${c.bottom ? "!" : ""}${this.terminated ? "#" : ""}`;
  }

  /**
   * Fewest bytes that complete the value from here (0 when complete). Lets a caller steer to an
   * end, e.g. when the token budget runs out.
   */
  distanceToComplete(): number {
    const c = this.current;
    if (c.bottom) return 0;
    const dist = completionDistances(this.grammar);
    let best = Infinity;
    for (let i = 0; i < c.size; i++) {
      let d = dist[c.states[i]];
      for (let st = c.stacks[i]; st && d < best; st = st.next) d += dist[st.ret];
      best = Math.min(best, d);
    }
    return best;
  }

  /** Computes the per-state caches of every state reachable so far (e.g. to warm up). */
  warm(): void {
    const mask = new Uint32Array(this.maskWords);
    this.fillNextTokenBitmask(mask);
  }
}

/** Makes a fresh mask buffer sized for the vocabulary (or for a larger logits row). */
export function allocateTokenBitmask(size: number): Uint32Array {
  return new Uint32Array((size + 31) >>> 5);
}

export type { Configs as MatcherConfigs };
