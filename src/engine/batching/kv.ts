// What the scheduler needs from a KV cache implementation: sequences that hold a cache of fixed
// capacity, prefill (one sequence, a chunk of tokens), one batched decode step over many
// sequences, and copies of a prefix in and out for the prefix cache.

import type { KvArray } from "../runtime/kv-memory.ts";
import type { RopePlan } from "../runtime/mrope.ts";

export type { KvArray };

export interface Sequence {
  readonly id: number;
  /** Positions up to which this sequence may grow (its reservation). */
  readonly capacity: number;
  /** The tokens whose keys and values are in the cache, in order. */
  readonly tokens: number[];
  /**
   * 3-D positions of a prompt with images, for multimodal rotary graphs (only the padded backend
   * takes those); set by the scheduler before the prefill. Absent: token i sits at position i.
   */
  rope?: RopePlan;
}

/** A copy of the first `tokens.length` positions of a sequence's cache, per KV tensor [heads, length, headDim]. */
export interface PrefixKv {
  tokens: number[];
  arrays: KvArray[];
  bytes: number;
  /** In the prefix cache: the fairness key (the account) whose request it came from, the only one it serves. */
  owner?: string;
}

export interface KvBackend {
  /** The capacity a sequence needing `needed` positions gets (at least `needed`, at most the context). */
  capacityFor(needed: number): number;
  /** Bytes reserved for a sequence of this capacity. */
  sequenceBytes(capacity: number): number;
  open(capacity: number): Sequence;
  /** Frees the sequence's cache at once. */
  close(seq: Sequence): void;
  /**
   * Appends `tokens` to the sequence's cache; the logits of its last token. `embeds` [tokens,
   * hidden] replaces the tokens' own embeddings (image features), for inputs_embeds graphs.
   */
  prefill(seq: Sequence, tokens: number[], embeds?: Float32Array): Promise<Float32Array>;
  /** Appends one token to each sequence in one batched run; the logits per sequence. */
  decode(seqs: Sequence[], tokens: number[]): Promise<Float32Array[]>;
  /** Whether verify() runs here (see FusedKvBackend.canVerify). */
  readonly canVerify: boolean;
  /**
   * Appends `tokens[i]` (one or more) to sequence i, all in one batched run: for checking
   * speculated tokens. The logits after each appended position, per sequence. Rows run as wide
   * as the longest list (the shorter padded past their end), so every sequence must have room
   * for that many positions in its context.
   */
  verify(seqs: Sequence[], tokens: number[][]): Promise<Float32Array[][]>;
  /** Forgets the cached positions from `length` on (speculated tokens that were rejected). */
  truncate(seq: Sequence, length: number): void;
  /** Copies the first `length` cached positions out. */
  snapshot(seq: Sequence, length: number): PrefixKv;
  /** Fills an empty sequence with the first `length` positions of a snapshot. */
  restore(seq: Sequence, prefix: PrefixKv, length: number): void;
}
