// The KV cache for GroupQueryAttention graphs (shared past/present buffer): sequences live in
// rows of per-capacity pools, one [rows, kv_heads, capacity, head_dim] buffer per layer's key and
// value. A decode step feeds the first rows of a pool as one batch (right padded, each row's
// tokens at [0, length)) as the past. The decoder's step outputs (runtime/step-kv-outputs.ts) give
// the positions the run added, which are copied into their rows: no cache is copied into a new
// tensor per step. A graph loaded without step outputs gets the same buffers as its present
// outputs, so ONNX Runtime writes in place (and the binding copies each present back).
//
// The buffers are the decoder's memory (runtime/kv-memory.ts): JavaScript arrays for
// onnxruntime-node, the execution provider's own memory through the C API (capi/), where a GPU
// keeps the cache and only a step's token ids, positions and lengths cross to it.
import { CANONICAL_BLOCK } from "../runtime/canonical-attention.ts";
import { chunkInputs, lastLogits, positionLogits, type Decoder, type Logits, type StepInputs } from "../runtime/decoder.ts";
import type { KvBuffer, KvMemory } from "../runtime/kv-memory.ts";
import type { KvBackend, PrefixKv, Sequence } from "./kv.ts";

class FusedSequence implements Sequence {
  tokens: number[] = [];
  row = -1;
  /** The pool it lives in now; it moves to a larger one as it grows, up to `capacity`. */
  pool: Pool | null = null;
  constructor(
    readonly id: number,
    /** Its reservation: the most positions it may ever hold. */
    readonly capacity: number,
  ) {}
}

/**
 * Rows are kept packed at the front (a closed row takes the last row's contents), so a batch is
 * always a prefix of the buffer. A sequence's row holds zeros past its positions when it is given
 * one (placed, moved or filling a gap), whatever the buffers held before: attention masks those
 * positions, and zero weights times them add nothing only while they are finite. Buffers grow by
 * doubling up to the rows the budget allows (huge lazily-backed buffers would make the garbage
 * collector run constantly); an emptied pool drops its buffers.
 */
class Pool {
  rows: FusedSequence[] = [];
  private buffers: KvBuffer[] | null = null;
  allocatedRows = 0;
  /**
   * The decoder's tensors over rows of the buffers, made again only when the buffers are
   * replaced (see Decoder.runPool).
   */
  readonly views = new Map<number, unknown>();
  constructor(
    readonly capacity: number,
    readonly maxRows: number,
    readonly stride: number,
    private readonly decoder: Decoder,
  ) {}

  /** One buffer per layer's key and value. */
  get arrays(): KvBuffer[] | null {
    return this.buffers;
  }

  set arrays(buffers: KvBuffer[] | null) {
    this.buffers = buffers;
    this.decoder.dropViews(this.views);
  }
}

/**
 * Buffers of pools that moved up a class or emptied, for the next pool that needs one. Decoding
 * rows move up a class every few dozen tokens: new buffers each time were fresh pages to fault in
 * (about five times the cost of writing reused ones here), and at 16 streams of stories260K the
 * moves took about 6% of the worker's time. Kept up to a bound, outside the budget's accounting.
 *
 * A buffer taken again is not cleared: the rows a pool puts sequences in are (see Pool), so only
 * what is used is written, not the whole allocation (a pool of one row allocates four: zeroing
 * them all at every class move wrote 2.6 MB per move for stories260K at 256 positions, and evicted
 * the model's weights from the cache the next step needed).
 */
export class SpareBuffers {
  private readonly spare: KvBuffer[] = [];
  private elements = 0;

  constructor(
    private readonly memory: KvMemory,
    /** The most elements kept. */
    private readonly limit: number,
  ) {}

  /**
   * A buffer of `length` values: a view of the smallest spare one that is large enough (holding
   * what it held), or a new one (zeros).
   */
  take(length: number): KvBuffer {
    let best = -1;
    for (let i = 0; i < this.spare.length; i++) {
      const a = this.spare[i]!;
      if (a.length >= length && (best < 0 || a.length < this.spare[best]!.length)) best = i;
    }
    if (best < 0) return this.memory.alloc(length);
    const [whole] = this.spare.splice(best, 1);
    this.elements -= whole!.length;
    return this.memory.prefix(whole!, length);
  }

