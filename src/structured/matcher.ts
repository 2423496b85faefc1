// Token masks from a grammar. The parser state is a small set of configurations: a resting DFA
// state plus a stack of return states (persistent, interned). For every resting state we compute
// once, over the whole vocabulary trie, which tokens are valid whatever the stack holds
// (context-independent: they never leave the state's rule) and which trie nodes are points where
// the rule may end mid-token; only the subtrees below those points are walked per step, against
// the real stack. This is the adaptive token mask cache idea of xgrammar.


import type { Grammar } from "./grammar.ts";
import { completionBudget, type CompletionTables, UNREACHABLE } from "./completion-budget.ts";
import { completionDistances } from "./distances.ts";
import { Configs, StackPool } from "./parser-state.ts";
import { type StateMask, stateMask, stateMasks } from "./state-masks.ts";
import type { TokenVocabulary } from "./token-bytes.ts";
import { Levels, rangesToIds, setBit, walk } from "./token-walk.ts";

/**
 * Time the compile thread gives the distances from every state (prepareBudgetTables), past the
 * ones a budget needs at admission (a search already started finishes; they are a cache, and
 * none starts past half the compile time limit).
 */
const STATE_SEARCH_MS = 250;

/** tokensToFinish when nothing finishes the document. */
export const UNREACHABLE_TOKENS = UNREACHABLE;

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


export interface MatcherOptions {
  /** Tokens that end generation (EOS, end of turn): allowed only when the text is complete. */
  readonly stopTokenIds?: readonly number[];
}

const pools = new WeakMap<Grammar, WeakMap<TokenVocabulary, StackPool>>();
/** Continuations cached past this many entries are dropped (they are recomputed on demand). */
const CONTINUATIONS_LIMIT = 100_000;

/**
 * Matchers of one grammar and vocabulary share interned stacks and so the continuation cache:
 * a new request finds the walks of earlier ones done.
 */
function sharedPool(g: Grammar, vocab: TokenVocabulary): StackPool {
  let byVocab = pools.get(g);
  if (!byVocab) pools.set(g, (byVocab = new WeakMap()));
  let pool = byVocab.get(vocab);
  if (!pool) byVocab.set(vocab, (pool = new StackPool(g.stateCount)));
  if (pool.continuations.size > CONTINUATIONS_LIMIT) pool.continuations.clear();
  return pool;
}

/** Parser state for one generation; tells which tokens may come next. */
export class GrammarMatcher {
  private readonly pool: StackPool;
  private readonly masks: (StateMask | undefined)[];
  private readonly levels = new Levels();
  private readonly stopIds: ReadonlySet<number>;
  private history: Configs[];
  private terminated = false;
  private readonly ranges: number[] = [];

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
      this.pool = sharedPool(grammar, vocab);
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
   * With `tokensLeft` (how many tokens may still be generated, this one and a stop token
   * included), tokens after which the document could no longer be finished in time are left out
   * too, so a budget that can hold a document ends with one (see completion-budget.ts).
   */
  fillNextTokenBitmask(mask: Uint32Array, tokensLeft?: number): void {
    this.fillGrammarMask(mask);
    if (tokensLeft !== undefined && !this.terminated) this.narrowToBudget(mask, tokensLeft);
  }

  private fillGrammarMask(mask: Uint32Array): void {
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
      if (acc) {
        if (i === 0) mask.set(acc.length > words ? acc.subarray(0, words) : acc);
        else for (let w = 0; w < words; w++) mask[w] |= acc[w];
      } else {
        const ids = m.acceptedIds!;
        for (let k = 0; k < ids.length; k++) setBit(mask, ids[k]);
      }
      const st = cur.stacks[i];
      if (m.boundaries.length === 0 || st === null) continue;
      // Tokens that end this rule and go on in the caller depend on the stack: walked once per
      // (boundary list, stack) and remembered, since loops (array items, object members) and
      // later requests with the same grammar revisit them.
      const key = m.boundaryId * 2 ** 32 + st.id;
      let ids = this.pool.continuations.get(key);
      if (!ids) {
        const parent = new Configs();
        parent.addClosure(g, this.pool, st.ret, st.next);
        const ranges = this.ranges;
        ranges.length = 0;
        if (parent.size > 0) {
          walk(g, this.vocab.trie, this.pool, this.levels, m.boundaries, parent, ranges, null);
        }
        ids = rangesToIds(this.vocab.trie, ranges);
        this.pool.continuations.set(key, ids);
      }
      for (let k = 0; k < ids.length; k++) setBit(mask, ids[k]);
    }
    if (cur.bottom) for (const id of this.stopIds) if (id >>> 5 < mask.length) setBit(mask, id);
  }

  /**
   * Keeps in `mask` only the tokens after which the rest of the document fits in what is left.
   * Most steps stop at the first test: a bound from byte distances shows that no token can
   * leave too much. Otherwise the next tokens grouped by the distance they leave (walked once
   * per parser state and cached) say which to clear.
   */
  private narrowToBudget(mask: Uint32Array, tokensLeft: number): void {
    const cur = this.current;
    // After this token, what must still fit: the rest of the document and a stop token.
    const limit = tokensLeft - 1 - (this.stopIds.size > 0 ? 1 : 0);
    const budget = completionBudget(this.grammar, this.vocab, this.pool);
    if (budget.byteBound(cur) <= limit) return;
    // Past saving (a budget below the shortest document): leave the model free, it ends by length.
    if (budget.distance(cur) > limit + 1) return;
    const profile = budget.nextProfile(cur, this.stateKey());
    if (profile.max <= limit) return;
    const ids = this.vocab.trie.sortedIds;
    for (const [d, lists] of profile.groups) {
      if (d <= limit) continue;
      for (const ranges of lists) {
        for (let k = 0; k < ranges.length; k += 2) {
          for (let j = ranges[k]; j < ranges[k + 1]; j++) {
            const id = ids[j];
            if (id >>> 5 < mask.length) mask[id >>> 5] &= ~(1 << (id & 31));
          }
        }
      }
    }
  }

  /**
   * Fewest tokens that finish the document from here, a stop token included (0 once it has
   * stopped); UNREACHABLE_TOKENS when no sequence of this vocabulary's tokens finishes it.
   */
  tokensToFinish(): number {
    if (this.terminated) return 0;
    const d = completionBudget(this.grammar, this.vocab, this.pool).distance(this.current);
    return d >= UNREACHABLE ? UNREACHABLE_TOKENS : d + (this.stopIds.size > 0 ? 1 : 0);
  }

  /**
   * Computes now what the first budgeted steps would (the distances from here, the bound that
   * lets ample budgets through): tens of milliseconds on a new grammar with a large vocabulary,
   * better spent before decoding than inside a step.
   */
  prepareBudget(): void {
    const budget = completionBudget(this.grammar, this.vocab, this.pool);
    budget.distance(this.current);
    budget.byteBound(this.current);
  }

  /**
   * prepareBudget and, within `ms` milliseconds more, the distances from every state of the
   * grammar (see CompletionBudget.searchStates): what the thread that compiles a grammar does
   * before budgetTables, so that budget masks of its first requests find them.
   */
  prepareBudgetTables(ms = STATE_SEARCH_MS): void {
    this.prepareBudget();
    completionBudget(this.grammar, this.vocab, this.pool).searchStates(ms);
  }

  /**
   * What prepareBudget computed that depends only on the grammar and the vocabulary, for matchers
   * of the same grammar in another thread (adoptCompletionTables there).
   */
  budgetTables(): CompletionTables {
    return completionBudget(this.grammar, this.vocab, this.pool).exportTables();
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
