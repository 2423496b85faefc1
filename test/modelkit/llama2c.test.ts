// stories260K imported from llama2.c must reproduce llama2.c's published greedy output, token
// for token, in both graph variants, and load in transformers.js.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import * as ort from "onnxruntime-node";
import { Tokenizer } from "tokenizers";
import { type ImportedModel, importLlama2c } from "../../src/modelkit/index.ts";
import { greedy } from "./greedy.ts";

const DATA = resolve(import.meta.dir, "../../../shared/models/stories260k");
const present = existsSync(join(DATA, "stories260K.bin")) && existsSync(join(DATA, "tok512.bin"));
if (!present) console.log(`[modelkit] ${DATA} absent: skipping the stories260K tests`);

/** The reference text: the code block after "Public reference output" in the data's README. */
function referenceText(): string {
  const readme = readFileSync(join(DATA, "README.md"), "utf8");
  const section = readme.slice(readme.indexOf("Public reference output"));
  const m = /```\n([\s\S]*?)```/.exec(section);
  if (!m) throw new Error("no reference block in README.md");
  return m[1].replace(/\n$/, "");
}

const root = mkdtempSync(join(tmpdir(), "modelkit-l2c-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

async function load(m: ImportedModel): Promise<{ session: ort.InferenceSession; shape: ImportedModel["config"] & { headDim: number } }> {
  const session = await ort.InferenceSession.create(join(m.dir, "onnx", "model.onnx"));
  // The fused graph may pad heads for GroupQueryAttention: the cache uses kv_head_dim.
  return { session, shape: { ...m.config, headDim: m.sluice.graph?.kv_head_dim ?? m.config.headDim } };
}

// 256 forward passes from BOS (positions 0..255) as llama2.c's `-n 256` does; a generated BOS stops.
const STEPS = 256;

describe.skipIf(!present)("stories260K via importLlama2c", () => {
  const models: Record<string, ImportedModel> = {};
  let tokenizer: Tokenizer;
  let standardTokens: number[];

  beforeAll(async () => {
    const ckpt = join(DATA, "stories260K.bin");
    const tok = join(DATA, "tok512.bin");
    for (const variant of ["standard", "fused"] as const) {
      for (const dtype of ["float32", "float16"] as const) {
        models[`${variant}-${dtype}`] = await importLlama2c(ckpt, tok, { id: "llama2c/stories260k", outDir: join(root, `${variant}-${dtype}`), variant, dtype });
      }
    }
    tokenizer = await Tokenizer.fromFile(join(models["standard-float32"].dir, "tokenizer.json"));
  });

  test("writes the full layout with llama2.c's settings", () => {
    const dir = models["standard-float32"].dir;
    for (const f of ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "sluice.json", "onnx/model.onnx"]) {
      expect(existsSync(join(dir, f))).toBe(true);
    }
    const config = JSON.parse(readFileSync(join(dir, "config.json"), "utf8"));
    expect(config).toMatchObject({ model_type: "llama", hidden_size: 64, intermediate_size: 172, num_hidden_layers: 5, num_attention_heads: 8, num_key_value_heads: 4, head_dim: 8, vocab_size: 512, max_position_embeddings: 512, tie_word_embeddings: true });
    const gen = JSON.parse(readFileSync(join(dir, "generation_config.json"), "utf8"));
    expect(gen.eos_token_id).toEqual(expect.arrayContaining([1, 2]));
    const sluice = JSON.parse(readFileSync(join(dir, "sluice.json"), "utf8"));
    expect(sluice).toMatchObject({ id: "llama2c/stories260k", context_length: 512, capabilities: { images: false } });
    expect(existsSync(join(models["fused-float32"].dir, "genai_config.json"))).toBe(true);
  });

  test("'Once upon a time' encodes to [1, 403, 407, 261, 378]", async () => {
    expect((await tokenizer.encode("Once upon a time")).getIds()).toEqual([1, 403, 407, 261, 378]);
    expect((await tokenizer.encode("")).getIds()).toEqual([1]);
  });

  test("standard float32 reproduces llama2.c's greedy story", async () => {
    const { session, shape } = await load(models["standard-float32"]);
    [standardTokens] = await greedy(session, shape, [[1]], { steps: STEPS, stopIds: [1] });
    expect(standardTokens.length).toBe(STEPS);
    expect(await tokenizer.decode(standardTokens, true)).toBe(referenceText());
  });

  test("fused float32 gives the same tokens, also with a shared past/present buffer", async () => {
    const { session, shape } = await load(models["fused-float32"]);
    const [plain] = await greedy(session, shape, [[1]], { steps: STEPS, stopIds: [1] });
    expect(plain).toEqual(standardTokens);
    const [shared] = await greedy(session, shape, [[1]], { steps: STEPS, stopIds: [1], sharedBuffer: 512 });
    expect(shared).toEqual(standardTokens);
  });

  test("float16 graphs give (nearly) the same tokens", async () => {
    for (const key of ["standard-float16", "fused-float16"]) {
      const { session, shape } = await load(models[key]);
      expect(session.outputNames).toContain("logits");
      const [out] = await greedy(session, shape, [[1]], { steps: STEPS, stopIds: [1], dtype: "float16" });
      // Half precision may flip a near-tie late in the story; the opening must be identical.
      expect(out.slice(0, 64)).toEqual(standardTokens.slice(0, 64));
      const same = out.filter((t, i) => t === standardTokens[i]).length;
      expect(same / STEPS).toBeGreaterThan(0.9);
    }
  });

  test("a prompt continues the same way in both variants (prefill with several tokens)", async () => {
    const ids = (await tokenizer.encode("Once upon a time, there was a dog")).getIds();
    const a = await load(models["standard-float32"]);
    const b = await load(models["fused-float32"]);
    const [x] = await greedy(a.session, a.shape, [ids], { steps: 40, stopIds: [1] });
    const [y] = await greedy(b.session, b.shape, [ids], { steps: 40, stopIds: [1], sharedBuffer: 128 });
    expect(y).toEqual(x);
    expect(x.length).toBeGreaterThan(10);
  });
});