  /** Keeps these buffers (whole, whatever view was handed out) while the bound allows; frees the rest. */
  give(buffers: KvBuffer[]): void {
    for (const a of buffers) {
      const whole = a.whole ?? a;
      if (this.elements + whole.length > this.limit) {
        this.memory.free(whole);
        continue;
      }
      this.spare.push(whole);
      this.elements += whole.length;
    }
  }
}

/** The sequences of a batch by the pool they live in, each with its index in the batch. */
function byPool(list: Sequence[]): Map<Pool, Map<FusedSequence, number>> {
  const pools = new Map<Pool, Map<FusedSequence, number>>();
  list.forEach((s, i) => {
    const seq = s as FusedSequence;
    let m = pools.get(seq.pool!);
    if (!m) pools.set(seq.pool!, (m = new Map()));
    m.set(seq, i);
  });
  return pools;
}

/** A row whose new positions go into the cache: batch row, its first new position, how many (all). */
type Write = [row: number, position: number, count?: number];

export class FusedKvBackend implements KvBackend {
  private pools = new Map<number, Pool>();
  private readonly spare: SpareBuffers;
  private nextId = 1;
  private readonly heads: number;
  private readonly dim: number;
  private readonly tensorCount: number;
  private readonly memory: KvMemory;
  /**
   * A batch-invariant decoder's runs compute two rows or more of its 4-bit products (see
   * BatchInvariance): a lone sequence's decode step and one-token prompt chunk get a second row
   * riding along, and its prompt chunks the logits of two positions.
   */
  private readonly pairRows: boolean;
  /** Rows every pool allocates at least (the second row a paired run rides along on). */
  private readonly minRows: number;

  constructor(
    private readonly decoder: Decoder,
    /** The most bytes all sequences may reserve; bounds each pool's rows. */
    private readonly budgetBytes: number,
  ) {
    this.heads = decoder.spec.kvHeads;
    this.dim = decoder.spec.headDim;
    this.tensorCount = decoder.spec.layers.length * 2;
    this.memory = decoder.memory;
    const elementBytes = decoder.spec.kvType === "float16" ? 2 : 4;
    this.pairRows = decoder.invariance?.pairRows === true;
    this.minRows = this.pairRows ? 2 : 1;
    this.spare = new SpareBuffers(this.memory, Math.min(budgetBytes / 8, 64 * 2 ** 20) / elementBytes);
  }

  sequenceBytes(capacity: number): number {
    return this.tensorCount * capacity * this.decoder.positionBytes;
  }

  private get limit(): number {
    return Math.min(this.decoder.spec.maxCacheLength, this.decoder.spec.contextLength);
  }

  /**
   * The class (see capacityClass; at most the graph's limit) that holds `needed` positions. The
   * canonical attention reads the buffer in blocks of CANONICAL_BLOCK positions: a limit that is
   * not a multiple of it is rounded up (the positions past it are never used).
   */
  capacityFor(needed: number): number {
    const capacity = Math.min(capacityClass(needed), this.limit);
    return this.decoder.invariance ? Math.ceil(capacity / CANONICAL_BLOCK) * CANONICAL_BLOCK : capacity;
  }

  /**
   * Where a sequence that needs `needed` positions lives now. Attention and ONNX Runtime's buffers
   * for the present scale with rows × pool capacity (and, without step outputs, so does the
   * binding's copy of each present): a sequence sits in the smallest class that holds it and moves
   * up as it grows, rather than in the class of its whole reservation. It joins a running pool of
   * a slightly larger class rather than start a batch of one.
   */
  private classFor(needed: number, reservation: number): number {
    const c = Math.min(this.capacityFor(needed), reservation);
    for (const p of [...this.pools.values()].sort((a, b) => a.capacity - b.capacity)) {
      if (p.rows.length > 0 && p.capacity >= c && p.capacity <= Math.min(c * 4, reservation) && p.rows.length < p.maxRows) return p.capacity;
    }
    return c;
  }

  private newPool(capacity: number): Pool {
    const maxRows = Math.max(1, Math.floor(this.budgetBytes / this.sequenceBytes(capacity)));
    return new Pool(capacity, maxRows, this.heads * capacity * this.dim, this.decoder);
  }

