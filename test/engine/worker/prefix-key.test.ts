// The prefix cache's key of a prompt: token ids, except at image positions, which stand for their
// feature row (and 3-D position): equal content, equal key; other content, another key.
import { describe, expect, test } from "bun:test";
import { prefixKey } from "../../../src/engine/worker/prefix-key.ts";
import type { PromptImages } from "../../../src/engine/vision/vision-model.ts";

const IMG = 99;

/** A prompt [1, 2, IMG × rows.length, 3] whose image positions take `rows` (hidden 2). */
function prompt(rows: number[][], rope?: number[][]): { ids: number[]; images: PromptImages } {
  const ids = [1, 2, ...rows.map(() => IMG), 3];
  const rowAt = Int32Array.from(ids, (id, i) => (id === IMG ? i - 2 : -1));
  const positions = rope ? Int32Array.from([0, 1, 2, 3].flatMap((r) => ids.map((_, i) => rope[i]?.[r] ?? i))) : null;
  return {
    ids,
    images: {
      rowAt,
      features: Float32Array.from(rows.flat()),
      hidden: 2,
      tokenCount: rows.length,
      rope: positions ? { positions: positions.subarray(0, 3 * ids.length), length: ids.length, delta: 0 } : null,
    },
  };
}

describe("prefix keys", () => {
  test("a text prompt is its own key", () => {
    const ids = [5, 6, 7];
    expect(prefixKey(ids, null)).toBe(ids);
  });

  test("image positions: equal rows equal keys, other rows other keys, text positions unchanged", () => {
    const a = prompt([[0.5, 1], [2, 3]]);
    const a2 = prompt([[0.5, 1], [2, 3]]);
    const b = prompt([[0.5, 1], [2, 3.5]]);
    const ka = prefixKey(a.ids, a.images);
    expect(prefixKey(a2.ids, a2.images)).toEqual(ka);
    const kb = prefixKey(b.ids, b.images);
    expect(kb.slice(0, 3)).toEqual(ka.slice(0, 3));
    expect(kb[3]).not.toBe(ka[3]);
    expect([ka[0], ka[1], ka[4]]).toEqual([1, 2, 3]);
    expect(ka[2]! < 0 && ka[3]! < 0).toBe(true);
  });

  test("with 3-D positions, the same row at another position is another key", () => {
    const rows = [[1, 1], [1, 1]];
    const here = prompt(rows, [[], [], [2, 2, 2], [2, 2, 3]]);
    const there = prompt(rows, [[], [], [2, 2, 2], [2, 3, 2]]);
    const k1 = prefixKey(here.ids, here.images);
    const k2 = prefixKey(there.ids, there.images);
    expect(k2[2]).toBe(k1[2]);
    expect(k2[3]).not.toBe(k1[3]);
  });

  test("a row forgotten by the bounded table comes back under a new id, never an old one", () => {
    const first = prompt([[7, 7]]);
    const before = prefixKey(first.ids, first.images)[2]!;
    // More distinct rows than the table keeps.
    for (let i = 0; i < (1 << 16) + 1; i++) {
      const p = prompt([[i, -1]]);
      prefixKey(p.ids, p.images);
    }
    const after = prefixKey(first.ids, first.images)[2]!;
    expect(after).not.toBe(before);
    expect(after).toBeLessThan(before);
  });
});
