// Prompt lookup: the draft for a sequence is what followed the most recent earlier occurrence of
// its longest matching ending, looked up in the prompt and the text generated so far. No draft
// model: a copy-heavy answer (an edited passage, code repeated with changes, a quoted document)
// repeats long runs of its context, and the model's own repetitive stretches repeat themselves.
// Where the owner's earlier sequences know a longer ending than the request's own text does, their
// continuation is the draft instead (history.ts).
import { MAX_CONTEXT, type NgramHistory, type Salt } from "./history.ts";

/** Positions of each token of an append-only sequence, in order. */
class TokenPositions {
  private readonly at = new Map<number, number[]>();

  add(token: number, position: number): void {
    const list = this.at.get(token);
    if (list) list.push(position);
    else this.at.set(token, [position]);
  }

  get(token: number): number[] | undefined {
    return this.at.get(token);
  }
}

/** The ending matched against earlier text: at most this many tokens. */
export const MAX_MATCH = 8;
/** Earlier occurrences of the last token tried per lookup, most recent first. */
const CANDIDATES = 48;

const promptIndexes = new WeakMap<readonly number[], TokenPositions>();

/** The prompt's index, shared by the choices of one request (they share its prompt array). */
function promptIndex(prompt: readonly number[]): TokenPositions {
  let index = promptIndexes.get(prompt);
  if (!index) {
    index = new TokenPositions();
    for (let i = 0; i < prompt.length; i++) index.add(prompt[i]!, i);
    promptIndexes.set(prompt, index);
  }
  return index;
}

export interface Draft {
  tokens: number[];
  /** Length of the matched ending the draft continues (1..MAX_MATCH); 0 without a draft. */
  match: number;
}

const NO_DRAFT: Draft = { tokens: [], match: 0 };

/** The earlier text of the request's owner, looked up with the owner's salt. */
export interface OwnerHistory {
  table: NgramHistory;
  salt: Salt;
}

/** One choice's text (prompt, then every token sampled for it) and its drafts. */
export class NgramDrafter {
  private readonly generated: number[] = [];
  private readonly index = new TokenPositions();
  private readonly prompt: readonly number[];
  private readonly promptIndex: TokenPositions;

  /** `prompt` is kept, not copied (its index is shared with the request's other choices). */
  constructor(
    prompt: readonly number[],
    generated: Iterable<number> = [],
    private readonly history: OwnerHistory | null = null,
  ) {
    this.prompt = prompt;
    this.promptIndex = promptIndex(prompt);
    for (const t of generated) this.push(t);
  }

  get length(): number {
    return this.prompt.length + this.generated.length;
  }

  /** Appends a sampled token. */
  push(token: number): void {
    this.index.add(token, this.prompt.length + this.generated.length);
    this.generated.push(token);
  }

  private at(i: number): number {
    const p = this.prompt.length;
    return i < p ? this.prompt[i]! : this.generated[i - p]!;
  }

  /**
   * Up to `max` tokens that continue the text as it continued after the longest earlier match of
   * its ending (the most recent among equals), or as the owner's history goes on after a longer
   * one. A continuation that runs into the ending itself goes on through the draft, as a
   * repeating pattern does.
   */
  propose(max: number): Draft {
    const own = this.lookup(max);
    const history = this.history;
    if (!history || max <= 0 || own.match >= MAX_CONTEXT) return own;
    const earlier = history.table.propose(history.salt, (i) => this.at(i), this.length, max, own.match + 1);
    return earlier.tokens.length > 0 ? { tokens: earlier.tokens, match: earlier.context } : own;
  }

  /** The draft from the request's own text. */
  private lookup(max: number): Draft {
    const n = this.length;
    if (max <= 0 || n < 2) return NO_DRAFT;
    const last = this.at(n - 1);
    let best = -1;
    let bestLength = 0;
    let tried = 0;
    // Generated text first (more recent), then the prompt; both from their ends.
    for (const list of [this.index.get(last), this.promptIndex.get(last)]) {
      if (!list) continue;
      for (let c = list.length - 1; c >= 0 && tried < CANDIDATES && bestLength < MAX_MATCH; c--) {
        const p = list[c]!;
        if (p >= n - 1) continue;
        tried++;
        let length = 1;
        while (length < MAX_MATCH && p - length >= 0 && this.at(p - length) === this.at(n - 1 - length)) length++;
        if (length > bestLength) {
          bestLength = length;
          best = p;
        }
      }
    }
    if (best < 0) return NO_DRAFT;
    const tokens: number[] = [];
    for (let j = 0; j < max; j++) {
      const i = best + 1 + j;
      tokens.push(i < n ? this.at(i) : tokens[i - n]!);
    }
    return { tokens, match: bestLength };
  }
}
