// The KV pools of shared-buffer graphs: capacity classes a quarter-octave apart, and a batch whose
// rows cross a class boundary together moving up as one pool (one run per step) with every row's
// logits unchanged against the same sequence decoded alone.
import { afterAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { capacityClass, FusedKvBackend, SpareBuffers } from "../../../src/engine/batching/fused-kv.ts";
import { HostKvMemory, type KvBuffer } from "../../../src/engine/runtime/kv-memory.ts";
import { openDecoder } from "../../../src/engine/decoders.ts";
import type { Decoder } from "../../../src/engine/runtime/decoder.ts";
import { NodeDecoder } from "../../../src/engine/runtime/node-decoder.ts";
import { buildSyntheticModel } from "../../../src/modelkit/index.ts";
import { tempDir } from "../../helpers/paths.ts";

const root = tempDir("sluice-pools-");
const BINDINGS = ["node", "capi"] as const;
afterAll(() => root.remove());

const argmax = (l: Float32Array) => l.reduce((best, v, i) => (v > l[best]! ? i : best), 0);

/** Each step's logits of one sequence decoded greedily alone on a fresh backend, after its prompt. */
async function decodeAlone(decoder: Decoder, prompt: number[], steps: number): Promise<Float32Array[]> {
  const b = new FusedKvBackend(decoder, 1 << 26);
  const seq = b.open(256);
  let logits = await b.prefill(seq, prompt);
  const out: Float32Array[] = [];
  for (let s = 0; s < steps; s++) {
    [logits] = (await b.decode([seq], [argmax(logits)])) as [Float32Array];
    out.push(logits);
  }
  return out;
}

describe("capacity classes", () => {
  test("hold what is needed with at most a quarter to spare above 64, and never shrink", () => {
    let previous = 0;
    for (let needed = 1; needed <= 5000; needed++) {
      const c = capacityClass(needed);
      expect(c).toBeGreaterThanOrEqual(needed);
      expect(c).toBeGreaterThanOrEqual(previous);
      if (needed > 64) expect(c).toBeLessThanOrEqual(Math.ceil(needed * 1.25));
      previous = c;
    }
    expect([64, 65, 129, 257, 2049].map(capacityClass)).toEqual([64, 80, 160, 320, 2560]);
  });
});

describe("spare pool buffers", () => {
  test("a buffer given back serves the next large-enough request, as it was (pools clear the rows they use); the bound is kept", () => {
    const memory = new HostKvMemory(false, false);
    const spare = new SpareBuffers(memory, 4096);
    const a = spare.take(1000);
    expect(a.host!.every((v) => v === 0)).toBe(true);
    a.host!.fill(7);
    spare.give([a]);
    const b = spare.take(600);
    expect(b.whole).toBe(a);
    expect(b.length).toBe(600);
    expect(b.host!.every((v) => v === 7)).toBe(true);
    // Given back as a view, kept whole: a request up to the whole length reuses it.
    spare.give([b]);
    expect(spare.take(1000).whole).toBe(a);
    // A larger size gets a new buffer.
    spare.give([a]);
    const c = spare.take(1001);
    expect(c.whole).toBe(null);
    expect(c).not.toBe(a);
    // Beyond the bound, buffers are not kept.
    const big = memory.alloc(5000);
    spare.give([big]);
    expect(spare.take(5000)).not.toBe(big);
  });
});

describe.each(BINDINGS)("a decoding batch crossing a class boundary (%s binding)", (binding) => {
  test("moves up as one pool and decodes as each sequence alone", async () => {
    const info = await buildSyntheticModel(join(root.path, `fused-${binding}`), { preset: "tiny-qwen3", variant: "fused", seed: 5 });
    const decoder = await openDecoder(info.dir, { providers: ["cpu"], threads: 1, binding });
    try {
      const prompts = [60, 62, 63].map((n, r) => Array.from({ length: n }, (_, i) => 10 + ((i * 7 + r * 13) % 200)));
      const steps = 24; // from 61..64 positions to 84..87: across 64 and 80
      const alone = await Promise.all(prompts.map((p) => decodeAlone(decoder, p, steps)));

      const b = new FusedKvBackend(decoder, 1 << 26);
      const seqs = prompts.map(() => b.open(256));
      let logits = await Promise.all(prompts.map((p, r) => b.prefill(seqs[r]!, p)));
      const seen = new Set<number>();
      let runs = 0;
      const run = decoder.runPool.bind(decoder);
      decoder.runPool = (r, read) => {
        runs++;
        return run(r, read);
      };
      try {
        for (let s = 0; s < steps; s++) {
          runs = 0;
          logits = await b.decode(seqs, logits.map(argmax));
          expect(runs).toBe(1);
          expect(b.poolCapacities()).toHaveLength(1);
          seen.add(b.poolCapacities()[0]!);
          logits.forEach((l, r) => {
            const want = alone[r]![s]!;
            let diff = 0;
            for (let i = 0; i < l.length; i++) diff = Math.max(diff, Math.abs(l[i]! - want[i]!));
            expect(diff).toBeLessThan(1e-4);
          });
        }
      } finally {
        decoder.runPool = run;
      }
      // It went through the classes 64 → 80 → 96 on the way.
      expect([...seen]).toEqual([64, 80, 96]);
    } finally {
      await decoder.release();
    }
  });
});

describe.each(BINDINGS)("rows given to sequences (%s binding)", (binding) => {
  test("hold zeros past their positions whatever the reused buffers held: NaN left in every spare buffer changes no logit", async () => {
    // Attention masks the positions past a row's length, but a masked position's zero weight times
    // NaN (or infinity) is NaN: a row must never read what an earlier sequence left there.
    const info = await buildSyntheticModel(join(root.path, `poison-${binding}`), { preset: "tiny-qwen3", variant: "fused", seed: 7 });
    const decoder = await openDecoder(info.dir, { providers: ["cpu"], threads: 1, binding });
    try {
      const prompts = [58, 61, 63, 20].map((n, r) => Array.from({ length: n }, (_, i) => 10 + ((i * 5 + r * 11) % 200)));
      const steps = 30;
      const alone = await Promise.all(prompts.map((p) => decodeAlone(decoder, p, steps)));

      const b = new FusedKvBackend(decoder, 1 << 26);
      // A first round fills the pools' buffers and gives them back as its sequences end.
      const warm = prompts.map(() => b.open(256));
      let logits = await Promise.all(prompts.map((p, r) => b.prefill(warm[r]!, p)));
      for (let s = 0; s < steps; s++) logits = await b.decode(warm, logits.map(argmax));
      warm.forEach((seq) => b.close(seq));
      const spare = (b as unknown as { spare: { spare: KvBuffer[] } }).spare.spare;
      expect(spare.length).toBeGreaterThan(0);
      for (const a of spare) a.host!.fill(NaN);

      // Again on the poisoned buffers: a new pool, class moves of the whole pool (64 -> 80 -> 96)
      // and a row closed midway (the last row fills its gap).
      const seqs = prompts.map(() => b.open(256));
      logits = await Promise.all(prompts.map((p, r) => b.prefill(seqs[r]!, p)));
      let live = seqs.map((_, r) => r);
      for (let s = 0; s < steps; s++) {
        if (s === 8) {
          b.close(seqs[1]!);
          live = live.filter((r) => r !== 1);
        }
        const next = await b.decode(
          live.map((r) => seqs[r]!),
          live.map((r) => argmax(logits[r]!)),
        );
        live.forEach((r, i) => {
          logits[r] = next[i]!;
          const want = alone[r]![s]!;
          let diff = 0;
          for (let j = 0; j < want.length; j++) diff = Math.max(diff, Math.abs(next[i]![j]! - want[j]!));
          expect(diff).toBeLessThan(1e-4);
        });
      }
    } finally {
      await decoder.release();
    }
  });
});

describe("the split-attention graph's input shapes", () => {
  test("stay the same from one decode step to the next within a pool: the attention mask spans its capacity", async () => {
    // ONNX Runtime keeps a memory plan per set of input shapes; a mask that grew by one position
    // per step made it plan every step's allocations anew.
    const info = await buildSyntheticModel(join(root.path, "shapes"), { preset: "tiny-qwen3", variant: "fused", seed: 6 });
    const decoder = await NodeDecoder.create(info.dir, { providers: ["cpu"], threads: 1 });
    try {
      expect(decoder.stepMode).toBe("split");
      const maskName = decoder.spec.attentionMask!;
      const b = new FusedKvBackend(decoder, 1 << 26);
      const seq = b.open(256);
      let logits = await b.prefill(seq, Array.from({ length: 40 }, (_, i) => 10 + i));
      const masks: { dims: readonly number[]; ones: number }[] = [];
      const run = decoder.run.bind(decoder);
      decoder.run = ((...args: Parameters<typeof run>) => {
        const m = args[0][maskName]!;
        masks.push({ dims: m.dims, ones: (m.data as BigInt64Array).reduce((n, x) => n + Number(x), 0) });
        return run(...args);
      }) as typeof decoder.run;
      try {
        for (let s = 0; s < 10; s++) [logits] = (await b.decode([seq], [argmax(logits)])) as [Float32Array];
        // A verification run of 3 tokens: the capacity plus the run's padding past a row's end.
        await b.verify([seq], [[argmax(logits), 5, 6]]);
      } finally {
        decoder.run = run;
      }
      const [capacity] = b.poolCapacities();
      expect(capacity).toBe(64);
      expect(masks.slice(0, 10).map((m) => m.dims)).toEqual(Array.from({ length: 10 }, () => [1, capacity]));
      // Each row's count of ones is still its length: what the graph reads.
      expect(masks.slice(0, 10).map((m) => m.ones)).toEqual(Array.from({ length: 10 }, (_, s) => 41 + s));
      expect(masks[10]).toEqual({ dims: [1, capacity! + 2], ones: 53 });
    } finally {
      await decoder.release();
    }
  });
});
