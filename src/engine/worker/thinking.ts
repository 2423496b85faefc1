// One choice's thinking: the token splitter (src/structured/reasoning) plus the text side. Each
// side has its own streaming detokeniser, so tags never reach either text, and whitespace at the
// seams is trimmed as Qwen3's template trims it when the turn is sent back: the thinking without
// leading and trailing newlines, the answer without the blank lines after `</think>`.
import { ThinkBlockSplitter, type ThinkStep } from "../../structured/reasoning/index.ts";
import type { Detokenizer } from "../text/detokenizer.ts";
import type { TextTokenizer } from "../text/tokenizer.ts";
import type { ModelReasoning } from "./reasoning.ts";

/** Per request: where the prompt leaves the output, and the budget reasoning_effort set. */
export interface ThinkingPlan {
  startsInside: boolean;
  budget: number;
}

/**
 * What a choice asks of a model's thinking, whichever way the model writes it: a block between
 * tags (ThinkingStage) or harmony's channels (HarmonyStage).
 */
export interface ReasoningStage {
  readonly reasoningTokens: number;
  /** Not in the answer: the grammar does not read the next token. */
  readonly thinking: boolean;
  /** The token to feed instead of sampling, or null. */
  forced(): number | null;
  /** Whether `token`, about to be pushed, is part of the answer (what a grammar reads). */
  isAnswer(token: number): boolean;
  /** Adjusts (or makes) the next token's mask; null where nothing is banned. */
  mask(grammarMask: Uint32Array | null): Uint32Array | null;
  push(token: number): SplitText;
  finish(): SplitText;
}

export interface SplitText {
  reasoning: string;
  content: string;
  /** The answer's text of this token was whitespace after a block, trimmed away. */
  trimmed: boolean;
}

/** Drops leading whitespace; with `holdTrailing`, keeps trailing whitespace until text follows. */
class Trimmed {
  private held = "";
  /** Trimmed text has been dropped by the last push. */
  dropped = false;
  constructor(
    private readonly holdTrailing: boolean,
    private started = false,
  ) {}

  push(text: string): string {
    let t = text;
    this.dropped = false;
    if (!this.started) {
      t = t.trimStart();
      this.dropped = t === "" && text !== "";
      if (t === "") return "";
      this.started = true;
    }
    if (!this.holdTrailing) return t;
    const body = t.trimEnd();
    if (body === "") {
      this.held += t;
      return "";
    }
    const out = this.held + body;
    this.held = t.slice(body.length);
    return out;
  }

  /** A new segment: leading whitespace goes again, and what was held is dropped. */
  restart(): void {
    this.started = false;
    this.held = "";
  }
}

export class ThinkingStage implements ReasoningStage {
  private readonly splitter: ThinkBlockSplitter;
  private reasoningText: Detokenizer;
  private contentText: Detokenizer;
  private readonly reasoningTrim = new Trimmed(true);
  // The answer's leading whitespace goes only after a block (Qwen3 writes "</think>\n\n").
  private readonly contentTrim = new Trimmed(false, true);
  /** Some thinking was emitted (a later block is set apart from it), and some in this block. */
  private anyReasoning = false;
  private blockStarted = false;
  /** The EOS ids, and the mask that bans them while a block must still close. */
  private banEos: Uint32Array | null = null;
  private banOpen: Uint32Array | null = null;

  constructor(
    private readonly tokenizer: TextTokenizer,
    private readonly model: ModelReasoning,
    plan: ThinkingPlan,
    /** A grammar constrains the answer: the block may only open first, and must close. */
    private readonly constrained: boolean,
  ) {
    const { start } = model.tokens;
    this.splitter = new ThinkBlockSplitter(model.tokens, {
      startsInside: plan.startsInside,
      budget: plan.budget,
      answerTags: !constrained,
      // Under a grammar the opening tag is allowed beside the grammar's tokens, so it must be one token.
      opens: !constrained || start.length === 1,
    });
    this.reasoningText = tokenizer.createDetokenizer();
    this.contentText = tokenizer.createDetokenizer();
  }

