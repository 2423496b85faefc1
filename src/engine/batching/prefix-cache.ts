// Prefix caching: the KV of prompts (and of finished conversations) kept by token sequence, so a
// request that starts with the same tokens (a long system prompt, the earlier turns of a chat)
// copies it instead of recomputing it. Entries are charged to the model's KV budget and evicted
// least recently used when running sequences need the room.
//
// An entry serves only the account whose request made it: a hit shows in the response
// (usage.prompt_tokens_details.cached_tokens, and a first token sooner), so a cache shared between
// accounts would tell one account what prompts another had sent, a prefix at a time (OpenAI
// scopes its prompt cache to an organisation; vLLM salts its cache per request for the same
// reason). A system prompt that several accounts send is cached once per account.
import type { KvBudget } from "./budget.ts";
import type { PrefixKv } from "./kv.ts";

/** The account an entry serves (one made without an owner serves requests without one). */
const ownerOf = (e: PrefixKv) => e.owner ?? "";

export interface PrefixMatch {
  entry: PrefixKv;
  /** Leading tokens of the prompt the entry covers. */
  length: number;
}

export class PrefixCache {
  /** Insertion order is recency: a hit moves the entry to the end. */
  private entries: PrefixKv[] = [];
  private bytes = 0;
  hits = 0;
  reusedTokens = 0;

  constructor(
    private readonly budget: KvBudget,
    /** Shorter prefixes are not worth an entry. */
    readonly minTokens: number,
    /** The most of the budget the cache may hold while sequences leave it room. */
    private readonly maxBytes: number,
  ) {}

  get size(): number {
    return this.entries.length;
  }

  get usedBytes(): number {
    return this.bytes;
  }

  /** `owner`'s entry sharing the longest prefix with `tokens`, at most `limit` tokens of it. */
  lookup(tokens: number[], limit: number, owner: string): PrefixMatch | null {
    let best: PrefixMatch | null = null;
    for (const entry of this.entries) {
      if (ownerOf(entry) !== owner) continue;
      const n = Math.min(entry.tokens.length, limit);
      let i = 0;
      while (i < n && entry.tokens[i] === tokens[i]) i++;
      if (i >= this.minTokens && (!best || i > best.length)) best = { entry, length: i };
    }
    if (best) {
      this.touch(best.entry);
      this.hits++;
      this.reusedTokens += best.length;
    }
    return best;
  }

  /** Whether an entry of `owner`'s already holds all of `tokens`. */
  covers(tokens: number[], owner: string): boolean {
    return this.entries.some((e) => ownerOf(e) === owner && e.tokens.length >= tokens.length && tokens.every((t, i) => e.tokens[i] === t));
  }

  /** Adds an entry for its owner (dropping the owner's entries it extends); false when the budget has no room for it. */
  insert(kv: PrefixKv): boolean {
    const owner = ownerOf(kv);
    if (kv.tokens.length < this.minTokens || this.covers(kv.tokens, owner)) return false;
    for (const e of [...this.entries]) {
      if (ownerOf(e) === owner && e.tokens.length < kv.tokens.length && e.tokens.every((t, i) => kv.tokens[i] === t)) this.remove(e);
    }
    while (this.bytes + kv.bytes > this.maxBytes && this.entries.length > 0) this.remove(this.entries[0]!);
    if (this.bytes + kv.bytes > this.maxBytes || !this.budget.tryReserve(kv.bytes)) return false;
    this.entries.push(kv);
    this.bytes += kv.bytes;
    return true;
  }

  /** Evicts least recently used entries until the budget has `bytes` free; false if it cannot. */
  makeRoom(bytes: number): boolean {
    while (this.budget.freeBytes < bytes && this.entries.length > 0) this.remove(this.entries[0]!);
    return this.budget.freeBytes >= bytes;
  }

  private touch(e: PrefixKv) {
    const i = this.entries.indexOf(e);
    if (i >= 0) {
      this.entries.splice(i, 1);
      this.entries.push(e);
    }
  }

  private remove(e: PrefixKv) {
    const i = this.entries.indexOf(e);
    if (i < 0) return;
    this.entries.splice(i, 1);
    this.bytes -= e.bytes;
    this.budget.release(e.bytes);
  }
}
