// The KV cache for standard-ops graphs (present = concat(past, new)): each sequence keeps its own
// [kv_heads, length, head_dim] arrays, and a decode step over several sequences pads their pasts
// on the left to a common length, as the standard graph's attention mask expects. That costs a
// copy of every past per step: slower than the fused path, but any export runs batched.
import type * as ort from "onnxruntime-node";
import { chunkInputs, type DecoderSession } from "../runtime/decoder.ts";
import type { RopePlan } from "../runtime/mrope.ts";
import { floatTensor, halfBits } from "../runtime/tensors.ts";
import { copyHeads, type KvArray, type KvBackend, type PrefixKv, type Sequence } from "./kv.ts";

class PaddedSequence implements Sequence {
  tokens: number[] = [];
  arrays: KvArray[];
  rope?: RopePlan;
  constructor(
    readonly id: number,
    readonly capacity: number,
    empty: () => KvArray,
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

  constructor(private readonly decoder: DecoderSession) {
    this.heads = decoder.spec.kvHeads;
    this.dim = decoder.spec.headDim;
    this.tensorCount = decoder.spec.layers.length * 2;
  }

  sequenceBytes(capacity: number): number {
    return this.tensorCount * capacity * this.decoder.positionBytes;
  }

  capacityFor(needed: number): number {
    return Math.min(needed, this.decoder.spec.contextLength);
  }

  private alloc(n: number): KvArray {
    return this.decoder.spec.kvType === "float16" ? new Uint16Array(n) : new Float32Array(n);
  }

  open(capacity: number): Sequence {
    return new PaddedSequence(this.nextId++, capacity, () => this.alloc(0), this.tensorCount);
  }

  close(s: Sequence): void {
    const seq = s as PaddedSequence;
    seq.arrays = [];
  }

  private data(t: ort.Tensor): KvArray {
    return t.type === "float16" ? halfBits(t.data) : (t.data as Float32Array);
  }

  private async run(feeds: Record<string, ort.Tensor>, past: KvArray[], dims: number[], width: number, logitPositions = 1): Promise<ort.InferenceSession.ReturnType> {
    const { spec } = this.decoder;
    spec.layers.forEach((l, i) => {
      feeds[l.pastKey] = floatTensor(spec.kvType, past[2 * i]!, dims);
      feeds[l.pastValue] = floatTensor(spec.kvType, past[2 * i + 1]!, dims);
    });
    return this.decoder.run(feeds, undefined, width, logitPositions);
  }

  private presents(out: ort.InferenceSession.ReturnType): KvArray[] {
    return this.decoder.spec.layers.flatMap((l) => [this.data(out[l.presentKey]!), this.data(out[l.presentValue]!)]);
  }

  async prefill(s: Sequence, tokens: number[], embeds?: Float32Array): Promise<Float32Array> {
    const seq = s as PaddedSequence;
    const past = seq.tokens.length;
    const feeds = await this.decoder.feeds(chunkInputs(tokens, past, embeds, seq.rope));
    const out = await this.run(feeds, seq.arrays, [1, this.heads, past, this.dim], tokens.length);
    seq.arrays = this.presents(out);
    seq.tokens.push(...tokens);
    return this.decoder.lastLogits(out[this.decoder.spec.logits]!, 0);
  }

  async decode(list: Sequence[], tokens: number[]): Promise<Float32Array[]> {
    if (list.length === 1) return [await this.prefill(list[0]!, [tokens[0]!])];
    const seqs = list as PaddedSequence[];
    const B = seqs.length;
    const { heads, dim } = this;
    const P = Math.max(...seqs.map((s) => s.tokens.length));
    const rowSize = heads * P * dim;
    const past = Array.from({ length: this.tensorCount }, () => this.alloc(B * rowSize));
    const mask = new Uint8Array(B * (P + 1));
    const positions: number[] = [];
    seqs.forEach((s, b) => {
      const len = s.tokens.length;
      const pad = P - len;
      for (let t = 0; t < this.tensorCount; t++) copyHeads(s.arrays[t]!, 0, len, past[t]!, b * rowSize + pad * dim, P, heads, dim, len);
      mask.fill(1, b * (P + 1) + pad, (b + 1) * (P + 1));
      // Decoding is past the prompt: every position row is len + the prompt's rope delta.
      positions.push(len + (s.rope?.delta ?? 0));
    });
    const feeds = await this.decoder.feeds({ batch: B, width: 1, ids: tokens, mask, maskWidth: P + 1, positions });
    const out = await this.run(feeds, past, [B, heads, P, dim], 1);
    const present = this.presents(out);
    const outRow = heads * (P + 1) * dim;
    return seqs.map((s, b) => {
      const len = s.tokens.length + 1;
      const pad = P + 1 - len;
      s.arrays = present.map((a) => {
        const dst = this.alloc(heads * len * dim);
        copyHeads(a, b * outRow + pad * dim, P + 1, dst, 0, len, heads, dim, len);
        return dst;
      });
      s.tokens.push(tokens[b]!);
      return this.decoder.lastLogits(out[this.decoder.spec.logits]!, b);
    });
  }

  readonly canVerify = true;

  /** As decode(), `width` tokens per row after the left padding; a shorter list is padded past its end. */
  async verify(list: Sequence[], tokens: number[][]): Promise<Float32Array[][]> {
    const seqs = list as PaddedSequence[];
    const B = seqs.length;
    const { heads, dim } = this;
    const width = Math.max(...tokens.map((t) => t.length));
    const P = Math.max(...seqs.map((s) => s.tokens.length));
    const rowSize = heads * P * dim;
    const past = Array.from({ length: this.tensorCount }, () => this.alloc(B * rowSize));
    const mask = new Uint8Array(B * (P + width));
    const ids: number[] = [];
    const positions: number[] = [];
    seqs.forEach((s, b) => {
      const len = s.tokens.length;
      const pad = P - len;
      for (let t = 0; t < this.tensorCount; t++) copyHeads(s.arrays[t]!, 0, len, past[t]!, b * rowSize + pad * dim, P, heads, dim, len);
      mask.fill(1, b * (P + width) + pad, (b + 1) * (P + width));
      const t = tokens[b]!;
      for (let j = 0; j < width; j++) {
        ids.push(t[Math.min(j, t.length - 1)]!);
        positions.push(len + j + (s.rope?.delta ?? 0));
      }
    });
    const feeds = await this.decoder.feeds({ batch: B, width, ids, mask, maskWidth: P + width, positions });
    const out = await this.run(feeds, past, [B, heads, P, dim], width, width);
    const present = this.presents(out);
    const outRow = heads * (P + width) * dim;
    const logits = out[this.decoder.spec.logits]!;
    return seqs.map((s, b) => {
      const t = tokens[b]!;
      const len = s.tokens.length + t.length;
      const pad = P - s.tokens.length;
      s.arrays = present.map((a) => {
        const dst = this.alloc(heads * len * dim);
        copyHeads(a, b * outRow + pad * dim, P + width, dst, 0, len, heads, dim, len);
        return dst;
      });
      s.tokens.push(...t);
      return t.map((_, j) => this.decoder.positionLogits(logits, b, j, width));
    });
  }

  truncate(s: Sequence, length: number): void {
    const seq = s as PaddedSequence;
    const len = seq.tokens.length;
    if (length >= len) return;
    seq.arrays = seq.arrays.map((a) => {
      const out = this.alloc(this.heads * length * this.dim);
      copyHeads(a, 0, len, out, 0, length, this.heads, this.dim, length);
      return out;
    });
    seq.tokens.length = length;
  }

  snapshot(s: Sequence, length: number): PrefixKv {
    const seq = s as PaddedSequence;
    const len = seq.tokens.length;
    const arrays = seq.arrays.map((a) => {
      const out = this.alloc(this.heads * length * this.dim);
      copyHeads(a, 0, len, out, 0, length, this.heads, this.dim, length);
      return out;
    });
    return { tokens: seq.tokens.slice(0, length), arrays, bytes: this.tensorCount * length * this.decoder.positionBytes };
  }

  restore(s: Sequence, prefix: PrefixKv, length: number): void {
    const seq = s as PaddedSequence;
    const from = prefix.tokens.length;
    seq.arrays = prefix.arrays.map((a) => {
      const out = this.alloc(this.heads * length * this.dim);
      copyHeads(a, 0, from, out, 0, length, this.heads, this.dim, length);
      return out;
    });
    seq.tokens = prefix.tokens.slice(0, length);
  }
}
