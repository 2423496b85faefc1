// The imported directory must be a real layout: transformers.js (the reference implementation)
// loads it from local files only and generates the same greedy tokens as our own loop.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { AutoModelForCausalLM, AutoTokenizer, Tensor, env } from "@huggingface/transformers";
import * as ort from "onnxruntime-node";
import { buildSyntheticModel, importHfCheckpoint, importLlama2c } from "../../src/modelkit/index.ts";
import { greedy } from "./greedy.ts";
import { writeStoriesHfCheckpoint } from "./hf-fixtures.ts";

const DATA = resolve(import.meta.dir, "../../../shared/models/stories260k");
const present = existsSync(join(DATA, "stories260K.bin"));
if (!present) console.log(`[modelkit] ${DATA} absent: skipping the transformers.js stories260K test`);

const root = mkdtempSync(join(tmpdir(), "modelkit-tjs-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

beforeAll(() => {
  env.allowRemoteModels = false;
  env.allowLocalModels = true;
  env.localModelPath = `${root}/`;
  env.useFSCache = false;
});

async function transformersGreedy(modelId: string, prompt: number[], maxNewTokens: number, dtype: "fp32" | "q4" = "fp32"): Promise<number[]> {
  const model = await AutoModelForCausalLM.from_pretrained(modelId, { dtype, local_files_only: true });
  const ids = new Tensor("int64", BigInt64Array.from(prompt, BigInt), [1, prompt.length]);
  const mask = new Tensor("int64", new BigInt64Array(prompt.length).fill(1n), [1, prompt.length]);
  const out = (await model.generate({ input_ids: ids, attention_mask: mask, max_new_tokens: maxNewTokens, do_sample: false })) as Tensor;
  await model.dispose();
  return (out.tolist() as bigint[][])[0].map(Number).slice(prompt.length);
}

describe("transformers.js loads modelkit directories", () => {
  test.skipIf(!present)("stories260K: same greedy tokens as our loop, and the same tokenizer", async () => {
    const m = await importLlama2c(join(DATA, "stories260K.bin"), join(DATA, "tok512.bin"), { id: "stories", outDir: join(root, "stories") });
    const tokenizer = await AutoTokenizer.from_pretrained("stories", { local_files_only: true });
    expect(Array.from(tokenizer("Once upon a time").input_ids.data as BigInt64Array, Number)).toEqual([1, 403, 407, 261, 378]);
    const theirs = await transformersGreedy("stories", [1], 256);
    const session = await ort.InferenceSession.create(join(m.dir, "onnx", "model.onnx"));
    const [ours] = await greedy(session, m.config, [[1]], { steps: 256, stopIds: [1, 2] });
    // transformers.js keeps the eos token it stopped on; the loop above drops it.
    expect(theirs.slice(0, ours.length)).toEqual(ours);
    expect(ours.length).toBe(256);
    expect(tokenizer.decode(theirs, { skip_special_tokens: true })).toStartWith("Once upon a time, there was a little girl named Lily.");
  });

  test("tiny-qwen3 synthetic model: same greedy tokens as our loop", async () => {
    const info = await buildSyntheticModel(join(root, "tiny-qwen3"), "tiny-qwen3");
    const tokenizer = await AutoTokenizer.from_pretrained("tiny-qwen3", { local_files_only: true });
    const text = tokenizer.apply_chat_template([{ role: "user", content: "Hello there" }], { tokenize: false, add_generation_prompt: true }) as string;
    expect(text).toContain("<|im_start|>assistant");
    const prompt = Array.from(tokenizer(text, { add_special_tokens: false }).input_ids.data as BigInt64Array, Number);
    const theirs = await transformersGreedy("tiny-qwen3", prompt, 12);
    const session = await ort.InferenceSession.create(join(info.dir, "onnx", "model.onnx"));
    const eos = [151645, 151643];
    const [ours] = await greedy(session, info.config, [prompt], { steps: 12, stopIds: eos });
    expect(theirs.slice(0, ours.length)).toEqual(ours);
  });

  test.skipIf(!present)("an HF checkpoint imported with 4-bit weights loads with dtype q4 and decodes as our loop does", async () => {
    writeStoriesHfCheckpoint(DATA, join(root, "stories-hf"));
    const m = await importHfCheckpoint({ dir: join(root, "stories-hf"), out: join(root, "stories-q4"), id: "stories-q4", dtype: "q4" });
    const theirs = await transformersGreedy("stories-q4", [1, 403, 407, 261, 378], 40, "q4");
    const session = await ort.InferenceSession.create(join(m.dir, m.onnxFile));
    const [ours] = await greedy(session, { ...m.config, headDim: m.sluice.graph!.kv_head_dim }, [[1, 403, 407, 261, 378]], { steps: 40, stopIds: [1, 2] });
    expect(ours!.length).toBeGreaterThan(10);
    expect(theirs.slice(0, ours!.length)).toEqual(ours!);
  });
});
