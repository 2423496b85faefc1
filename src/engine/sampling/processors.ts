// Logits processors in the style of transformers.js's LogitsProcessorList, but sparse: each one
// edits a few entries of the full logits row in place and records the old values, so the row is
// restored after sampling without copying 150k floats per token.

import type { SamplingParams } from "../types.ts";

/** How often each token id occurs in the generated text so far. */
export type TokenCounts = ReadonlyMap<number, number>;

/** Sparse in-place edits of a logits row that can be undone. */
export class LogitsEdits {
  private ids: number[] = [];
  private old: number[] = [];

  constructor(readonly logits: Float32Array) {}

  set(id: number, value: number): void {
    this.ids.push(id);
    this.old.push(this.logits[id]!);
    this.logits[id] = value;
  }

  undo(): void {
    for (let i = this.ids.length - 1; i >= 0; i--) this.logits[this.ids[i]!] = this.old[i]!;
    this.ids.length = 0;
    this.old.length = 0;
  }
}

export interface LogitsProcessor {
  apply(edits: LogitsEdits, counts: TokenCounts | null): void;
}

/** OpenAI logit_bias: added to the logit; -100 bans the token outright. */
export class LogitBiasProcessor implements LogitsProcessor {
  private readonly ids: Int32Array;
  private readonly biases: Float64Array;

  constructor(bias: Readonly<Record<number, number>>, vocabSize: number) {
    const entries = Object.entries(bias)
      .map(([k, v]) => [Number(k), v] as const)
      .filter(([id, v]) => Number.isInteger(id) && id >= 0 && id < vocabSize && Number.isFinite(v) && v !== 0);
    this.ids = Int32Array.from(entries, ([id]) => id);
    this.biases = Float64Array.from(entries, ([, v]) => v);
  }

  get empty(): boolean {
    return this.ids.length === 0;
  }

  apply(edits: LogitsEdits): void {
    const logits = edits.logits;
    for (let i = 0; i < this.ids.length; i++) {
      const id = this.ids[i]!;
      const b = this.biases[i]!;
      edits.set(id, b <= -100 ? -Infinity : logits[id]! + b);
    }
  }
}

/** OpenAI presence/frequency penalties: logit -= presence·[count>0] + frequency·count. */
export class PenaltyProcessor implements LogitsProcessor {
  constructor(
    private readonly presence: number,
    private readonly frequency: number,
  ) {}

  apply(edits: LogitsEdits, counts: TokenCounts | null): void {
    if (!counts) return;
    const logits = edits.logits;
    for (const [id, count] of counts) {
      if (count <= 0 || id < 0 || id >= logits.length) continue;
      edits.set(id, logits[id]! - this.presence - this.frequency * count);
    }
  }
}

export function buildProcessors(params: SamplingParams, vocabSize: number): LogitsProcessor[] {
  const list: LogitsProcessor[] = [];
  const bias = new LogitBiasProcessor(params.logitBias ?? {}, vocabSize);
  if (!bias.empty) list.push(bias);
  if (params.presencePenalty !== 0 || params.frequencyPenalty !== 0) {
    list.push(new PenaltyProcessor(params.presencePenalty, params.frequencyPenalty));
  }
  return list;
}
