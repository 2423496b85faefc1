// Models the HTTP benchmarks share (bench/speculation.ts, bench/stream-interval.ts), made once
// under .cache/bench-speculation: stories260K from ../shared, and a scripted model of the ~50M
// shape that answers with a fixed passage.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { TextTokenizer } from "../src/engine/text/tokenizer.ts";
import { buildSyntheticModel, importLlama2c } from "../src/modelkit/index.ts";

const REPO = join(import.meta.dir, "..");
export const ROOT = join(REPO, ".cache", "bench-speculation");
export const STORIES = join(REPO, "..", "shared", "models", "stories260k");
export const hasStories = existsSync(join(STORIES, "stories260K.bin"));

export async function storiesDir(): Promise<string> {
  const dir = join(ROOT, "models", "stories260k");
  if (!existsSync(join(dir, "sluice.json"))) {
    await importLlama2c(join(STORIES, "stories260K.bin"), join(STORIES, "tok512.bin"), { id: "stories260k", outDir: dir, variant: "fused" });
  }
  return dir;
}

export interface CopyTask {
  dir: string;
  id: string;
  prompt: string;
  /** The scripted answer's text. */
  answer: string;
}

/**
 * A model of the ~50M shape (9 layers, hidden 512, 32k vocabulary, fused graph) whose weights make
 * it answer any prompt with a fixed text: a 240-word passage with every 20th word changed. The
 * prompt holds the passage as it was and asks for it back corrected, as an editor agent would.
 */
export async function copyTask(): Promise<CopyTask> {
  const dir = join(ROOT, "models", "copy-50m");
  // The words: distinct single tokens of the bench-50m tokenizer (one built with a one-layer body).
  const probe = join(ROOT, "probe-tokenizer");
  if (!existsSync(join(probe, "tokenizer.json"))) {
    await buildSyntheticModel(probe, { preset: "bench-50m", shape: { numLayers: 1, hiddenSize: 32, intermediateSize: 32, numHeads: 2, numKvHeads: 1, headDim: 16 } });
  }
  const vocab = Object.keys((JSON.parse(readFileSync(join(probe, "tokenizer.json"), "utf8")) as { model: { vocab: Record<string, number> } }).model.vocab);
  const tokenizer = TextTokenizer.load(probe);
  // Words that the tokenizer reads as one token each (not every vocabulary entry is reachable).
  const words: string[] = [];
  for (const w of vocab.filter((w) => /^Ġ[a-z]{3,9}$/.test(w)).map((w) => ` ${w.slice(1)}`)) {
    if ((await tokenizer.encode(w, { addSpecialTokens: false })).length === 1) words.push(w);
    if (words.length >= 260) break;
  }
  const passage = words.slice(0, 240);
  const edits = words.slice(240, 252);
  const answer = passage.map((w, i) => (i % 20 === 7 ? edits[Math.floor(i / 20)]! : w));
  const prompt = `Fix the spelling in this passage and write it out again:${passage.join("")}`;
  if (!existsSync(join(dir, "sluice.json"))) {
    await buildSyntheticModel(dir, {
      preset: "bench-50m",
      id: "bench/copy-50m",
      variant: "fused",
      shape: { numLayers: 9 },
      script: { chains: [["\n", ...answer, "<|im_end|>"]] },
    });
  }
  return { dir, id: "bench/copy-50m", prompt, answer: answer.join("") };
}
