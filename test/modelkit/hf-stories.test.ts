// stories260K written as a Hugging Face LlamaForCausalLM checkpoint (q/k rows permuted to the
// rotate-half order, as llama2.c's export.py --hf does), imported with importHfCheckpoint: its
// greedy story must be llama2.c's published one, token for token, in fp32 and fp16.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import * as ort from "onnxruntime-node";
import { Tokenizer } from "tokenizers";
import { type ImportedHfModel, importHfCheckpoint } from "../../src/modelkit/index.ts";
import { hasStories, STORIES_DIR, storiesReferenceText, tempDir } from "../helpers/paths.ts";
import { greedy } from "./greedy.ts";
import { writeStoriesHfCheckpoint } from "./hf-fixtures.ts";

if (!hasStories) console.log(`[modelkit] ${STORIES_DIR} absent: skipping the stories260K HF import tests`);


const STEPS = 256;

describe.skipIf(!hasStories)("stories260K as an HF checkpoint", () => {
  let root: ReturnType<typeof tempDir>;
  const models: Partial<Record<"fp32" | "fp16", ImportedHfModel>> = {};
  let tokenizer: Tokenizer;

  beforeAll(async () => {
    root = tempDir("hf-stories-");
    writeStoriesHfCheckpoint(STORIES_DIR, join(root.path, "hf"));
    for (const dtype of ["fp32", "fp16"] as const) {
      models[dtype] = await importHfCheckpoint({ dir: join(root.path, "hf"), out: join(root.path, dtype), id: `karpathy/stories260k-${dtype}`, dtype });
    }
    tokenizer = await Tokenizer.fromFile(join(models.fp32!.dir, "tokenizer.json"));
  });
  afterAll(() => root.remove());

  async function story(m: ImportedHfModel, sharedBuffer?: number): Promise<number[]> {
    const session = await ort.InferenceSession.create(join(m.dir, m.onnxFile));
    const shape = { ...m.config, headDim: m.sluice.graph!.kv_head_dim };
    const [tokens] = await greedy(session, shape, [[1]], { steps: STEPS, stopIds: [1], dtype: m.sluice.graph!.dtype, sharedBuffer });
    await session.release();
    return tokens!;
  }

  test("the directory: fused graph, tokenizer files carried over verbatim, config and cards", () => {
    const m = models.fp32!;
    expect(m.onnxFile).toBe("onnx/model.onnx");
    expect(m.sluice).toMatchObject({ id: "karpathy/stories260k-fp32", context_length: 512, graph: { variant: "fused", dtype: "float32", kv_head_dim: 16, file: "onnx/model.onnx" } });
    for (const f of ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"]) {
      expect(readFileSync(join(m.dir, f), "utf8")).toBe(readFileSync(join(root.path, "hf", f), "utf8"));
    }
    const config = JSON.parse(readFileSync(join(models.fp16!.dir, "config.json"), "utf8"));
    expect(config).toMatchObject({ architectures: ["LlamaForCausalLM"], hidden_size: 64, torch_dtype: "float16", "transformers.js_config": { dtype: "fp16" } });
    const genai = JSON.parse(readFileSync(join(models.fp16!.dir, "genai_config.json"), "utf8"));
    expect(genai.model.decoder.filename).toBe("onnx/model_fp16.onnx");
  });

  test("fp32: llama2.c's reference story token for token (with a shared past/present buffer, as the engine runs it)", async () => {
    const tokens = await story(models.fp32!, 512);
    expect(tokens.length).toBe(STEPS);
    expect(await tokenizer.decode(tokens, true)).toBe(storiesReferenceText());
  });

  test("fp16: the same story token for token", async () => {
    const tokens = await story(models.fp16!);
    expect(await tokenizer.decode(tokens, true)).toBe(storiesReferenceText());
  });
});
