// Per resting state, what it allows whatever the stack below holds: computed once per state and
// vocabulary, and shared between grammars for the states of rules without calls (keyed by the
// rule's automaton), so string contents, numbers and formats are walked once per vocabulary.

import { contentBase } from "./content-base.ts";
import { chainWindowKey } from "./content-chains.ts";
import type { RuleDfa } from "./automaton.ts";
import { type Grammar, grammarFingerprint } from "./grammar.ts";
import { Configs, StackPool } from "./parser-state.ts";
import type { TokenVocabulary } from "./token-bytes.ts";
import { CONTENT_STEP } from "./trie.ts";
import { contentRun, Levels, rangesCount, rangesToBits, rangesToIds, walk } from "./token-walk.ts";

/** What one resting state allows, independent of the stack below it. */
export interface StateMask {
  /** Dense bitmask when many tokens are accepted, else null and the ids are in acceptedIds. */
  readonly accepted: Uint32Array | null;
  readonly acceptedIds: Int32Array | null;
  /** Trie nodes after which the state's rule may have ended with bytes of the token left over. */
  readonly boundaries: Int32Array;
  /**
   * Equal for equal boundary lists on a vocabulary: what follows them depends on the stack only,
   * so e.g. every position of a string shares the tokens that close it and go on in the caller.
   */
  readonly boundaryId: number;
}

const boundaryIds = new WeakMap<TokenVocabulary, Map<string, number>>();
/** Ids are never reused (continuations are cached by them), so the table may simply be dropped. */
let nextBoundaryId = 1;
const BOUNDARY_TABLE_LIMIT = 50_000;

function boundaryId(vocab: TokenVocabulary, b: readonly number[]): number {
  if (b.length === 0) return 0;
  let ids = boundaryIds.get(vocab);
  if (!ids) boundaryIds.set(vocab, (ids = new Map()));
  const key = b.join(",");
  let id = ids.get(key);
  if (id === undefined) {
    if (ids.size >= BOUNDARY_TABLE_LIMIT) ids.clear();
    ids.set(key, (id = nextBoundaryId++));
  }
  return id;
}


const maskCaches = new WeakMap<Grammar, WeakMap<TokenVocabulary, (StateMask | undefined)[]>>();

export function stateMasks(g: Grammar, vocab: TokenVocabulary): (StateMask | undefined)[] {
  let byVocab = maskCaches.get(g);
  if (!byVocab) maskCaches.set(g, (byVocab = new WeakMap()));
  let list = byVocab.get(vocab);
  if (!list) byVocab.set(vocab, (list = new Array(g.stateCount)));
  return list;
}

const sharedMasks = new WeakMap<TokenVocabulary, Map<number, (StateMask | undefined)[]>>();

/**
 * Leaf automata by content, as small numbers: equal automata (compiled apart, e.g. from schemas
 * differing only in annotations) get the same id. Looked up once per automaton object, by a
 * sampled hash and then an exact comparison of the transition tables.
 */
const leafIds = new WeakMap<RuleDfa, number>();
const leavesByHash = new Map<number, Array<{ dfa: RuleDfa; id: number }>>();
let leafCount = 0;
/** Transition tables the table above holds (a counted string of 4096 characters is 37 MB of them). */
let leafBytes = 0;
let nextLeafId = 1;

const bytesOf = (a: Int32Array | Uint8Array) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);

function sameAutomaton(a: RuleDfa, b: RuleDfa): boolean {
  return a.count === b.count && Buffer.compare(bytesOf(a.final), bytesOf(b.final)) === 0 && Buffer.compare(bytesOf(a.next), bytesOf(b.next)) === 0;
}

function leafId(dfa: RuleDfa): number {
  let id = leafIds.get(dfa);
  if (id !== undefined) return id;
  let h = dfa.count | 0;
  for (let s = 0; s < dfa.count; s++) h = Math.imul(h ^ dfa.final[s], 0x01000193);
  for (let k = 0; k < dfa.next.length; k += 61) h = Math.imul(h ^ dfa.next[k], 0x01000193);
  let list = leavesByHash.get(h);
  if (!list) {
    // Ids are never reused; dropping the table only loses sharing with automata seen before.
    if (leafCount >= LEAF_IDS_LIMIT || leafBytes > LEAF_BYTES_LIMIT) ((leavesByHash.clear()), (leafCount = 0), (leafBytes = 0));
    leavesByHash.set(h, (list = []));
  }
  id = list.find((e) => sameAutomaton(e.dfa, dfa))?.id;
  if (id === undefined) {
    list.push({ dfa, id: (id = nextLeafId++) });
    leafCount++;
    leafBytes += dfa.next.byteLength;
  }
  leafIds.set(dfa, id);
  return id;
}
const LEAF_IDS_LIMIT = 4096;
const LEAF_BYTES_LIMIT = 16 * 1024 * 1024;
/**
 * Masks kept per vocabulary across grammars (dense masks take 19 KB each on a 150k vocabulary):
 * past this, they are dropped and recomputed on demand. Without a bound in bytes, schemas with
 * many distinct long strings grew a model worker by gigabytes.
 */
