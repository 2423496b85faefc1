import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as ort from "onnxruntime-node";
import { Tokenizer } from "tokenizers";
import { buildSyntheticModel } from "../../src/modelkit/index.ts";
import { greedy } from "./greedy.ts";

const root = mkdtempSync(join(tmpdir(), "modelkit-synth-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe("tiny-bytes", () => {
  test("standard variant loads in onnxruntime-node and generates varied tokens", async () => {
    const dir = join(root, "tb-std");
    const info = await buildSyntheticModel(dir, "tiny-bytes");
    const tok = await Tokenizer.fromFile(join(dir, "tokenizer.json"));
    const enc = await tok.encode("Hello world, the river!");
    expect(await tok.decode(enc.getIds(), false)).toBe("Hello world, the river!");
    const session = await ort.InferenceSession.create(join(dir, "onnx", "model.onnx"));
    expect(session.inputNames).toContain("past_key_values.1.value");
    expect(session.outputNames).toContain("present.1.key");
    const [out] = await greedy(session, info.config, [enc.getIds()], { steps: 16 });
    expect(out.length).toBe(16);
    expect(new Set(out).size).toBeGreaterThan(2);
    const sluice = JSON.parse(readFileSync(join(dir, "sluice.json"), "utf8"));
    expect(sluice.id).toBe("synthetic/tiny-bytes");
  });
});
