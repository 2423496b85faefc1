// int64 feeds are written as two 32-bit halves, from whichever kind of array holds the values.
import { describe, expect, test } from "bun:test";
import { int64Tensor } from "../../../src/engine/runtime/tensors.ts";

const values = (t: ReturnType<typeof int64Tensor>) => Array.from(t.data as BigInt64Array, Number);

describe("int64Tensor", () => {
  test("arrays (negative values too), byte masks and other typed arrays give the same int64 values", () => {
    expect(values(int64Tensor([0, 1, -1, 2 ** 31 - 1, -(2 ** 31), 151_935], [6]))).toEqual([0, 1, -1, 2 ** 31 - 1, -(2 ** 31), 151_935]);
    expect(values(int64Tensor(Uint8Array.from([1, 0, 1, 1, 255]), [5]))).toEqual([1, 0, 1, 1, 255]);
    expect(values(int64Tensor(Int32Array.from([-5, 7, 0]), [3]))).toEqual([-5, 7, 0]);
    const t = int64Tensor([3, 4, 5, 6], [2, 2]);
    expect(t.type).toBe("int64");
    expect(t.dims).toEqual([2, 2]);
  });

  test("calls alternating between masks and ids keep their values apart", () => {
    for (let i = 0; i < 2000; i++) {
      expect(values(int64Tensor(new Uint8Array(3).fill(1), [3]))).toEqual([1, 1, 1]);
      expect(values(int64Tensor([i, -i], [2]))).toEqual([i, i === 0 ? 0 : -i]);
    }
  });
});
