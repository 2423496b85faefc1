// Counted string content (a string's minLength/maxLength) as one object rather than one state per
// count. Such a string compiles to a chain of states C[0], C[1], ... where C[k] is "k characters
// read": every character leads from C[k] to C[k + 1], and the states differ only by what the count
// allows next (the closing quote from minLength on, no more content at maxLength). A string of 400
// to 2,000 characters is 2,000 such states.
//
// The fewest tokens that finish the document from C[k] (completion-budget.ts) follow from the same
// few facts for every k: from a token boundary at C[k], a token is either j characters of content
// (to C[k + j] at a token boundary, for each j some token of the vocabulary has) or j characters
// and then a byte that is not content (a quote, a backslash), read by C[k + j] and continued from
// the state it leads to with the token still open. The second kind leads out of the chain to the
// same few places for every k (after the closing quote: the same state whatever the count), so
// their searches are done once and shared, and each position is then a minimum over its lengths
// and its exits, from the end of the chain back to its start (solveChain). Searching each
// position separately instead meant, per position, the whole list of tokens that end a string
// (and the label-correcting search passing every improvement along 92 lengths of Qwen3's
// vocabulary): about 5 s for 2,000 positions, against tens of milliseconds this way.

import { budgetTick } from "./compile-budget.ts";
import { byGrammarContent, type Grammar } from "./grammar.ts";
import { simpleStates } from "./parser-state.ts";
import { contentRun } from "./token-walk.ts";
import { CONTENT_STEP } from "./trie.ts";

/** A run of distinct content states, C[0] first. */
export interface ContentChain {
  readonly positions: Int32Array;
  /** The state after the last position (one that reads no content alike, or a loop reading it forever): searched on its own. */
  readonly beyond: number;
  /** `beyond` reads any number of characters (a minLength without maxLength ends in a loop). */
  readonly endless: boolean;
  /**
   * The states after 0, 1, 2, ... characters from the first position: the positions, then
   * `beyond`, then `beyond` again when it loops (the form of budget/unit-runs.ts's chains).
   */
  readonly states: Int32Array;
}

/** Chains shorter than this are left to the general search (a name of up to 12 characters costs it little). */
const MIN_POSITIONS = 8;
/** contentRun's "reads content forever". */
const ENDLESS = 1 << 20;
/** Bytes a content state reads at least: the printable ASCII characters but the quote and backslash. */
const MIN_CONTENT_BYTES = 0x7f - 0x20 - 2;
/** Any character of content (a space): every content state sends all of them to one state. */
const CHARACTER = 0x20;

/** What this module derives from one grammar: its chains, which position each state is, its loops. */
interface GrammarChains {
  readonly chains: readonly ContentChain[];
  /** Per state: its chain's number (-1: none) and its position there. */
  readonly chain: Int32Array;
  readonly position: Int32Array;
  readonly loops: Map<number, ContentChain | null>;
}

/**
 * By grammar and by the grammar's content: a model worker may get a new grammar object for the
 * same schema per request, and the chains, their units and windows then stay (some tens of
 * milliseconds per request for a string of 2,000 characters). Small: arrays per state, a few grammars.
 */
const chainsOf = byGrammarContent(16, (g): GrammarChains => {
  const chains = findChains(g);
  const chain = new Int32Array(g.stateCount).fill(-1);
  const position = new Int32Array(g.stateCount);
  chains.forEach((ch, n) => ch.positions.forEach((x, k) => ((chain[x] = n), (position[x] = k))));
  return { chains, chain, position, loops: new Map() };
});

/**
 * The grammar's content chains: each starts at a content state that no content state leads to,
 * and follows the characters while they reach new states.
 */
export function contentChains(g: Grammar): readonly ContentChain[] {
  return chainsOf(g).chains;
}

function findChains(g: Grammar): ContentChain[] {
  const n = g.stateCount;
  const reached = new Uint8Array(n);
  const isContent = new Uint8Array(n);
  for (let s = 0; s < n; s++) {
    budgetTick();
    // A state reading every character alike reads at least the printable ASCII ones: most states
    // are ruled out by their byte count before the costlier look at their targets.
    if (g.byteCount[s] < MIN_CONTENT_BYTES || contentRun(g, s) === 0) continue;
    isContent[s] = 1;
    const t = g.next[s * 256 + CHARACTER]!;
    if (t !== s) reached[t] = 1;
  }
  const out: ContentChain[] = [];
  for (let head = 0; head < n; head++) {
    if (!isContent[head] || reached[head]) continue;
    const positions: number[] = [];
    const seen = new Set<number>();
    let x = head;
    while (isContent[x] && !seen.has(x)) {
      budgetTick();
      seen.add(x);
      positions.push(x);
      x = g.next[x * 256 + CHARACTER]!;
    }
    // A chain that comes back to a state before its last one loops over several states: left to the general search.
    if (seen.has(x) && x !== positions[positions.length - 1]) continue;
    const endless = seen.has(x);
    if (endless) positions.pop();
    if (positions.length < MIN_POSITIONS) continue;
    const states = Int32Array.from(endless ? [...positions, x, x] : [...positions, x]);
    out.push({ positions: states.subarray(0, positions.length), beyond: x, endless, states });
  }
  return out;
}