  private pool(capacity: number): Pool {
    let pool = this.pools.get(capacity);
    if (!pool) {
      pool = this.newPool(capacity);
      this.pools.set(capacity, pool);
    }
    if (pool.rows.length >= pool.maxRows) throw new Error(`KV pool of capacity ${capacity} is full`);
    if (pool.rows.length >= pool.allocatedRows) {
      const rows = Math.max(this.minRows, Math.min(pool.maxRows, Math.max(4, pool.allocatedRows * 2)));
      const n = rows * pool.stride;
      const used = pool.rows.length * pool.stride;
      const old = pool.arrays;
      pool.arrays = Array.from({ length: this.tensorCount }, (_, i) => {
        const a = this.spare.take(n);
        if (old) this.memory.copy(old[i]!, 0, a, 0, used);
        return a;
      });
      if (old) this.spare.give(old);
      pool.allocatedRows = rows;
    }
    return pool;
  }

  private place(seq: FusedSequence, capacity: number): void {
    const pool = this.pool(capacity);
    seq.pool = pool;
    seq.row = pool.rows.length;
    pool.rows.push(seq);
    for (const a of pool.arrays!) this.memory.fill0(a, seq.row * pool.stride, (seq.row + 1) * pool.stride);
  }

  open(capacity: number): Sequence {
    const seq = new FusedSequence(this.nextId++, capacity);
    this.place(seq, this.classFor(1, capacity));
    return seq;
  }

  /** Moves the sequence to a pool that holds `needed` positions, keeping its cache. */
  private ensure(seq: FusedSequence, needed: number): void {
    const from = seq.pool!;
    if (needed <= from.capacity) return;
    if (needed > seq.capacity) throw new Error(`sequence reserved ${seq.capacity} positions, needs ${needed}`);
    if (this.growTogether(from, needed)) return;
    // Saved before unplace: the last row of the pool moves into the gap it leaves.
    const saved = from.arrays!.map((a) => {
      const row = this.memory.alloc(from.stride);
      this.memory.copy(a, seq.row * from.stride, row, 0, from.stride);
      return row;
    });
    this.unplace(seq);
    this.place(seq, this.classFor(needed, seq.capacity));
    const to = seq.pool!;
    saved.forEach((a, i) => {
      this.memory.copyHeads(a, 0, from.capacity, to.arrays![i]!, seq.row * to.stride, to.capacity, this.heads, this.dim, seq.tokens.length);
      this.memory.free(a);
    });
  }

  /**
   * Decoding rows of a batch grow one position per step, so they cross a class boundary within a
   * few steps of each other. Moving them one by one would split the batch into two runs (each
   * paying the graph's fixed cost) until the last has moved; instead the whole pool moves up to
   * the next class at once, when every row's reservation allows it and no pool of that class
   * runs. A bigger jump (a prompt chunk) moves only its own sequence.
   */
  private growTogether(from: Pool, needed: number): boolean {
    const next = this.capacityFor(from.capacity + 1);
    if (needed > next || this.pools.has(next) || from.rows.some((r) => r.capacity < next)) return false;
    const to = this.newPool(next);
    if (from.rows.length > to.maxRows) return false;
    to.allocatedRows = Math.max(this.minRows, Math.min(to.maxRows, Math.max(4, from.rows.length)));
    const n = to.allocatedRows * to.stride;
    to.arrays = from.arrays!.map((a) => {
      const out = this.spare.take(n);
      for (const row of from.rows) {
        this.memory.copyHeads(a, row.row * from.stride, from.capacity, out, row.row * to.stride, to.capacity, this.heads, this.dim, row.tokens.length, true);
      }
      return out;
    });
    to.rows = from.rows;
    for (const row of to.rows) row.pool = to;
    this.pools.delete(from.capacity);
    this.spare.give(from.arrays!);
    from.arrays = null;
    this.pools.set(next, to);
    return true;
  }

  /** Capacities of the pools in use, smallest first (for tests and diagnostics). */
  poolCapacities(): number[] {
    return [...this.pools.keys()].sort((a, b) => a - b);
  }

  /** Takes the sequence out of its pool, keeping the pool packed (the last row fills the gap). */
  private unplace(seq: FusedSequence): void {
    const pool = seq.pool!;
    const last = pool.rows[pool.rows.length - 1]!;
    if (last !== seq) {
      for (const a of pool.arrays!) {
        this.memory.copyHeads(a, last.row * pool.stride, pool.capacity, a, seq.row * pool.stride, pool.capacity, this.heads, this.dim, last.tokens.length, true);
      }
      last.row = seq.row;
      pool.rows[seq.row] = last;
    }
    pool.rows.pop();
    seq.row = -1;
    seq.pool = null;
    if (pool.rows.length === 0) {
      this.pools.delete(pool.capacity);
      this.spare.give(pool.arrays!);
      pool.arrays = null;
    }
  }

