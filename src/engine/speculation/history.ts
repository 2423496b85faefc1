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
/**
 * Slots by default: two per bucket, 12 bytes each (a 53-bit key, a token and its votes), 6 MiB
 * per model; the pages are the system's only once written.
 */
export const DEFAULT_SLOTS = 1 << 19;
/** Tokens of a finished sequence learnt at most (its last ones). */
const LEARN_TAIL = 4096;
/** Successor ids below this fit a slot. */
const MAX_TOKEN = 2 ** 27;
/** Vote counts saturate here, so that a phrase that changed is relearnt soon. */
const MAX_VOTES = 15;

function mix(h: number, x: number): number {
  const m = Math.imul(h ^ x, 0x9e3779b1);
  return m ^ (m >>> 15);
}

/**
 * The salt of an owner's contexts: 64 bits of the owner's hash (wyhash), one half seeding each of
 * a key's two hashes, so that among even millions of accounts two share a salt (and so a table)
 * with a chance below 10^-7.
 */
export type Salt = readonly [number, number];

export function ownerSalt(owner: string): Salt {
  const h = Bun.hash.wyhash(owner);
  return [Number(h & 0xffffffffn), Number(h >> 32n)];
}

/**
 * The successors of contexts seen in owners' earlier sequences, in a fixed table: each context
 * hashes to a bucket of two slots; a new one replaces the entry with fewer votes (the older on a
 * tie), so a phrase seen often outlives one seen once.
 */
export class NgramHistory {
  /** Per slot: the context's key (0: empty). */
  private readonly keysOf: Float64Array;
  /** Per slot: successor token × 16 + votes (a majority vote: the leader and its margin). */
  private readonly next: Int32Array;
  private readonly bucketMask: number;
  private used = 0;

  constructor(slots = DEFAULT_SLOTS) {
    const buckets = 2 ** Math.max(1, Math.floor(Math.log2(slots / 2)));
    this.keysOf = new Float64Array(2 * buckets);
    this.next = new Int32Array(2 * buckets);
    this.bucketMask = buckets - 1;
  }

  /** Slots in use. */
  get size(): number {
    return this.used;
  }

  /** Slots in all. */
  get capacity(): number {
    return this.next.length;
  }

  /**
   * The keys of the endings of `text` just before position `end` (exclusive), of lengths 1..n:
   * two independent 32-bit hashes in one exact double (53 bits, never 0), so unrelated contexts
   * rarely meet.
   */
  private keys(salt: Salt, at: (i: number) => number, end: number, n: number, out: number[]): number {
    let a = salt[0] ^ 0x5bd1e995;
    let b = salt[1] ^ 0x165667b1;
    let k = 0;
    for (; k < n && end - 1 - k >= 0; k++) {
      const t = at(end - 1 - k);
      a = mix(a, t + k);
      b = mix(b, t ^ (k << 24));
      out[k] = (a >>> 0) * 2 ** 21 + ((b >>> 0) & 0x1fffff) + 1;
    }
    return k;
  }

  private readonly scratch: number[] = new Array(MAX_CONTEXT).fill(0);

  /** The first of the two slots `key` may occupy (its bucket, from the key's first hash). */
  private bucket(key: number): number {
    return 2 * (Math.floor(key / 2 ** 21) & this.bucketMask);
  }

  /** The slot holding `key`, or -1. */
  private find(key: number): number {
    const first = this.bucket(key);
    if (this.keysOf[first] === key) return first;
    if (this.keysOf[first + 1] === key) return first + 1;
    return -1;
  }

  /**
   * Learns the successors in a finished sequence of an owner's from position `from` on (at most
   * its last LEARN_TAIL tokens), their endings reaching back before it. The scheduler passes where
   * the answer starts: the prompt is prompt lookup's within its request, and learning a long one
   * would cost every request that sends it.
   */
  learn(salt: Salt, tokens: readonly number[], from = 0): void {
    const keys = this.scratch;
    const at = (i: number) => tokens[i]!;
    for (let i = Math.max(1, from, tokens.length - LEARN_TAIL); i < tokens.length; i++) {
      const token = tokens[i]!;
      const n = this.keys(salt, at, i, MAX_CONTEXT, keys);
      for (let k = MIN_CONTEXT - 1; k < n; k++) this.vote(keys[k]!, token);
    }
  }

  private vote(key: number, token: number): void {
    // A successor is stored as token × 16 in an int32: ids past 2^27 (no vocabulary has them) are left out.
    if (token < 0 || token >= MAX_TOKEN) return;
    const slot = this.find(key);
    if (slot < 0) {
      const first = this.bucket(key);
      if (this.next[first + 1] === 0 || this.next[first] === 0) this.used++;
      // The second slot holds the older of two equals: on a tie it goes, and the first moves there.
      if ((this.next[first]! & 15) >= (this.next[first + 1]! & 15)) {
        this.keysOf[first + 1] = this.keysOf[first]!;
        this.next[first + 1] = this.next[first]!;
      }
      this.keysOf[first] = key;
      this.next[first] = token * 16 + 1;
      return;
    }
    const entry = this.next[slot]!;
    const leader = entry >>> 4;
    const votes = entry & 15;
    if (leader === token) this.next[slot] = leader * 16 + Math.min(MAX_VOTES, votes + 1);
    else if (votes > 1) this.next[slot] = entry - 1;
    else this.next[slot] = token * 16 + 1;
  }

  /**
   * Up to `max` tokens continuing the text `at(0..length-1)` as the owner's earlier text most often
   * went on after its longest known ending, each further token looked up after the ones drafted
   * before it. The first token's ending must be at least `minContext` tokens long (a caller with a
   * match of its own asks only for longer ones); `context` is that ending's length.
   */
  propose(salt: Salt, at: (i: number) => number, length: number, max: number, minContext = MIN_CONTEXT): { tokens: number[]; context: number } {
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
        const slot = this.find(keys[k]!);
        if (slot < 0) continue;
        found = this.next[slot]! >>> 4;
        if (tokens.length === 0) context = k + 1;
      }
      if (found < 0) break;
      tokens.push(found);
    }
    return { tokens, context };
  }
}
