// The KV cache for standard-ops graphs (present = concat(past, new)): each sequence keeps its own
// [kv_heads, length, head_dim] buffers, and a decode step over several sequences pads their pasts
// on the left to a common length, as the standard graph's attention mask expects. That costs a
// copy of every past per step (in the decoder's memory: on a GPU it stays there): slower than the
// fused path, but any export runs batched.
import { chunkInputs, lastLogits, positionLogits, type Decoder, type PaddedRun } from "../runtime/decoder.ts";
import type { KvBuffer, KvMemory } from "../runtime/kv-memory.ts";
import type { RopePlan } from "../runtime/mrope.ts";
import type { KvBackend, PrefixKv, Sequence } from "./kv.ts";

class PaddedSequence implements Sequence {
  tokens: number[] = [];
  arrays: KvBuffer[];
  rope?: RopePlan;
  constructor(
    readonly id: number,
    readonly capacity: number,
    empty: () => KvBuffer,
    count: number,
  ) {
    this.arrays = Array.from({ length: count }, empty);
  }
}

export class PaddedKvBackend implements KvBackend {
  private nextId = 1;
  private readonly heads: number;
  private readonly dim: number;
  private readonly tensorCount: number;
  private readonly memory: KvMemory;

  constructor(private readonly decoder: Decoder) {
    this.heads = decoder.spec.kvHeads;
    this.dim = decoder.spec.headDim;
    this.tensorCount = decoder.spec.layers.length * 2;
    this.memory = decoder.memory;
  }

  sequenceBytes(capacity: number): number {
    return this.tensorCount * capacity * this.decoder.positionBytes;
  }

  capacityFor(needed: number): number {
    return Math.min(needed, this.decoder.spec.contextLength);
  }

  open(capacity: number): Sequence {
    return new PaddedSequence(this.nextId++, capacity, () => this.memory.alloc(0), this.tensorCount);
  }

  /** Replaces a sequence's buffers, freeing the old ones. */
  private replace(seq: PaddedSequence, arrays: KvBuffer[]): void {
    for (const a of seq.arrays) this.memory.free(a);
    seq.arrays = arrays;
  }

  close(s: Sequence): void {
    this.replace(s as PaddedSequence, []);
  }

  /** Copies row `b` of each present [batch, heads, width, dim] (its last `len` positions) into new buffers. */
  private rowOf(out: PaddedRun<unknown>, b: number, width: number, len: number): KvBuffer[] {
    const { heads, dim } = this;
    const outRow = heads * width * dim;
    return out.presents.map((a) => {
      const dst = this.memory.alloc(heads * len * dim);
      this.memory.copyHeads(a, b * outRow + (width - len) * dim, width, dst, 0, len, heads, dim, len);
      return dst;
    });
  }

  /** The sequences' pasts left padded to the longest, [batch, heads, P, dim] per tensor. */
  private padded(seqs: PaddedSequence[], P: number): KvBuffer[] {
    const { heads, dim } = this;
    const rowSize = heads * P * dim;
    const past = Array.from({ length: this.tensorCount }, () => this.memory.alloc(seqs.length * rowSize));
    seqs.forEach((s, b) => {
      const len = s.tokens.length;
      for (let t = 0; t < this.tensorCount; t++) this.memory.copyHeads(s.arrays[t]!, 0, len, past[t]!, b * rowSize + (P - len) * dim, P, heads, dim, len);
    });
    return past;
  }

  async prefill(s: Sequence, tokens: number[], embeds?: Float32Array): Promise<Float32Array> {
    const seq = s as PaddedSequence;
    const past = seq.tokens.length;
    const out = await this.decoder.runPadded(chunkInputs(tokens, past, embeds, seq.rope), seq.arrays, past, 1, (l) => lastLogits(l, 0));
    // One row: the presents are the sequence's cache as they are.
    this.replace(seq, out.presents);
    seq.tokens.push(...tokens);
    return out.read;
  }