const SHARED_MASK_BYTES_LIMIT = 32 * 1024 * 1024;
const sharedMaskBytes = new WeakMap<TokenVocabulary, { bytes: number }>();

const counted = new WeakSet<StateMask>();
const maskBytes = (m: StateMask) => (m.accepted?.byteLength ?? m.acceptedIds?.byteLength ?? 0) + m.boundaries.byteLength + 64;

/** Counts a mask kept across grammars; past the bound, every such mask of the vocabulary is dropped. */
function keepShared(vocab: TokenVocabulary, m: StateMask): void {
  // Positions of a counted string share masks (chainWindowKey): each is counted once.
  if (counted.has(m)) return;
  counted.add(m);
  let used = sharedMaskBytes.get(vocab);
  if (!used) sharedMaskBytes.set(vocab, (used = { bytes: 0 }));
  used.bytes += maskBytes(m);
  if (used.bytes > SHARED_MASK_BYTES_LIMIT) {
    sharedMasks.get(vocab)?.clear();
    bySignature.get(vocab)?.clear();
    windowMasks.get(vocab)?.clear();
    used.bytes = 0;
  }
}
/** Rules whose masks are kept per vocabulary (dense masks of long strings take 19 KB per state at 150k tokens). */
const SHARED_RULES_LIMIT = 512;

/**
 * The mask of a state of a rule without calls depends on that rule's automaton alone: such masks
 * are kept per vocabulary under the automaton's content, so string contents, numbers and formats
 * are computed once for all grammars on a vocabulary.
 */
export function stateMask(g: Grammar, vocab: TokenVocabulary, s: number): StateMask {
  const r = g.ruleOf[s];
  const leaf = g.leafRules[r];
  if (leaf === null) return sharedInsideString(g, vocab, s);
  const key = leafId(leaf);
  let shared = sharedMasks.get(vocab);
  if (!shared) sharedMasks.set(vocab, (shared = new Map()));
  let list = shared.get(key);
  if (list) {
    // Most recently used last, so the oldest rule's masks are the ones dropped.
    shared.delete(key);
    shared.set(key, list);
  } else {
    shared.set(key, (list = []));
    if (shared.size > SHARED_RULES_LIMIT) shared.delete(shared.keys().next().value!);
  }
  const local = s - g.ruleBase[r];
  let m = list[local];
  if (!m) {
    m = list[local] = sharedInsideString(g, vocab, s);
    keepShared(vocab, m);
  }
  return m;
}

/** States reachable from a state beyond which its signature is not taken (no sharing). */
const SIGNATURE_LIMIT = 64;
const bySignature = new WeakMap<TokenVocabulary, Map<string, StateMask>>();

/**
 * Everything reachable from state s (transitions, calls, finals, renumbered in discovery order),
 * or null past SIGNATURE_LIMIT states. The stack-independent mask of s depends on nothing else.
 */
function signature(g: Grammar, s: number): string | null {
  const order = new Map<number, number>([[s, 0]]);
  const queue = [s];
  let key = "";
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
    key += g.final[x] ? "|F" : "|";
    let b = 0;
    while (b < 256) {
      const t = g.next[x * 256 + b];
      let e = b;
      while (e + 1 < 256 && g.next[x * 256 + e + 1] === t) e++;
      if (t >= 0) key += `${b}-${e}>${id(t)};`;
      b = e + 1;
    }
    for (let c = g.callOffset[x]; c < g.callOffset[x + 1]; c++) key += `C${id(g.callStart[c])}>${id(g.callReturn[c])};`;
  }
  return key;
}

/**
 * Inside string content the walk is the costly kind, and the same string automaton appears in
 * rules that differ elsewhere (a nullable string, a string among enum values): such states are
 * also shared by what is reachable from them. Other states are computed directly (a signature
 * would cost more than their walk).
 */
