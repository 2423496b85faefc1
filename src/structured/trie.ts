// The vocabulary as a byte trie laid out in preorder: a walk visits nodes in array order and
// skips a whole subtree (every token sharing a rejected prefix) by jumping to its end index.

export interface TokenTrie {
  /** Node 0 is the root (no byte, depth 0). */
  readonly nodeCount: number;
  readonly byte: Uint8Array;
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
  return {
    nodeCount: byte.length,
    byte: Uint8Array.from(byte),
    depth: Uint16Array.from(depth),
    end: Int32Array.from(end),
    tokStart: Int32Array.from(tokStart),
    tokCount: Int32Array.from(tokCount),
    sortedIds: Int32Array.from(ids),
    maxDepth,
    plainHeight,
    subLo,
    subHi,
  };
}
