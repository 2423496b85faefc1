// Which thinking block a model writes, read from its chat template and vocabulary when it loads,
// and the thinking budgets that reasoning_effort selects.
//
// Qwen3 writes `<think>…</think>` itself (its template can switch it off with enable_thinking);
// the DeepSeek-R1 distills' template opens `<think>\n` in the generation prompt, so the output
// starts inside the block. Both show the closing tag in the template (it is where earlier turns'
// thinking is cut off) and have both tags as tokens of their own.

/** The tags around a thinking block, as text. */
export interface ReasoningTags {
  start: string;
  end: string;
}

/** Thinking budgets in tokens for reasoning_effort low / medium / high (the thinking block's length). */
export interface ReasoningBudgets {
  low: number;
  medium: number;
  high: number;
}

/**
 * The budgets of Gemini's OpenAI-compatible reasoning_effort (1,024 / 8,192 / 24,576 tokens): the
 * one published mapping from these words to thinking tokens. A model's sluice.json may set others.
 */
export const DEFAULT_BUDGETS: ReasoningBudgets = { low: 1024, medium: 8192, high: 24576 };

/** Pairs Sluice recognises without configuration, most common first. */
export const KNOWN_TAGS: readonly ReasoningTags[] = [
  { start: "<think>", end: "</think>" },
  { start: "<seed:think>", end: "</seed:think>" },
  { start: "[THINK]", end: "[/THINK]" },
];

/** sluice.json `reasoning`: false switches detection off; tags and budgets override it. */
export type ReasoningCard =
  | false
  | {
      start?: string;
      end?: string;
      budgets?: Partial<ReasoningBudgets>;
    };

export interface ReasoningFormat {
  tags: ReasoningTags;
  budgets: ReasoningBudgets;
}

export class ReasoningCardError extends Error {
  constructor(message: string) {
    super(`sluice.json "reasoning": ${message}`);
    this.name = "ReasoningCardError";
  }
}

function cardBudgets(card: Exclude<ReasoningCard, false> | undefined): ReasoningBudgets {
  const b = { ...DEFAULT_BUDGETS, ...card?.budgets };
  for (const [k, v] of Object.entries(b)) {
    if (!Number.isInteger(v) || v < 1) throw new ReasoningCardError(`budgets.${k} must be a whole number of tokens ≥ 1`);
  }
  return b;
}

/**
 * The model's thinking block, or null. `templates` are its chat template sources; `tokens` the
 * contents of its added (single) tokens. A pair is recognised when the closing tag appears in a
 * template or both tags are tokens of their own; the card may name a pair or switch it off.
 */
export function detectReasoningFormat(
  templates: readonly string[],
  tokens: ReadonlySet<string>,
  card: ReasoningCard | undefined | null,
): ReasoningFormat | null {
  if (card === false) return null;
  if (card !== undefined && card !== null && (typeof card !== "object" || Array.isArray(card))) {
    throw new ReasoningCardError("must be false or an object with start, end and budgets");
  }
  const budgets = cardBudgets(card ?? undefined);
  if (card?.start !== undefined || card?.end !== undefined) {
    if (typeof card.start !== "string" || typeof card.end !== "string" || !card.start.trim() || !card.end.trim()) {
      throw new ReasoningCardError("start and end must both be non-empty strings");
    }
    return { tags: { start: card.start, end: card.end }, budgets };
  }
  const source = templates.join("\n");
  const tags = KNOWN_TAGS.find((t) => source.includes(t.end) || (tokens.has(t.start) && tokens.has(t.end)));
  return tags ? { tags, budgets } : null;
}

/** Whether the rendered prompt leaves the output inside an open block (the template opened it). */
export function promptOpensBlock(prompt: string, tags: ReasoningTags): boolean {
  return prompt.trimEnd().endsWith(tags.start);
}
