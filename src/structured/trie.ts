// The vocabulary as a byte trie laid out in preorder: a walk visits nodes in array order and
// skips a whole subtree (every token sharing a rejected prefix) by jumping to its end index.

export interface TokenTrie {
  /** Node 0 is the root (no byte, depth 0). */
  readonly nodeCount: number;
  readonly byte: Uint8Array;
  /** Parent node (-1 for the root). */
  readonly parent: Int32Array;
  readonly depth: Uint16Array;
  /** One past the last node of the subtree rooted at each node. */
  readonly end: Int32Array;
  /** Token ids ending at node n: sortedIds[tokStart[n] .. tokStart[n] + tokCount[n]). */
  readonly tokStart: Int32Array;
  readonly tokCount: Int32Array;
  readonly sortedIds: Int32Array;
  readonly maxDepth: number;
  /**
   * Height of the subtree (1 for a leaf) when every byte in it is "plain" string content
   * (printable ASCII other than quote and backslash), else -1. Lets a walk accept such a subtree
   * in one step when the automaton reads plain bytes uniformly (inside strings).
   */
  readonly plainHeight: Int16Array;
  /** All tokens in the subtree of n: sortedIds[subLo[n] .. subHi[n]). */
  readonly subLo: Int32Array;
  readonly subHi: Int32Array;
  /**
   * When every path from n (inclusive) down its subtree is unescaped JSON string content read
   * from a character boundary (valid UTF-8 prefixes, no quote, backslash or control byte): the
   * most characters on such a path, a trailing partial character counting as one. Else -1. Lets
   * a walk accept the subtree at once inside strings (see token-walk.ts charRuns).
   */
  readonly contentChars: Int16Array;
  /**
   * Characters on the path from the root to n when those bytes are unescaped string content
   * (a trailing partial character counting as one), else -1; maxPathChars: the most over the
   * subtree of n when every node in it has one, else -1. A state that reads any R characters
   * accepts every token with 0 < pathChars <= R: such masks are one precomputed bitmask (see
   * content-base.ts), and the walk skips the subtrees it covers.
   */
  readonly pathChars: Int16Array;
  readonly maxPathChars: Int16Array;
  /** Height of the subtree of n (1 for a leaf). */
  readonly height: Uint8Array;
  /**
   * The bytes used anywhere in the subtree of n (n included), 256 bits as 8 words at n*8. A state
   * that treats a byte class alike accepts the subtree whole when these bytes are all in the
   * class and the height fits its run (see class-runs.ts).
   */
  readonly subtreeBytes: Int32Array;
}

/**
 * UTF-8 decoding states for JSON string content: 0 = at a character boundary; others expect
 * continuation bytes (with the lead-byte restrictions that exclude overlong forms and surrogates).
 * Returns the next state, or -1 when the byte cannot continue valid unescaped content.
 */
export function contentStep(q: number, b: number): number {
  switch (q) {
    case 0:
      if (b >= 0x20 && b <= 0x7f) return b === 0x22 || b === 0x5c ? -1 : 0;
      if (b >= 0xc2 && b <= 0xdf) return 1;
      if (b === 0xe0) return 3;
      if (b === 0xed) return 4;
      if (b >= 0xe1 && b <= 0xef) return 2;
      if (b === 0xf0) return 6;
      if (b >= 0xf1 && b <= 0xf3) return 5;
      if (b === 0xf4) return 7;
      return -1;
    case 1:
      return b >= 0x80 && b <= 0xbf ? 0 : -1;
    case 2:
      return b >= 0x80 && b <= 0xbf ? 1 : -1;
    case 3:
      return b >= 0xa0 && b <= 0xbf ? 1 : -1;
    case 4:
      return b >= 0x80 && b <= 0x9f ? 1 : -1;
    case 5:
      return b >= 0x80 && b <= 0xbf ? 2 : -1;
    case 6:
      return b >= 0x90 && b <= 0xbf ? 2 : -1;
    case 7:
      return b >= 0x80 && b <= 0x8f ? 2 : -1;
  }
  return -1;
}
export const CONTENT_STATES = 8;

/** contentStep as a table: CONTENT_STEP[q * 256 + b]. */
export const CONTENT_STEP: Int8Array = (() => {
  const t = new Int8Array(CONTENT_STATES * 256);
  for (let q = 0; q < CONTENT_STATES; q++) for (let b = 0; b < 256; b++) t[q * 256 + b] = contentStep(q, b);
  return t;
})();

/** See TokenTrie.pathChars: top-down (preorder has parents first), then folded bottom-up. */
function pathChars(byte: Uint8Array, parent: Int32Array): { pathChars: Int16Array; maxPathChars: Int16Array } {
  const n = byte.length;
  const chars = new Int16Array(n);
  const q = new Int8Array(n);
  for (let i = 1; i < n; i++) {
    const p = parent[i];
    const q2 = chars[p] < 0 ? -1 : contentStep(q[p], byte[i]);
    if (q2 < 0) {
      chars[i] = -1;
      continue;
    }
    chars[i] = Math.min(chars[p] + (q[p] === 0 ? 1 : 0), 0x7fff);
    q[i] = q2;
  }
  const max = Int16Array.from(chars);
  for (let i = n - 1; i > 0; i--) {
    const p = parent[i];
    if (max[p] >= 0) max[p] = max[i] < 0 ? -1 : Math.max(max[p], max[i]);
  }
  return { pathChars: chars, maxPathChars: max };
}