  async decode(list: Sequence[], tokens: number[]): Promise<Float32Array[]> {
    if (list.length === 1) return [await this.prefill(list[0]!, [tokens[0]!])];
    const seqs = list as PaddedSequence[];
    const B = seqs.length;
    const P = Math.max(...seqs.map((s) => s.tokens.length));
    const mask = new Uint8Array(B * (P + 1));
    const positions: number[] = [];
    const lengths: number[] = [];
    seqs.forEach((s, b) => {
      const len = s.tokens.length;
      mask.fill(1, b * (P + 1) + P - len, (b + 1) * (P + 1));
      // Decoding is past the prompt: every position row is len + the prompt's rope delta.
      positions.push(len + (s.rope?.delta ?? 0));
      lengths.push(len + 1);
    });
    const past = this.padded(seqs, P);
    const out = await this.decoder.runPadded({ batch: B, width: 1, ids: tokens, mask, maskWidth: P + 1, lengths, positions }, past, P, 1, (l) => seqs.map((_, b) => lastLogits(l, b)));
    for (const a of past) this.memory.free(a);
    const result = seqs.map((s, b) => {
      this.replace(s, this.rowOf(out, b, P + 1, s.tokens.length + 1));
      s.tokens.push(tokens[b]!);
      return out.read[b]!;
    });
    for (const a of out.presents) this.memory.free(a);
    return result;
  }

  readonly canVerify = true;

  /** As decode(), `width` tokens per row after the left padding; a shorter list is padded past its end. */
  async verify(list: Sequence[], tokens: number[][]): Promise<Float32Array[][]> {
    const seqs = list as PaddedSequence[];
    const B = seqs.length;
    const width = Math.max(...tokens.map((t) => t.length));
    const P = Math.max(...seqs.map((s) => s.tokens.length));
    const mask = new Uint8Array(B * (P + width));
    const ids: number[] = [];
    const positions: number[] = [];
    const lengths: number[] = [];
    seqs.forEach((s, b) => {
      const len = s.tokens.length;
      mask.fill(1, b * (P + width) + P - len, (b + 1) * (P + width));
      lengths.push(len + width);
      const t = tokens[b]!;
      for (let j = 0; j < width; j++) {
        ids.push(t[Math.min(j, t.length - 1)]!);
        positions.push(len + j + (s.rope?.delta ?? 0));
      }
    });
    const past = this.padded(seqs, P);
    const out = await this.decoder.runPadded({ batch: B, width, ids, mask, maskWidth: P + width, lengths, positions }, past, P, width, (l) =>
      tokens.map((t, b) => t.map((_, j) => positionLogits(l, b, j, width))),
    );
    for (const a of past) this.memory.free(a);
    const { heads, dim } = this;
    const result = seqs.map((s, b) => {
      const t = tokens[b]!;
      const len = s.tokens.length + t.length;
      // Row b holds its past from column P - past, then its tokens (and padding past them).
      const outRow = heads * (P + width) * dim;
      const start = P - s.tokens.length;
      this.replace(
        s,
        out.presents.map((a) => {
          const dst = this.memory.alloc(heads * len * dim);
          this.memory.copyHeads(a, b * outRow + start * dim, P + width, dst, 0, len, heads, dim, len);
          return dst;
        }),
      );
      s.tokens.push(...t);
      return out.read[b]!;
    });
    for (const a of out.presents) this.memory.free(a);
    return result;
  }

  truncate(s: Sequence, length: number): void {
    const seq = s as PaddedSequence;
    const len = seq.tokens.length;
    if (length >= len) return;
    this.replace(
      seq,
      seq.arrays.map((a) => {
        const out = this.memory.alloc(this.heads * length * this.dim);
        this.memory.copyHeads(a, 0, len, out, 0, length, this.heads, this.dim, length);
        return out;
      }),
    );
    seq.tokens.length = length;
  }

  snapshot(s: Sequence, length: number): PrefixKv {
    const seq = s as PaddedSequence;
    const len = seq.tokens.length;
    const arrays = seq.arrays.map((a) => this.memory.read(a, 0, len, this.heads, this.dim, length));
    return { tokens: seq.tokens.slice(0, length), arrays, bytes: this.tensorCount * length * this.decoder.positionBytes };
  }

  restore(s: Sequence, prefix: PrefixKv, length: number): void {
    const seq = s as PaddedSequence;
    const from = prefix.tokens.length;
    this.replace(
      seq,
      prefix.arrays.map((a) => {
        const out = this.memory.alloc(this.heads * length * this.dim);
        this.memory.write(a, from, out, 0, length, this.heads, this.dim, length);
        return out;
      }),
    );
    seq.tokens = prefix.tokens.slice(0, length);
  }
}