  get reasoningTokens(): number {
    return this.splitter.reasoningTokens;
  }

  /** Inside a block: the answer's grammar does not apply to the next token. */
  get thinking(): boolean {
    return this.splitter.thinking;
  }

  /** The token to feed instead of sampling (the closing tag, at the budget), or null. */
  forced(): number | null {
    return this.splitter.forced();
  }

  /** Whether `token`, about to be pushed, is part of the answer (what a grammar reads). */
  isAnswer(token: number): boolean {
    return !this.splitter.thinking && token !== this.splitter.openingToken();
  }

  /**
   * Adjusts the next token's mask. With the grammar's mask (the answer is constrained): adds the
   * opening tag where a block may still open, and removes the tags elsewhere so the answer never
   * holds them. Without one: returns a mask only where something must be banned (end of turn
   * inside a block that must close before a constrained answer; an opening tag the budget has no
   * room for), else null.
   */
  mask(grammarMask: Uint32Array | null): Uint32Array | null {
    const { start, end } = this.model.tokens;
    if (grammarMask) {
      const open = this.splitter.openingToken();
      if (start.length === 1) setBit(grammarMask, start[0]!, open !== null);
      if (end.length === 1) setBit(grammarMask, end[0]!, false);
      return grammarMask;
    }
    if (this.splitter.thinking) {
      if (!this.constrained) return null;
      return (this.banEos ??= banning(this.tokenizer.vocabSize, this.tokenizer.eosTokenIds));
    }
    if (start.length === 1 && !this.splitter.mayOpen()) return (this.banOpen ??= banning(this.tokenizer.vocabSize, [start[0]!]));
    return null;
  }

  push(token: number): SplitText {
    return this.route(this.splitter.push(token), false);
  }

  finish(): SplitText {
    return this.route(this.splitter.finish(), true);
  }

  private route(steps: ThinkStep[], ending: boolean): SplitText {
    let reasoning = "";
    let content = "";
    let trimmed = false;
    const addReasoning = (text: string) => {
      const t = this.reasoningTrim.push(text);
      if (t === "") return;
      // A later block is set apart from the earlier ones by a blank line.
      if (!this.blockStarted && this.anyReasoning) reasoning += "\n\n";
      this.blockStarted = this.anyReasoning = true;
      reasoning += t;
    };
    for (const s of steps) {
      if (s.kind === "reasoning") addReasoning(this.reasoningText.push(s.token));
      else if (s.kind === "content") {
        content += this.contentTrim.push(this.contentText.push(s.token));
        trimmed = this.contentTrim.dropped;
      }
      else if (s.kind === "open") {
        content += this.contentTrim.push(this.contentText.finish());
        this.contentText = this.tokenizer.createDetokenizer();
        this.blockStarted = false;
        this.reasoningTrim.restart();
      } else {
        addReasoning(this.reasoningText.finish());
        this.reasoningText = this.tokenizer.createDetokenizer();
        this.reasoningTrim.restart();
        this.contentTrim.restart();
      }
    }
    if (ending) {
      addReasoning(this.reasoningText.finish());
      content += this.contentTrim.push(this.contentText.finish());
    }
    return { reasoning, content, trimmed };
  }
}

export function setBit(mask: Uint32Array, id: number, on: boolean) {
  const w = id >>> 5;
  if (w >= mask.length) return;
  if (on) mask[w]! |= 1 << (id & 31);
  else mask[w]! &= ~(1 << (id & 31));
}

/** A mask allowing every token of the vocabulary but `ids`. */
export function banning(vocabSize: number, ids: readonly number[]): Uint32Array {
  const mask = new Uint32Array((vocabSize + 31) >>> 5).fill(0xffffffff);
  for (const id of ids) setBit(mask, id, false);
  return mask;
}