/** See TokenTrie.subtreeBytes and height: folded bottom-up (children come after parents). */
function subtreeBytes(byte: Uint8Array, parent: Int32Array): { subtreeBytes: Int32Array; height: Uint8Array } {
  const n = byte.length;
  const bits = new Int32Array(n * 8);
  const height = new Uint8Array(n);
  for (let i = n - 1; i > 0; i--) {
    const b = byte[i];
    bits[i * 8 + (b >>> 5)] |= 1 << (b & 31);
    height[i] = Math.max(height[i], 1);
    const p = parent[i];
    for (let w = 0; w < 8; w++) bits[p * 8 + w] |= bits[i * 8 + w];
    if (height[i] + 1 > height[p]) height[p] = Math.min(height[i] + 1, 255);
  }
  return { subtreeBytes: bits, height };
}

/** See TokenTrie.contentChars: one bottom-up pass carrying all decoding states at once. */
function contentChars(byte: Uint8Array, parent: Int32Array): Int16Array {
  const n = byte.length;
  const Q = CONTENT_STATES;
  const step = new Int8Array(Q * 256);
  for (let q = 0; q < Q; q++) for (let b = 0; b < 256; b++) step[q * 256 + b] = contentStep(q, b);
  // agg[i*Q+q]: over the children c of i, max chars of c read in state q (-1 if any is invalid).
  const agg = new Int16Array(n * Q);
  const out = new Int16Array(n).fill(-1);
  for (let i = n - 1; i > 0; i--) {
    const p = parent[i];
    const b = byte[i];
    for (let q = 0; q < Q; q++) {
      const q2 = step[q * 256 + b];
      let v = -1;
      if (q2 >= 0) {
        const below = agg[i * Q + q2];
        if (below >= 0) v = Math.min(below + (q === 0 ? 1 : 0), 0x7fff);
      }
      if (q === 0) out[i] = v;
      const k = p * Q + q;
      const cur = agg[k];
      if (cur >= 0) agg[k] = v < 0 ? -1 : Math.max(cur, v);
    }
  }
  return out;
}

export const isPlainByte = (b: number): boolean => b >= 0x20 && b <= 0x7e && b !== 0x22 && b !== 0x5c;

export function buildTokenTrie(bytes: readonly (Uint8Array | null)[]): TokenTrie {
  const ids: number[] = [];
  bytes.forEach((b, id) => {
    if (b) ids.push(id);
  });
  ids.sort((a, b) => Buffer.compare(bytes[a]!, bytes[b]!));
  const byte: number[] = [0];
  const depth: number[] = [0];
  const end: number[] = [0];
  const tokStart: number[] = [0];
  const tokCount: number[] = [0];
  const path: number[] = [0];
  const parent: number[] = [-1];
  let prev: Uint8Array = new Uint8Array(0);
  let maxDepth = 0;
  ids.forEach((id, order) => {
    const b = bytes[id]!;
    let l = 0;
    const lim = Math.min(prev.length, b.length);
    while (l < lim && prev[l] === b[l]) l++;
    for (let d = prev.length; d > l; d--) end[path[d]] = byte.length;
    for (let d = l + 1; d <= b.length; d++) {
      path[d] = byte.length;
      parent.push(path[d - 1]);
      byte.push(b[d - 1]);
      depth.push(d);
      end.push(0);
      tokStart.push(0);
      tokCount.push(0);
    }
    const node = path[b.length];
    if (tokCount[node] === 0) tokStart[node] = order;
    tokCount[node]++;
    prev = b;
    maxDepth = Math.max(maxDepth, b.length);
  });
  for (let d = prev.length; d >= 0; d--) end[path[d]] = byte.length;
  const n = byte.length;
  const plainHeight = new Int16Array(n);
  const subLo = new Int32Array(n).fill(ids.length);
  const subHi = new Int32Array(n);
  for (let i = 0; i < n; i++) plainHeight[i] = i > 0 && isPlainByte(byte[i]) ? 1 : -1;
  // Reverse preorder visits children before parents.
  for (let i = n - 1; i > 0; i--) {
    if (tokCount[i]) {
      subLo[i] = Math.min(subLo[i], tokStart[i]);
      subHi[i] = Math.max(subHi[i], tokStart[i] + tokCount[i]);
    }
    const p = parent[i];
    subLo[p] = Math.min(subLo[p], subLo[i]);
    subHi[p] = Math.max(subHi[p], subHi[i]);
    if (plainHeight[p] < 0) continue;
    plainHeight[p] = plainHeight[i] < 0 ? -2 : Math.max(plainHeight[p], plainHeight[i] + 1);
  }
  for (let i = 0; i < n; i++) if (plainHeight[i] < 0) plainHeight[i] = -1;
  const byteArr = Uint8Array.from(byte);
  const parentArr = Int32Array.from(parent);
  return {
    nodeCount: byte.length,
    byte: byteArr,
    parent: parentArr,
    depth: Uint16Array.from(depth),
    end: Int32Array.from(end),
    tokStart: Int32Array.from(tokStart),
    tokCount: Int32Array.from(tokCount),
    sortedIds: Int32Array.from(ids),
    maxDepth,
    plainHeight,
    subLo,
    subHi,
    contentChars: contentChars(byteArr, parentArr),
    ...pathChars(byteArr, parentArr),
    ...subtreeBytes(byteArr, parentArr),
  };
}
