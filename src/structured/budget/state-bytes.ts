// Per grammar state, the bytes a completion search leaves out or follows (../completion-budget.ts):
// optional newlines and escapes, and the bytes that may follow a rule.
import type { Grammar } from "../grammar.ts";

const NEWLINE = 1;
const BACKSLASH = 2;

/**
 * Per state, which of a newline (bit NEWLINE) and a backslash (bit BACKSLASH) completions do not
 * take there because the state has another way on. A newline there is optional layout, a
 * backslash the start of an escape in string content that needs none: both only lengthen a
 * document (they never shorten one in any vocabulary we know), and leaving them out keeps the
 * search to the flat layout and away from escapes, which string contents reach from every
 * position. A newline or an escape that is the only way on (Hermes' "<tool_call>\n", a pattern
 * requiring a quote) is taken.
 */
export function optionalBytes(g: Grammar): Uint8Array {
  const out = new Uint8Array(g.stateCount);
  for (let s = 0; s < g.stateCount; s++) {
    const others = g.final[s] || g.callOffset[s + 1] > g.callOffset[s];
    if (g.next[s * 256 + 0x0a] >= 0 && (others || g.byteCount[s] > 1)) out[s] |= NEWLINE;
    if (g.next[s * 256 + 0x5c] >= 0 && (others || g.byteCount[s] > 1) && startsEscape(g, s)) out[s] |= BACKSLASH;
  }
  return out;
}

/**
 * Whether a backslash at s starts an escape: it leads where no other byte does. After a
 * backslash, the backslash is the escaped character itself (as `n` or a quote are), and a
 * completion may well take it.
 */
function startsEscape(g: Grammar, s: number): boolean {
  const t = g.next[s * 256 + 0x5c];
  for (let b = 0; b < 256; b++) if (b !== 0x5c && g.next[s * 256 + b] === t) return false;
  return true;
}

export const skipped = (flags: number, b: number): boolean => (b === 0x0a ? (flags & NEWLINE) !== 0 : b === 0x5c && (flags & BACKSLASH) !== 0);


/**
 * Per rule, the bytes that may come right after it ends (8 words of bits at rule * 8): what its
 * callers read after it, through their own ends. Exits whose token cannot go on with one of
 * them are not kept.
 */
export function followBytes(g: Grammar): Uint32Array {
  const rules = g.ruleBase.length;
  const first = new Uint32Array(g.stateCount * 8);
  const follow = new Uint32Array(rules * 8);
  for (let s = 0; s < g.stateCount; s++) {
    for (let b = 0; b < 256; b++) if (g.next[s * 256 + b] >= 0) first[s * 8 + (b >>> 5)] |= 1 << (b & 31);
  }
  const or = (dst: Uint32Array, d: number, src: Uint32Array, o: number): boolean => {
    let changed = false;
    for (let w = 0; w < 8; w++) {
      const v = (dst[d + w] | src[o + w]) >>> 0;
      if (v !== dst[d + w]) ((dst[d + w] = v), (changed = true));
    }
    return changed;
  };
  for (let changed = true; changed; ) {
    changed = false;
    for (let s = 0; s < g.stateCount; s++) {
      for (let j = g.callOffset[s]; j < g.callOffset[s + 1]; j++) {
        const callee = g.ruleOf[g.callStart[j]];
        changed = or(first, s * 8, first, g.callStart[j] * 8) || changed;
        changed = or(follow, callee * 8, first, g.callReturn[j] * 8) || changed;
      }
      if (g.final[s]) changed = or(first, s * 8, follow, g.ruleOf[s] * 8) || changed;
    }
  }
  return follow;
}