/** The chain state s is a position of, and which position, or null. */
export function chainPosition(g: Grammar, s: number): { chain: ContentChain; k: number } | null {
  const c = chainsOf(g);
  const n = c.chain[s]!;
  if (n >= 0) return { chain: c.chains[n]!, k: c.position[s]! };
  const loop = loopChain(g, c.loops, s);
  return loop && { chain: loop, k: 0 };
}

/**
 * A state that reads any number of characters, each back to itself (a string without
 * minLength or maxLength), as a chain of no positions that is all `beyond`: its units and
 * content classes work as at a counted string's positions.
 */
function loopChain(g: Grammar, loops: Map<number, ContentChain | null>, s: number): ContentChain | null {
  let c = loops.get(s);
  if (c !== undefined) return c;
  c = g.hasBytes[s] && contentRun(g, s) >= ENDLESS && g.next[s * 256 + CHARACTER] === s
    ? { positions: new Int32Array(0), beyond: s, endless: true, states: Int32Array.of(s, s) }
    : null;
  loops.set(s, c);
  return c;
}

/**
 * The states after 0, 1, 2, ... characters from state s when s is a position of a content chain
 * (a view of the chain's states, see ContentChain.states), else null.
 */
export function chainFrom(g: Grammar, s: number): Int32Array | null {
  const at = chainPosition(g, s);
  return at && at.chain.states.subarray(at.k);
}

/** Where the token boundary or the byte after j characters from position k is read: a position's state, or `beyond`. */
export function stateAfter(chain: ContentChain, k: number, j: number): number {
  const i = k + j;
  return i < chain.positions.length ? chain.positions[i]! : chain.beyond;
}

/** Characters readable from position k (run of its state): all of them for an endless chain. */
export function runAt(g: Grammar, chain: ContentChain, k: number): number {
  const r = contentRun(g, stateAfter(chain, k, 0));
  return r >= ENDLESS ? ENDLESS : r;
}

/**
 * The states inside one character at each position, when the grammar's follow the decoding
 * states (trie.ts CONTENT_STEP) exactly, as a counted string's do: then a token's state is known
 * from its class (whole characters, decoding state at its end) without reading its bytes, and
 * lists per vocabulary (content-below.ts) stand for every position.
 */
export interface ChainUnits {
  /** mid[i * 8 + q]: the state at position i (0 .. positions, the last being `beyond`) in decoding state q, -1 when none. */
  readonly mid: Int32Array;
  /**
   * Per position (and `beyond`): the state after a backslash when it leads to the next position
   * by single bytes (a counted string's short escapes), else -1.
   */
  readonly escape: Int32Array;
}

/** A chain's units as checked so far: positions are checked when first asked about (a long string's first step need not check 2,000). */
interface UnitCheck {
  readonly units: ChainUnits;
  /** Per position: 0 not checked yet, 1 follows the decoding states, 2 does not. */
  readonly status: Uint8Array;
  readonly escaped: EscapedBytes;
}

const unitCache = new WeakMap<ContentChain, UnitCheck>();
const UNSET = -2;

/** The chain's ChainUnits, or null when some position's states do not follow the decoding states. */
export function chainUnits(g: Grammar, chain: ContentChain): ChainUnits | null {
  return chainUnitsAt(g, chain, 0, chain.positions.length);
}

/** The chain's ChainUnits when positions from .. to (clamped to the chain and `beyond`) follow the decoding states, else null. */
export function chainUnitsAt(g: Grammar, chain: ContentChain, from: number, to: number): ChainUnits | null {
  let c = unitCache.get(chain);
  const count = chain.positions.length;
  if (!c) {
    const units = { mid: new Int32Array((count + 1) * 8).fill(-1), escape: new Int32Array(count + 1).fill(-1) };
    unitCache.set(chain, (c = { units, status: new Uint8Array(count + 1), escaped: { bytes: null } }));
  }
  for (let i = Math.min(from, count); i <= Math.min(to, count); i++) {
    if (c.status[i] === 0) c.status[i] = unitsAt(g, chain, i, c.units.mid, c.units.escape, c.escaped) ? 1 : 2;
    if (c.status[i] === 2) return null;
  }
  return c.units;
}

/** Decoding states by the bytes still to come (1, then 2, then 3): a state's successors come before it. */
const BY_REMAINING = [1, 2, 3, 4, 5, 6, 7];

/** The bytes every state after a backslash of a chain reads (one set for the chain, or its units are not used). */
interface EscapedBytes {
  bytes: string | null;
}

