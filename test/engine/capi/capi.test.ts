// The C API binding below the server: what it loads (the lengths in place of the mask), the mode
// a GPU runs (GroupQueryAttention writing in place), on the CPU against the JS binding, the bytes
// a decode step hands over at short and long contexts, memory freed, and a broken model refused
// with ONNX Runtime's own words.
import { afterAll, describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { FusedKvBackend } from "../../../src/engine/batching/fused-kv.ts";
import { CapiDecoder } from "../../../src/engine/capi/decoder.ts";
import { openDecoder } from "../../../src/engine/decoders.ts";
import type { Decoder } from "../../../src/engine/runtime/decoder.ts";
import { buildSyntheticModel } from "../../../src/modelkit/index.ts";
import { tempDir } from "../../helpers/paths.ts";

const root = tempDir("sluice-capi-");
afterAll(() => root.remove());

const argmax = (l: Float32Array) => l.reduce((best, v, i) => (v > l[best]! ? i : best), 0);
const fused = (name: string, seed: number) => buildSyntheticModel(join(root.path, name), { preset: "tiny-bytes", variant: "fused", seed });

/** Greedy tokens of three sequences decoded together, a verification run, and a prefix copied into a fourth. */
async function script(d: Decoder): Promise<number[][]> {
  const kv = new FusedKvBackend(d, 1 << 26);
  const prompts = [[5, 6, 7, 8, 9], [20, 21], Array.from({ length: 70 }, (_, i) => 30 + (i % 50))];
  const seqs = prompts.map(() => kv.open(200));
  let logits: Float32Array[] = [];
  for (const [i, p] of prompts.entries()) logits.push(await kv.prefill(seqs[i]!, p));
  const out: number[][] = prompts.map(() => []);
  for (let step = 0; step < 20; step++) {
    const next = logits.map(argmax);
    next.forEach((t, i) => out[i]!.push(t));
    logits = await kv.decode(seqs, next);
  }
  const checked = await kv.verify(seqs.slice(0, 2), [[argmax(logits[0]!), 40, 41], [argmax(logits[1]!)]]);
  out.push(checked.flat().map(argmax));
  // The first sequence's prefix in a new one, which goes on from it.
  const copy = kv.open(200);
  kv.restore(copy, kv.snapshot(seqs[0]!, 10), 10);
  out.push([argmax(await kv.prefill(copy, [11, 12]))]);
  return out;
}

describe("loading through the C API", () => {
  test("a GroupQueryAttention graph takes per-row lengths instead of the mask; the JS binding keeps the mask", async () => {
    const info = await fused("lengths", 3);
    const capi = await openDecoder(info.dir, { providers: ["cpu"], threads: 1, binding: "capi" });
    const node = await openDecoder(info.dir, { providers: ["cpu"], threads: 1, binding: "node" });
    try {
      expect(capi.spec.attentionMask).toBeNull();
      expect(capi.spec.seqlensK).not.toBeNull();
      expect(capi.spec.totalLength).not.toBeNull();
      expect(capi.takesMask).toBe(false);
      expect(node.spec.attentionMask).toBe("attention_mask");
      expect(node.takesMask).toBe(true);
      expect(capi.memory.resident).toBe(true);
      expect(node.memory.resident).toBe(false);
      expect(await script(capi)).toEqual(await script(node));
    } finally {
      await capi.release();
      await node.release();
    }
  });

  test("in place, as on a GPU (the cache bound as GroupQueryAttention's past and present), it gives the JS binding's tokens in the same mode", async () => {
    const info = await fused("inplace", 4);
    const capi = await openDecoder(info.dir, { providers: ["cpu"], threads: 1, binding: "capi", inPlace: true });
    const node = await openDecoder(info.dir, { providers: ["cpu"], threads: 1, binding: "node", inPlace: true });
    try {
      expect(capi.stepMode).toBe("inplace");
      expect(capi.stepKv).toBeNull();
      expect(node.stepMode).toBe("inplace");
      expect(await script(capi)).toEqual(await script(node));
    } finally {
      await capi.release();
      await node.release();
    }
  });

  test("a file ONNX Runtime cannot read is refused with its message, and nothing is left loaded", async () => {
    const info = await fused("broken", 5);
    writeFileSync(join(info.dir, "onnx", "model.onnx"), "not a model");
    await expect(CapiDecoder.create(info.dir, { providers: ["cpu"], threads: 1 })).rejects.toThrow(/ONNX Runtime CreateSession/);
  });
});

describe("what a decode step hands over", () => {
  /** Bytes to the device of one decode step of one row at `context` positions. */
  async function stepBytes(d: Decoder, context: number): Promise<number> {
    const kv = new FusedKvBackend(d, 1 << 26);
    const seq = kv.open(400);
    const logits = await kv.prefill(seq, Array.from({ length: context }, (_, i) => 10 + (i % 90)));
    const before = d.traffic.toDevice;
    await kv.decode([seq], [argmax(logits)]);
    kv.close(seq);
    return d.traffic.toDevice - before;
  }

  test("through the C API the same few bytes at 20 and at 300 positions; through the JS binding the pool, which grows", async () => {
    const info = await fused("bytes", 6);
    const capi = await openDecoder(info.dir, { providers: ["cpu"], threads: 1, binding: "capi" });
    const node = await openDecoder(info.dir, { providers: ["cpu"], threads: 1, binding: "node" });
    try {
      const [c20, c300] = [await stepBytes(capi, 20), await stepBytes(capi, 300)];
      const [n20, n300] = [await stepBytes(node, 20), await stepBytes(node, 300)];
      // The token id and position (int64), the length (int32), the total (int32).
      expect(c20).toBe(8 + 8 + 4 + 4);
      expect(c300).toBe(c20);
      const positionBytes = capi.spec.layers.length * 2 * capi.positionBytes;
      expect(n300).toBeGreaterThan(300 * positionBytes);
      expect(n300).toBeGreaterThan(n20);
    } finally {
      await capi.release();
      await node.release();
    }
  });

  test("the logits come back into host memory the binding reuses, and what was read from one step outlives the next", async () => {
    const info = await fused("reused", 8);
    const capi = await openDecoder(info.dir, { providers: ["cpu"], threads: 1, binding: "capi" });
    try {
      const kv = new FusedKvBackend(capi, 1 << 26);
      const seqs = [kv.open(100), kv.open(100)];
      const first = [await kv.prefill(seqs[0]!, [5, 6, 7]), await kv.prefill(seqs[1]!, [8, 9])];
      const outputs: ArrayBufferLike[] = [];
      const run = capi.runPool.bind(capi);
      capi.runPool = (r, read) =>
        run(r, (l) => {
          expect(l.reused).toBe(true);
          outputs.push(l.data.buffer);
          return read(l);
        });
      const a = await kv.decode(seqs, first.map(argmax));
      const kept = a.map((l) => Float32Array.from(l));
      const b = await kv.decode(seqs, a.map(argmax));
      expect(outputs).toHaveLength(2);
      expect(outputs[1]).toBe(outputs[0]!);
      // The rows read from the first step are the first step's, not overwritten by the second.
      expect(a).toEqual(kept);
      expect(b[0]).not.toEqual(a[0]);
    } finally {
      await capi.release();
    }
  });
});

describe("the provider's memory", () => {
  test("pools and spares stay bounded while sequences come and go, and the decoder's release frees every allocation", async () => {
    const info = await fused("memory", 7);
    const d = await openDecoder(info.dir, { providers: ["cpu"], threads: 1, binding: "capi" });
    const memory = (d as CapiDecoder).memory;
    const kv = new FusedKvBackend(d, 1 << 24);
    const counts: number[] = [];
    for (let round = 0; round < 6; round++) {
      const seqs = [kv.open(300), kv.open(300), kv.open(300)];
      let logits = await Promise.all(seqs.map((s, i) => kv.prefill(s, [5 + i, 6, 7])));
      for (let step = 0; step < 70; step++) logits = await kv.decode(seqs, logits.map(argmax));
      for (const s of seqs) kv.close(s);
      counts.push(memory.live);
    }
    // What the first round left (spares, the step scratch) is what every later one leaves.
    expect(new Set(counts.slice(1)).size).toBe(1);
    expect(counts[5]).toBeLessThanOrEqual(counts[0]! + 1);
    await d.release();
    expect(memory.live).toBe(0);
  });
});