function sharedInsideString(g: Grammar, vocab: TokenVocabulary, s: number): StateMask {
  if (contentRun(g, s) === 0) return computeStateMask(g, vocab, s);
  const window = chainWindowKey(g, s, vocab.trie.maxDepth);
  if (window !== null) {
    // By the grammar's content key: a grammar larger than the model's grammar cache comes anew
    // with each request, and its masks would be computed again each time (with the same tokens).
    let masks = windowMasks.get(vocab);
    if (!masks) windowMasks.set(vocab, (masks = new Map()));
    const key = `${g.key}\n${grammarFingerprint(g)}\n${window}`;
    let m = masks.get(key);
    if (!m) {
      masks.set(key, (m = computeStateMask(g, vocab, s)));
      keepShared(vocab, m);
      if (masks.size > WINDOW_MASKS_LIMIT) masks.delete(masks.keys().next().value!);
    }
    return m;
  }
  const sig = signature(g, s);
  if (sig === null) return computeStateMask(g, vocab, s);
  let map = bySignature.get(vocab);
  if (!map) bySignature.set(vocab, (map = new Map()));
  let m = map.get(sig);
  if (!m) {
    m = computeStateMask(g, vocab, s);
    map.set(sig, m);
    keepShared(vocab, m);
    if (map.size > SHARED_RULES_LIMIT) map.delete(map.keys().next().value!);
  }
  return m;
}

/** Masks of counted strings' positions by grammar content and window (content-chains.ts chainWindowKey), per vocabulary. */
const windowMasks = new WeakMap<TokenVocabulary, Map<string, StateMask>>();
/** Window masks kept per vocabulary (besides the bound in bytes of keepShared). */
const WINDOW_MASKS_LIMIT = 2048;

const SPARSE_LIMIT = 1024;

// Scratch of local walks, reused: a state's mask is computed in a few microseconds when its
// first bytes prune the trie, and allocating these per state would cost more than the walk.
const levels = new Levels();
const start = new Configs();
const boundaries: number[] = [];
const ranges: number[] = [];
const ROOT = [0];
const UNBOUNDED_CONTENT = 1 << 20;

/** Whether the state reached after `run` characters from s accepts no further content byte. */
function contentEndsAfterRun(g: Grammar, s: number, run: number): boolean {
  if (run >= UNBOUNDED_CONTENT) return false;
  let t = s;
  // Along the run every content character leads to the same state; a space is one.
  for (let k = 0; k < run && t >= 0; k++) t = g.next[t * 256 + 0x20];
  if (t < 0) return false;
  for (let b = 0x20; b < 0x100; b++) if (CONTENT_STEP[b] >= 0 && g.next[t * 256 + b] >= 0) return false;
  return true;
}
const pools = new WeakMap<Grammar, StackPool>();

function computeStateMask(g: Grammar, vocab: TokenVocabulary, s: number): StateMask {
  let pool = pools.get(g);
  if (!pool) pools.set(g, (pool = new StackPool(g.stateCount)));
  boundaries.length = 0;
  ranges.length = 0;
  start.clear();
  start.states.push(s);
  start.stacks.push(null);
  const run = contentRun(g, s);
  // The walk skips subtrees of pure content no longer than the run (contentBase adds them), and
  // all of them when no content can follow the run (maxLength reached): longer ones are refused.
  walk(g, vocab.trie, pool, levels, ROOT, start, ranges, boundaries, run > 0 && contentEndsAfterRun(g, s, run) ? UNBOUNDED_CONTENT : run);
  const b = Int32Array.from(boundaries);
  const bid = boundaryId(vocab, boundaries);
  // Most states allow a handful of tokens: a list keeps thousands of cached states small.
  if (run === 0 && rangesCount(ranges) <= SPARSE_LIMIT) return { accepted: null, acceptedIds: rangesToIds(vocab.trie, ranges), boundaries: b, boundaryId: bid };
  // Dense masks are copied whole into the step's mask (a memcpy even before the JIT warms up).
  let accepted: Uint32Array;
  if (run > 0) {
    const content = contentBase(vocab, run);
    accepted = content.bits.slice();
    for (const id of content.extra) accepted[id >>> 5] |= 1 << (id & 31);
  } else accepted = new Uint32Array((vocab.size + 31) >>> 5);
  rangesToBits(vocab.trie, ranges, accepted);
  return { accepted, acceptedIds: null, boundaries: b, boundaryId: bid };
}

/**
 * Computes the shareable masks (states of rules without calls: string and key contents, numbers,
 * formats, literals) of the given grammars on a vocabulary, and every mask of the `whole` ones
 * (grammars kept for the process, such as json_object's). Meant for model load, so the first
 * requests with new schemas do not pay for the vocabulary-wide walks of string contents.
 */
export function warmStateMasks(vocab: TokenVocabulary, grammars: readonly Grammar[], whole: readonly Grammar[] = []): void {
  for (const g of [...grammars, ...whole]) {
    const all = whole.includes(g);
    const list = stateMasks(g, vocab);
    for (let s = 0; s < g.stateCount; s++) {
      if (!g.hasBytes[s] || list[s] || (!all && g.leafRules[g.ruleOf[s]] === null)) continue;
      list[s] = stateMask(g, vocab, s);
    }
  }
}