  close(s: Sequence): void {
    const seq = s as FusedSequence;
    if (seq.row < 0) return;
    this.unplace(seq);
  }

  /**
   * One run of `tokens` per row over `rows` consecutive pool rows from `firstRow`. `writes` are
   * the rows whose new positions must land in the cache (batch row, the position of its first new
   * token): with step outputs only those are copied in; otherwise ONNX Runtime writes every row
   * in place.
   */
  private async run<T>(
    inputs: StepInputs,
    tokens: number,
    pool: Pool,
    firstRow: number,
    rows: number,
    writes: Write[],
    read: (logits: Logits) => T,
    logitPositions = 1,
    general = false,
  ): Promise<T> {
    const { stepKv } = this.decoder;
    return this.decoder.runPool({
      inputs,
      buffers: pool.arrays!,
      firstRow,
      rows,
      capacity: pool.capacity,
      views: pool.views,
      width: tokens,
      logitPositions,
      general,
      onStep: stepKv
        ? (step) => {
            const block = rows * this.heads * step.tokens * this.dim;
            stepKv.blocks.forEach((b, i) => {
              this.writeStep(step.buffer, b.key * block, step.tokens, pool.arrays![2 * i]!, pool, firstRow, writes);
              this.writeStep(step.buffer, b.value * block, step.tokens, pool.arrays![2 * i + 1]!, pool, firstRow, writes);
            });
          }
        : undefined,
    }, read);
  }

  /**
   * Copies one layer's block [rows, heads, tokens, dim] of the packed step output, from `base` in
   * `src`, into the rows' places in a pool buffer.
   */
  private writeStep(src: KvBuffer, base: number, tokens: number, dst: KvBuffer, pool: Pool, firstRow: number, writes: Write[]): void {
    const { heads, dim } = this;
    const s0 = src.host;
    const d0 = dst.host;
    for (const [row, position, count] of writes) {
      const from = base + row * heads * tokens * dim;
      const to = (firstRow + row) * pool.stride + position * dim;
      if (tokens > 1 || !s0 || !d0) {
        this.memory.copyHeads(src, from, tokens, dst, to, pool.capacity, heads, dim, count ?? tokens);
        continue;
      }
      // One position per head in memory the host addresses: a plain loop, no subarray objects (a
      // decode step has rows × heads × layers × 2 of these).
      for (let h = 0; h < heads; h++) {
        const s = from + h * dim;
        const d = to + h * pool.capacity * dim;
        for (let j = 0; j < dim; j++) d0[d + j] = s0[s + j]!;
      }
    }
  }

  async prefill(s: Sequence, tokens: number[], embeds?: Float32Array): Promise<Float32Array> {
    const seq = s as FusedSequence;
    const past = seq.tokens.length;
    const total = past + tokens.length;
    if (total > seq.capacity) throw new Error(`sequence of capacity ${seq.capacity} cannot take ${total} positions`);
    // One position to spare: a decode step of the pool writes a placeholder past a prefilling row.
    this.ensure(seq, Math.min(total + 1, seq.capacity));
    const pool = seq.pool!;
    if (this.pairRows && tokens.length === 1) {
      // One token of one row: a neighbouring row rides along (see pairRows).
      const firstRow = seq.row + 1 < pool.allocatedRows ? seq.row : seq.row - 1;
      const row = seq.row - firstRow;
      const logits = await this.stepRows(pool, firstRow, 2, new Map([[seq, 0]]), tokens, (l) => lastLogits(l, row), embeds);
      seq.tokens.push(...tokens);
      return logits;
    }
    // Paired, the logits of the last two positions: the output head is a 4-bit product too.
    const logits = await this.run(chunkInputs(tokens, past, embeds), tokens.length, pool, seq.row, 1, [[0, past]], (l) => lastLogits(l, 0), this.pairRows ? 2 : 1);
    seq.tokens.push(...tokens);
    return logits;
  }

  async decode(list: Sequence[], tokens: number[]): Promise<Float32Array[]> {
    const result: Float32Array[] = new Array(list.length);
    for (const s of list) {
      const seq = s as FusedSequence;
      this.ensure(seq, Math.min(seq.tokens.length + 1, seq.capacity));
    }
    for (const [pool, members] of byPool(list)) {
      let rows = 0;
      for (const seq of members.keys()) rows = Math.max(rows, seq.row + 1);
      // A lone row computes its 4-bit products otherwise: the next row rides along (see pairRows).
      await this.stepRows(pool, 0, Math.max(rows, this.minRows), members, tokens, (logits) => {
        for (const [seq, i] of members) result[i] = lastLogits(logits, seq.row);
      });
      for (const [seq, i] of members) seq.tokens.push(tokens[i]!);
    }
    return result;
  }

