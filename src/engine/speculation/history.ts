// What a model wrote before, as drafts for what it writes next. Prompt lookup (ngram.ts) finds
// nothing to copy in text that repeats no earlier passage of its own request, yet a model's
// answers to one account's requests repeat each other's phrasing: the same openings, the same
// boilerplate, the same formulas (llama.cpp's lookup decoding keeps such a "dynamic" n-gram cache
// across generations). This table remembers, for every ending of up to MAX_CONTEXT tokens seen in
// earlier finished sequences, the token that most often followed it.
//
// Every context is salted with its owner (the fairness key, i.e. the account): drafts only ever
// come from the same account's earlier text, so how fast a stream runs says nothing about what
// other accounts were sent. Drafts are only guesses that the model verifies, so a hash collision
// costs a rejected draft, never a wrong token.

/** Longest ending looked up, in tokens. */
export const MAX_CONTEXT = 6;
/** Shortest ending a draft may continue: a single token's successor is rarely decided. */
const MIN_CONTEXT = 2;
/** Entries kept by default (each about 40 bytes in a Map: some 10 MiB). */
export const DEFAULT_ENTRIES = 1 << 18;
/** Tokens of a finished sequence learnt at most (its last ones). */
const LEARN_TAIL = 4096;
/** Vote counts saturate here, so that a phrase that changed is relearnt soon. */
const MAX_VOTES = 15;

function mix(h: number, x: number): number {
  const m = Math.imul(h ^ x, 0x9e3779b1);
  return m ^ (m >>> 15);
}

/** A string's 32-bit hash (FNV-1a): the salt of an owner's contexts. */
export function ownerSalt(owner: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < owner.length; i++) h = Math.imul(h ^ owner.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/** The successors of contexts seen in an owner's earlier sequences, bounded in entries. */
export class NgramHistory {
  /** Context key → successor token × 16 + votes (a majority vote: the leader and its margin). */
  private readonly next = new Map<number, number>();

  constructor(private readonly capacity = DEFAULT_ENTRIES) {}

  get size(): number {
    return this.next.size;
  }

  /**
   * The keys of the endings of `text` just before position `end` (exclusive), of lengths 1..n:
   * two independent 32-bit hashes in one exact double (53 bits), so unrelated contexts rarely meet.
   */
  private keys(salt: number, at: (i: number) => number, end: number, n: number, out: number[]): number {
    let a = salt ^ 0x5bd1e995;
    let b = Math.imul(salt, 0x27d4eb2f) ^ 0x165667b1;
    let k = 0;
    for (; k < n && end - 1 - k >= 0; k++) {
      const t = at(end - 1 - k);
      a = mix(a, t + k);
      b = mix(b, t ^ (k << 24));
      out[k] = (a >>> 0) * 2 ** 21 + ((b >>> 0) & 0x1fffff);
    }
    return k;
  }

  private readonly scratch: number[] = new Array(MAX_CONTEXT).fill(0);

  /**
   * Learns the successors in a finished sequence of an owner's from position `from` on (at most
   * its last LEARN_TAIL tokens), their endings reaching back before it. The scheduler passes where
   * the answer starts: the prompt is prompt lookup's within its request, and learning a long one
   * would cost every request that sends it.
   */
  learn(salt: number, tokens: readonly number[], from = 0): void {
    const keys = this.scratch;
    const at = (i: number) => tokens[i]!;
    for (let i = Math.max(1, from, tokens.length - LEARN_TAIL); i < tokens.length; i++) {
      const token = tokens[i]!;
      const n = this.keys(salt, at, i, MAX_CONTEXT, keys);
      for (let k = MIN_CONTEXT - 1; k < n; k++) this.vote(keys[k]!, token);
    }
    // Oldest first: a Map iterates in insertion order, and a refreshed entry is reinserted.
    if (this.next.size > this.capacity) {
      let over = this.next.size - this.capacity;
      for (const key of this.next.keys()) {
        if (over-- <= 0) break;
        this.next.delete(key);
      }
    }
  }

  private vote(key: number, token: number): void {
    const entry = this.next.get(key);
    if (entry === undefined) {
      this.next.set(key, token * 16 + 1);
      return;
    }
    const leader = Math.floor(entry / 16);
    const votes = entry % 16;
    this.next.delete(key);
    if (leader === token) this.next.set(key, leader * 16 + Math.min(MAX_VOTES, votes + 1));
    else if (votes > 1) this.next.set(key, leader * 16 + votes - 1);
    else this.next.set(key, token * 16 + 1);
  }

  /**
   * Up to `max` tokens continuing the text `at(0..length-1)` as the owner's earlier text most often
   * went on after its longest known ending, each further token looked up after the ones drafted
   * before it. The first token's ending must be at least `minContext` tokens long (a caller with a
   * match of its own asks only for longer ones); `context` is that ending's length.
   */
  propose(salt: number, at: (i: number) => number, length: number, max: number, minContext = MIN_CONTEXT): { tokens: number[]; context: number } {
    const tokens: number[] = [];
    let context = 0;
    const keys = this.scratch;
    const text = (i: number) => (i < length ? at(i) : tokens[i - length]!);
    while (tokens.length < max) {
      const n = this.keys(salt, text, length + tokens.length, MAX_CONTEXT, keys);
      const shortest = tokens.length === 0 ? Math.max(MIN_CONTEXT, minContext) : MIN_CONTEXT;
      let found = -1;
      // The longest known ending decides, not a shorter and vaguer one.
      for (let k = n - 1; k >= shortest - 1 && found < 0; k--) {
        const entry = this.next.get(keys[k]!);
        if (entry === undefined) continue;
        found = Math.floor(entry / 16);
        if (tokens.length === 0) context = k + 1;
      }
      if (found < 0) break;
      tokens.push(found);
    }
    return { tokens, context };
  }
}
