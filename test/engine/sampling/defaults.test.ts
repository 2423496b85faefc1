// How a model's sampling defaults are read (generation_config.json under sluice.json "defaults")
// and how a request's parameters are completed with them.
import { afterAll, describe, expect, test } from "bun:test";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { discoverModelDirs } from "../../../src/engine/discovery.ts";
import {
  cardDefaults,
  completeSampling,
  generationConfigDefaults,
  modelSamplingDefaults,
  SamplingDefaultsError,
  withModelDefaults,
} from "../../../src/engine/sampling/defaults.ts";
import { doctorReport } from "../../../src/cli/doctor.ts";
import { describeSamplingDefaults } from "../../../src/protocol/sampling.ts";
import { tempDir } from "../../helpers/paths.ts";

const root = tempDir("sluice-defaults-");
afterAll(() => root.remove());

function modelDir(name: string, files: Record<string, unknown>): string {
  const dir = join(root.path, name);
  mkdirSync(join(dir, "onnx"), { recursive: true });
  writeFileSync(join(dir, "onnx", "model.onnx"), "");
  writeFileSync(join(dir, "tokenizer.json"), "{}");
  for (const [f, v] of Object.entries(files)) writeFileSync(join(dir, f), typeof v === "string" ? v : JSON.stringify(v));
  return dir;
}

describe("generation_config.json", () => {
  test("Qwen3's file gives its four values", () => {
    expect(generationConfigDefaults({ bos_token_id: 1, do_sample: true, temperature: 0.6, top_p: 0.95, top_k: 20, transformers_version: "4.51.0" })).toEqual({ temperature: 0.6, topP: 0.95, topK: 20 });
  });
  test("do_sample false is greedy, whatever temperature the file names", () => {
    expect(generationConfigDefaults({ do_sample: false })).toEqual({ temperature: 0 });
    expect(generationConfigDefaults({ do_sample: false, temperature: 0.7, top_p: 0.8 })).toEqual({ temperature: 0, topP: 0.8 });
  });
  test("without do_sample the values apply as written (vLLM's reading)", () => {
    expect(generationConfigDefaults({ temperature: 0.7, min_p: 0.05 })).toEqual({ temperature: 0.7, minP: 0.05 });
  });
  test("a value out of the API's range is left out, the others kept", () => {
    expect(generationConfigDefaults({ temperature: 5, top_p: 0, top_k: 2.5, min_p: 0.1 })).toEqual({ minP: 0.1 });
    expect(generationConfigDefaults({ temperature: "0.6" })).toEqual({});
    expect(generationConfigDefaults(null)).toEqual({});
  });
});

describe("sluice.json defaults", () => {
  test("override the file field by field; false ignores the file", () => {
    const dir = modelDir("card", { "generation_config.json": { temperature: 0.6, top_p: 0.95, top_k: 20 } });
    expect(modelSamplingDefaults(dir, undefined)).toEqual({ temperature: 0.6, topP: 0.95, topK: 20 });
    expect(modelSamplingDefaults(dir, { temperature: 0, min_p: 0.1 })).toEqual({ temperature: 0, topP: 0.95, topK: 20, minP: 0.1 });
    expect(modelSamplingDefaults(dir, false)).toEqual({});
  });
  test("a wrong field is refused, naming it", () => {
    expect(() => cardDefaults({ temprature: 1 })).toThrow(/unknown field "temprature"/);
    expect(() => cardDefaults({ top_p: 1.5 })).toThrow(/top_p must be a number above 0, at most 1, not 1.5/);
    expect(() => cardDefaults("greedy")).toThrow(SamplingDefaultsError);
  });
  test("discovery leaves a model with a wrong card out, saying why, and reads the defaults of the others", () => {
    modelDir("bad", { "sluice.json": { id: "t/bad", defaults: { top_k: -2 } } });
    modelDir("good", { "sluice.json": { id: "t/good", defaults: { top_p: 0.9 } }, "generation_config.json": { do_sample: false } });
    const found = discoverModelDirs(root.path);
    const bad = found.find((m) => m.id === "t/bad")!;
    expect(bad.problem).toBe('sluice.json "defaults": top_k must be a whole number ≥ -1 (0 and -1: off), not -2');
    const good = found.find((m) => m.id === "t/good")!;
    expect(good.problem).toBeNull();
    expect(good.samplingDefaults).toEqual({ temperature: 0, topP: 0.9 });
    // doctor says both.
    const data = tempDir("sluice-defaults-data-");
    try {
      const { lines } = doctorReport({ dataDir: data.path, modelsDir: root.path, device: "cpu", binding: "node" });
      expect(lines.find((l) => l.includes("t/bad:"))).toContain('not servable: sluice.json "defaults": top_k must be');
      expect(lines.find((l) => l.includes("t/good:"))).toContain("sampling by default: greedy");
    } finally {
      data.remove();
    }
  });
});

describe("completing a request", () => {
  const base = { presencePenalty: 0, frequencyPenalty: 0, logitBias: {} };
  test("the request's values win one at a time; the model's fill the rest; the API's what is left", () => {
    const model = { temperature: 0.6, topP: 0.95, topK: 20 };
    const done = completeSampling(withModelDefaults({ ...base, temperature: 1, seed: 3 }, model));
    expect(done).toMatchObject({ temperature: 1, topP: 0.95, topK: 20, minP: 0, seed: 3 });
    expect(completeSampling(withModelDefaults({ ...base, temperature: 0, topK: 0 }, model))).toMatchObject({ temperature: 0, topP: 0.95, topK: 0, minP: 0 });
    expect(completeSampling(withModelDefaults(base, {}))).toMatchObject({ temperature: 1, topP: 1, topK: 0, minP: 0 });
  });
  test("descriptions for the catalog", () => {
    expect(describeSamplingDefaults({ temperature: 0.6, topP: 0.95, topK: 20 })).toBe("temperature 0.6, top_p 0.95, top_k 20");
    expect(describeSamplingDefaults({ temperature: 0, topP: 0.9 })).toBe("greedy");
    expect(describeSamplingDefaults({})).toBe("");
  });
});