  /**
   * One run of one token per row over `rows` pool rows from `firstRow`, in which `members` append
   * their token (`tokens[index]`). Rows past the last member are left out by the callers; rows in
   * between that are not decoding (still prefilling, or holding no sequence) ride along with a
   * dummy token past their valid length, which is either not written (step outputs) or
   * overwritten by their next prefill chunk. `embeds`: the members' token embeddings, in order.
   */
  private async stepRows<T>(
    pool: Pool,
    firstRow: number,
    rows: number,
    members: Map<FusedSequence, number>,
    tokens: number[],
    read: (logits: Logits) => T,
    embeds?: Float32Array,
  ): Promise<T> {
    const length = (r: number) => Math.min((pool.rows[firstRow + r]?.tokens.length ?? 0) + 1, pool.capacity);
    const width = this.maskWidth(pool, 1, length, rows);
    const ids = new Array<number>(rows).fill(0);
    const positions = new Array<number>(rows);
    const lengths = new Array<number>(rows);
    // int64 as the graph takes it: filled natively, no conversion per position.
    const mask = this.decoder.takesMask ? new BigInt64Array(rows * width) : undefined;
    const hidden = embeds ? embeds.length / members.size : 0;
    const rowEmbeds = embeds ? new Float32Array(rows * hidden) : undefined;
    const writes: Write[] = [];
    for (let r = 0; r < rows; r++) {
      const seq = pool.rows[firstRow + r];
      const i = seq ? members.get(seq) : undefined;
      const len = length(r);
      if (i !== undefined) {
        ids[r] = tokens[i]!;
        rowEmbeds?.set(embeds!.subarray(i * hidden, (i + 1) * hidden), r * hidden);
        writes.push([r, len - 1]);
      }
      positions[r] = len - 1;
      lengths[r] = len;
      mask?.fill(1n, r * width, r * width + len);
    }
    return this.run({ batch: rows, width: 1, ids, embeds: rowEmbeds, mask, maskWidth: width, lengths, positions }, 1, pool, firstRow, rows, writes, read);
  }

  /**
   * The attention mask's width for a run of `tokens` per row over `rows` rows of `pool`, whose
   * row r needs `length(r)` positions. The split-attention graph reads only each row's count of
   * ones (its seqlens_k), so its mask is as wide as any such run can need: the pool's capacity
   * plus the run's padding past a row's end (a verification run pads a shorter draft to the
   * widest, past the pool if the row is near its end). The run's input shapes then stay the same
   * from one step to the next, and ONNX Runtime reuses the memory plan it made for them; a width
   * that grows by one each step made it plan the run's allocations anew every time (some 55 µs of
   * a 170-µs stories260K step). GroupQueryAttention itself takes the width as the total sequence
   * length, so the other graphs get exactly the widest row.
   */
  private maskWidth(pool: Pool, tokens: number, length: (row: number) => number, rows: number): number {
    if (this.decoder.stepMode === "split") return pool.capacity + tokens - 1;
    let width = 0;
    for (let r = 0; r < rows; r++) width = Math.max(width, length(r));
    return width;
  }

  /**
   * Verification runs need the new positions of the rows checked and of no other: step outputs
   * give exactly those; in place, the runs that check several positions take one row at a time.
   */
  get canVerify(): boolean {
    return this.decoder.stepMode !== null;
  }

