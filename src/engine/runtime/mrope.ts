// Positions for decoders with multimodal rotary embeddings (Qwen2-VL): position_ids has three
// rows (temporal, height, width). Text tokens carry the same position on all three; an image's
// tokens carry their (t, h, w) place in the image, and the text after an image continues from
// the largest position so far + 1. A prompt's positions are computed once (src/engine/vision);
// past the prompt, token i sits at i + delta on every row.

/** 3-D positions of a prompt and the offset of every later token. */
export interface RopePlan {
  /** [3, length] row-major: the prompt's temporal, height and width positions. */
  positions: Int32Array;
  length: number;
  /** max(prompt positions) + 1 - length: token i >= length sits at i + delta. */
  delta: number;
}

/** Positions [3, count] of tokens start..start+count of a sequence, row-major. */
export function planPositions(plan: RopePlan | undefined, start: number, count: number): number[] {
  const out = new Array<number>(3 * count);
  for (let r = 0; r < 3; r++) {
    for (let i = 0; i < count; i++) {
      const at = start + i;
      out[r * count + i] = plan && at < plan.length ? plan.positions[r * plan.length + at]! : at + (plan?.delta ?? 0);
    }
  }
  return out;
}
