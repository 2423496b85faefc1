// Splits a generation into thinking and answer by token ids, as it is generated. Tags are matched
// as the token sequences the tokenizer makes of them (a single token each in Qwen3 and the R1
// distills); a token that might begin a tag is held until the tag completes or cannot.
//
// Every token of a block counts as a reasoning token: its opening tag (when generated), its
// thinking and its closing tag. The budget bounds that count: when only the closing tag still
// fits, `forced()` names the tag's tokens one by one and the engine feeds them instead of sampling,
// so the block closes and the answer follows. A block may open only while the budget has room for
// both tags; a block the template opened may go over by its closing tag when the budget is tiny.

export interface ThinkTokens {
  start: readonly number[];
  end: readonly number[];
}

export type ThinkStep =
  | { kind: "reasoning" | "content"; token: number }
  /** A tag was recognised (its tokens are neither reasoning text nor content). */
  | { kind: "open" | "close" };

export interface ThinkOptions {
  /** The prompt ends inside a block the template opened. */
  startsInside: boolean;
  /** Most reasoning tokens (Infinity for none). */
  budget: number;
  /**
   * Recognise tags anywhere in the answer (later blocks open, stray closing tags are dropped). Off
   * when a grammar constrains the answer: a block may then only open as the first tokens.
   */
  answerTags: boolean;
  /** Whether the model may open a block itself (default true). */
  opens?: boolean;
}

export class ThinkBlockSplitter {
  private inside: boolean;
  /** Tokens that so far match the start of the tag being watched. */
  private held: number[] = [];
  /** The answer has begun under a grammar: no tags are recognised any more. */
  private frozen = false;
  reasoningTokens = 0;

  constructor(
    private readonly tags: ThinkTokens,
    private readonly opts: ThinkOptions,
  ) {
    if (tags.start.length === 0 || tags.end.length === 0) throw new Error("thinking tags must have tokens");
    this.inside = opts.startsInside;
  }

  /** Inside a thinking block (no answer constraints apply). */
  get thinking(): boolean {
    return this.inside;
  }

  /** The next token of the closing tag when the budget leaves room for nothing else, or null. */
  forced(): number | null {
    if (!this.inside) return null;
    const rest = this.tags.end.length - this.held.length;
    return this.reasoningTokens + rest >= this.opts.budget ? this.tags.end[this.held.length]! : null;
  }

  /** Whether a block may open at the next token (the budget has room for both tags). */
  mayOpen(): boolean {
    return !this.inside && !this.frozen && this.opts.opens !== false && this.reasoningTokens + this.tags.start.length + this.tags.end.length <= this.opts.budget;
  }

  /** The first token of the opening tag while a block may open there, else null (to allow or ban it). */
  openingToken(): number | null {
    return this.mayOpen() && this.held.length === 0 ? this.tags.start[0]! : null;
  }

  push(token: number): ThinkStep[] {
    const out: ThinkStep[] = [];
    if (this.inside) this.reasoningTokens++;
    this.held.push(token);
    this.match(out);
    return out;
  }

  /** The end of the generation: held tokens are text after all. */
  finish(): ThinkStep[] {
    const out: ThinkStep[] = [];
    for (const t of this.held) out.push({ kind: this.inside ? "reasoning" : "content", token: t });
    this.held = [];
    return out;
  }

  private watching(): readonly (readonly number[])[] {
    if (this.inside) return [this.tags.end];
    if (this.frozen) return [];
    const tags: (readonly number[])[] = [];
    if (this.mayOpen()) tags.push(this.tags.start);
    if (this.opts.answerTags) tags.push(this.tags.end);
    return tags;
  }

  /** Resolves `held`: a whole tag switches state, a proper prefix waits, anything else is text. */
  private match(out: ThinkStep[]) {
    while (this.held.length > 0) {
      const tags = this.watching();
      const whole = tags.find((t) => t.length === this.held.length && t.every((id, i) => id === this.held[i]));
      if (whole) {
        const opening = whole === this.tags.start && !this.inside;
        if (opening) this.reasoningTokens += this.held.length;
        this.held = [];
        // A closing tag outside a block is dropped: tags never reach the content.
        if (opening) {
          this.inside = true;
          out.push({ kind: "open" });
        } else if (this.inside) {
          this.inside = false;
          this.settle();
          out.push({ kind: "close" });
        }
        return;
      }
      if (tags.some((t) => t.length > this.held.length && this.held.every((id, i) => id === t[i]))) return;
      // Not a tag: the first held token is text; the rest may still begin one.
      const t = this.held.shift()!;
      out.push({ kind: this.inside ? "reasoning" : "content", token: t });
      if (!this.inside) this.settle();
    }
  }

  /** Under a grammar the answer's first token ends tag recognition for good. */
  private settle() {
    if (!this.opts.answerTags) this.frozen = true;
  }
}