  async verify(list: Sequence[], tokens: number[][]): Promise<Float32Array[][]> {
    if (!this.canVerify) throw new Error("verify() needs the decoder's step outputs");
    const width = Math.max(...tokens.map((t) => t.length));
    const result: Float32Array[][] = new Array(list.length);
    list.forEach((s, i) => {
      const seq = s as FusedSequence;
      const need = seq.tokens.length + tokens[i]!.length;
      if (need > seq.capacity) throw new Error(`sequence of capacity ${seq.capacity} cannot take ${need} positions`);
      // Padding past a row's own tokens is never written, but its positions must exist (rotary).
      if (seq.tokens.length + width > this.limit) throw new Error(`a run ${width} wide past ${seq.tokens.length} positions exceeds the context of ${this.limit}`);
      this.ensure(seq, need);
    });
    if (this.decoder.stepMode !== "split") {
      // GroupQueryAttention takes several new tokens after a past for one row at a time.
      for (const [i, s] of list.entries()) {
        const seq = s as FusedSequence;
        const t = tokens[i]!;
        const past = seq.tokens.length;
        result[i] = await this.run(chunkInputs(t, past), t.length, seq.pool!, seq.row, 1, [[0, past]], (l) => t.map((_, j) => positionLogits(l, 0, j, t.length)), t.length, true);
        seq.tokens.push(...t);
      }
      return result;
    }
    for (const [pool, members] of byPool(list)) {
      // As decode(), `width` tokens per row. A member shorter than the widest is padded past its
      // end (causal attention keeps its own positions exact; the padding is not written). Rows
      // riding along are told a past that keeps their positions inside the pool: their output is
      // not read and, with step outputs, nothing of theirs is written.
      let rows = 0;
      for (const seq of members.keys()) rows = Math.max(rows, seq.row + 1);
      // One position of one row: the next rides along (see pairRows).
      if (rows * width < this.minRows) rows = this.minRows;
      const lengths = new Array<number>(rows);
      for (let r = 0; r < rows; r++) {
        const seq = pool.rows[r];
        const len = seq?.tokens.length ?? 0;
        lengths[r] = seq && members.has(seq) ? len + width : Math.max(width, Math.min(len + width, pool.capacity));
      }
      const maskWidth = this.maskWidth(pool, width, (r) => lengths[r]!, rows);
      const ids = new Array<number>(rows * width).fill(0);
      const positions = new Array<number>(rows * width);
      const mask = this.decoder.takesMask ? new BigInt64Array(rows * maskWidth) : undefined;
      const writes: Write[] = [];
      for (let r = 0; r < rows; r++) {
        const seq = pool.rows[r];
        const i = seq ? members.get(seq) : undefined;
        const first = lengths[r]! - width;
        if (i !== undefined) {
          const t = tokens[i]!;
          for (let j = 0; j < width; j++) ids[r * width + j] = t[Math.min(j, t.length - 1)]!;
          writes.push([r, first, t.length]);
        }
        for (let j = 0; j < width; j++) positions[r * width + j] = first + j;
        mask?.fill(1n, r * maskWidth, r * maskWidth + lengths[r]!);
      }
      const read = (logits: Logits) => {
        for (const [seq, i] of members) result[i] = tokens[i]!.map((_, j) => positionLogits(logits, seq.row, j, width));
      };
      await this.run({ batch: rows, width, ids, mask, maskWidth, lengths, positions }, width, pool, 0, rows, writes, read, width, true);
      for (const [seq, i] of members) seq.tokens.push(...tokens[i]!);
    }
    return result;
  }

  truncate(s: Sequence, length: number): void {
    const seq = s as FusedSequence;
    if (length < seq.tokens.length) seq.tokens.length = length;
  }

  snapshot(s: Sequence, length: number): PrefixKv {
    const seq = s as FusedSequence;
    const pool = seq.pool!;
    const arrays = pool.arrays!.map((a) => this.memory.read(a, seq.row * pool.stride, pool.capacity, this.heads, this.dim, length));
    return { tokens: seq.tokens.slice(0, length), arrays, bytes: this.tensorCount * length * this.decoder.positionBytes };
  }

  restore(s: Sequence, prefix: PrefixKv, length: number): void {
    const seq = s as FusedSequence;
    this.ensure(seq, Math.min(length + 1, seq.capacity));
    const pool = seq.pool!;
    const from = prefix.tokens.length;
    pool.arrays!.forEach((a, i) => this.memory.write(prefix.arrays[i]!, from, a, seq.row * pool.stride, pool.capacity, this.heads, this.dim, length));
    seq.tokens = prefix.tokens.slice(0, length);
  }
}

/**
 * Capacity classes in quarter-octave steps from 64 (64, 80, 96, 112, 128, 160, 192, ..., 256, 320,
 * ...): a pool holds at most a quarter more positions than its longest row needs. Attention reads
 * every position of the pool's capacity, and at a batch of many rows that read is most of a step:
 * power-of-two classes left up to half of it masked out.
 */
export function capacityClass(needed: number): number {
  if (needed <= 64) return 64;
  const step = 2 ** (Math.floor(Math.log2(needed - 1)) - 2);
  return Math.ceil(needed / step) * step;
}