function unitsAt(g: Grammar, chain: ContentChain, i: number, mid: Int32Array, escape: Int32Array, escaped: EscapedBytes): boolean {
  const next = g.next;
  const x = stateAfter(chain, i, 0);
  if (i === chain.positions.length && !chain.endless) {
    // At maxLength: nothing that starts a character may be read (tokens longer than the run are not followed).
    for (let b = 0; b < 256; b++) if ((CONTENT_STEP[b]! >= 0 || b === 0x5c) && next[x * 256 + b]! >= 0) return false;
    return true;
  }
  const after = stateAfter(chain, i, 1);
  const simple = simpleStates(g);
  const m = new Int32Array(8).fill(UNSET);
  for (let b = 0x80; b < 0x100; b++) {
    const q = CONTENT_STEP[b]!;
    if (q <= 0) continue;
    const y = next[x * 256 + b]!;
    if (m[q] === UNSET) m[q] = y;
    else if (m[q] !== y) return false;
  }
  for (const q of [...BY_REMAINING].reverse()) {
    budgetTick();
    const y = m[q]!;
    if (y < 0) continue;
    if (!simple[y]) return false;
    for (let b = 0; b < 256; b++) {
      const q2 = CONTENT_STEP[q * 256 + b]!;
      const z = next[y * 256 + b]!;
      if (q2 < 0 ? z >= 0 : q2 === 0 ? z !== after : m[q2] !== UNSET && m[q2] !== z) return false;
      if (q2 > 0 && m[q2] === UNSET) m[q2] = z;
    }
  }
  for (let q = 1; q < 8; q++) mid[i * 8 + q] = m[q] === UNSET ? -1 : m[q]!;
  const e = next[x * 256 + 0x5c]!;
  if (e >= 0) {
    if (!simple[e]) return false;
    const read: number[] = [];
    let single = true;
    for (let b = 0; b < 256; b++) {
      if (next[e * 256 + b]! < 0) continue;
      if (next[e * 256 + b] !== after) single = false;
      read.push(b);
    }
    // Escapes of more than one byte after the backslash (\uXXXX, in strings without counts) are
    // searched and walked as any other bytes: the chain has no escape units then.
    const key = single ? read.join(",") : "long";
    if (escaped.bytes !== null && escaped.bytes !== key) return false;
    escaped.bytes = key;
    if (single) escape[i] = e;
  }
  return true;
}

/** Decoding states in the order a solver fills them: those with fewer bytes to come first. */
export const MID_ORDER: readonly number[] = BY_REMAINING;

/** Per chain: each position's signature number once computed (-1 before), and the numbers by signature. */
const windowCache = new WeakMap<ContentChain, { sig: Int32Array; ids: Map<string, number> }>();

/**
 * A number per position (and `beyond`) standing for what it does besides reading the next
 * character: where each byte that is not content leads (the closing quote from minLength on),
 * whether it reads content, which states inside a character and after a backslash it has.
 * Positions with equal numbers over a token's reach allow the same tokens (chainWindowKey).
 * Positions whose units are checked only.
 */
function windowSignature(g: Grammar, chain: ContentChain, units: ChainUnits, w: { sig: Int32Array; ids: Map<string, number> }, i: number): number {
  const y = stateAfter(chain, i, 0);
  let key = i < chain.positions.length || chain.endless ? "c" : "";
  for (let q = 1; q < 8; q++) key += units.mid[i * 8 + q]! >= 0 ? "m" : "-";
  key += units.escape[i]! >= 0 ? "e" : "-";
  for (let b = 0; b < 256; b++) {
    // A backslash's escape unit is relative to the position (checked); any other is named by its state.
    if ((b === 0x5c && units.escape[i]! >= 0) || CONTENT_STEP[b]! >= 0) continue;
    const t = g.next[y * 256 + b]!;
    if (t >= 0) key += `,${b}>${t}`;
  }
  let id = w.ids.get(key);
  if (id === undefined) w.ids.set(key, (id = w.ids.size));
  w.sig[i] = id;
  return id;
}

/**
 * For a position of a counted string whose units follow the decoding states: a key equal for
 * positions that allow the same tokens whatever the stack (the same signatures over the next
 * `width` characters, width being the longest token's bytes), so their masks are computed once.
 * A string of 400 to 2,000 characters has a few hundred distinct ones (near minLength and
 * maxLength), not 2,000. Null for other states.
 */
export function chainWindowKey(g: Grammar, s: number, width: number): string | null {
  const at = chainPosition(g, s);
  // A string without counts is one state: its mask is shared across grammars by what it reads (state-masks.ts).
  const units = at && at.chain.positions.length > 0 && chainUnitsAt(g, at.chain, at.k, at.k + width);
  if (!at || !units) return null;
  const count = at.chain.positions.length;
  let w = windowCache.get(at.chain);
  if (!w) windowCache.set(at.chain, (w = { sig: new Int32Array(count + 1).fill(-1), ids: new Map() }));
  const signatures = w;
  const sig = (i: number) => (signatures.sig[i]! >= 0 ? signatures.sig[i]! : windowSignature(g, at.chain, units, signatures, i));
  // Run-length encoded signatures of positions k .. k + width (past the last one, `beyond`), per chain.
  let key = `${at.chain.positions[0]}:`;
  let prev = -1;
  let run = 0;
  for (let j = 0; j <= width; j++) {
    const id = sig(Math.min(at.k + j, count));
    if (id === prev) run++;
    else {
      if (prev >= 0) key += `${prev}*${run},`;
      prev = id;
      run = 1;
    }
  }
  return `${key}${prev}*${run}`;
}
