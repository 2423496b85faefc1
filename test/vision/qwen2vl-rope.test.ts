// The 3-D positions of a Qwen2-VL prompt equal transformers.js's get_rope_index (positions and
// rope delta), for prompts with one and two images of different grids and with text between.
import { describe, expect, test } from "bun:test";
import { Qwen2VLForConditionalGeneration } from "@huggingface/transformers";
import { ropeIndex } from "../../src/engine/vision/rope-index.ts";
import { planPositions } from "../../src/engine/runtime/mrope.ts";

const IMG = 151655;
const START = 151652;
const END = 151653;

interface TjsTensor {
  data: BigInt64Array;
  dims: number[];
}

function reference(ids: number[], grids: [number, number, number][]): { positions: number[]; delta: number } {
  const config = { image_token_id: IMG, video_token_id: 151656, vision_start_token_id: START, vision_config: { spatial_merge_size: 2 } };
  const self = Object.create(Qwen2VLForConditionalGeneration.prototype) as { config: unknown; get_rope_index: (...a: unknown[]) => [TjsTensor, TjsTensor] };
  self.config = config;
  const tensor = (data: number[], dims: number[]) => ({ data: BigInt64Array.from(data.map(BigInt)), dims, tolist: () => reshape(data, dims) });
  const [pos, delta] = self.get_rope_index(tensor(ids, [1, ids.length]), tensor(grids.flat(), [grids.length, 3]), null, tensor(ids.map(() => 1), [1, ids.length]));
  return { positions: Array.from(pos.data as unknown as ArrayLike<number | bigint>, Number), delta: Number((delta.data as unknown as ArrayLike<number | bigint>)[0]) };
}

function reshape(data: number[], dims: number[]): unknown {
  if (dims.length === 1) return data.map(BigInt);
  const step = data.length / dims[0]!;
  return Array.from({ length: dims[0]! }, (_, i) => reshape(data.slice(i * step, (i + 1) * step), dims.slice(1)));
}

/** Text, then for each grid <|vision_start|>, its merged tokens, <|vision_end|>, then more text. */
function prompt(grids: [number, number, number][]): number[] {
  const ids = [10, 11, 12];
  for (const [t, h, w] of grids) ids.push(START, ...new Array<number>((t * h * w) / 4).fill(IMG), END, 20, 21);
  ids.push(30);
  return ids;
}

describe("Qwen2-VL rope index", () => {
  const cases: [string, [number, number, number][]][] = [
    ["one wide image", [[1, 4, 6]]],
    ["two images of different grids", [[1, 6, 2], [1, 4, 4]]],
    ["a tall image", [[1, 10, 4]]],
  ];
  for (const [name, grids] of cases) {
    test(`${name}: positions and delta as transformers.js`, () => {
      const ids = prompt(grids);
      const ref = reference(ids, grids);
      const ours = ropeIndex(ids, grids.map((grid) => ({ grid })), IMG, 2)!;
      expect(ours).not.toBeNull();
      expect(Array.from(ours.positions)).toEqual(ref.positions);
      expect(ours.delta).toBe(ref.delta);
      expect(ours.delta).toBeLessThan(0);
    });
  }

  test("past the prompt every row is index + delta", () => {
    const ids = prompt([[1, 4, 6]]);
    const plan = ropeIndex(ids, [{ grid: [1, 4, 6] }], IMG, 2)!;
    const n = ids.length;
    expect(planPositions(plan, n, 2)).toEqual([n + plan.delta, n + 1 + plan.delta, n + plan.delta, n + 1 + plan.delta, n + plan.delta, n + 1 + plan.delta]);
    // Inside the prompt, a chunk's positions are the plan's.
    expect(planPositions(plan, 3, 2)).toEqual([3, 4, 3, 4, 3, 4]);
  });

  test("image tokens that disagree with the grids give null", () => {
    const ids = prompt([[1, 4, 6]]);
    expect(ropeIndex(ids, [{ grid: [1, 4, 4] }], IMG, 2)).toBeNull();
    expect(ropeIndex(ids, [], IMG, 2)).toBeNull();
    expect(ropeIndex(ids, [{ grid: [1, 4, 6] }, { grid: [1, 2, 2] }], IMG, 2)).toBeNull();
  });
});
