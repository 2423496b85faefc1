// Repositories for the local Hub (hub-server.ts), built by the model kit in the layouts real
// exports use: transformers.js's onnx/ folder with one graph per dtype, onnxruntime-genai's
// genai_config.json, a vision-language split export, a gated copy, a safetensors-only checkpoint
// and a repository with no model at all. Built once per process into a temporary folder.
import { copyFileSync, mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join, relative, sep } from "node:path";
import { buildDecoderModel, buildSyntheticVlm, importLlama2c } from "../../src/modelkit/index.ts";
import { randomWeights } from "../../src/modelkit/llama/random.ts";
import type { HubFileSpec, HubRepoSpec } from "./hub-server.ts";
import { STORIES_DIR, tempDir } from "./paths.ts";
import { writeStoriesHfCheckpoint } from "../modelkit/hf-fixtures.ts";
import { writeSplitGguf } from "../modelkit/gguf-fixtures.ts";
import { T } from "./gguf-writer.ts";

export const STORIES_REPO = "onnx-community/stories260k-ONNX";
export const GATED_REPO = "sluice-test/stories260k-gated";
export const GENAI_REPO = "sluice-test/stories260k-genai";
/** Two onnxruntime-genai exports in folders of their own, as microsoft's *-onnx repos keep them. */
export const GENAI_VARIANTS_REPO = "sluice-test/stories260k-genai-variants";
export const VLM_REPO = "sluice-test/tiny-vlm-ONNX";
/** stories260K as a Hugging Face checkpoint (safetensors), which a pull converts. */
export const SAFETENSORS_REPO = "sluice-test/stories260k-safetensors";
/** A safetensors file that is no checkpoint the importer takes. */
export const BROKEN_SAFETENSORS_REPO = "sluice-test/broken-safetensors";
export const EMPTY_REPO = "sluice-test/readme-only";
/**
 * GGUF files as the Hub's *-GGUF repositories hold them: stories260K.gguf (llama.cpp's own) as
 * its F32 file, a Q8_0 copy split in two files in a folder of its own, and a vision projector
 * that is never the model.
 */
export const GGUF_REPO = "sluice-test/stories260k-GGUF";
export const GGUF_F32 = "stories260K-F32.gguf";
export const GGUF_Q8_SHARDS = ["Q8_0/stories260K-Q8_0-00001-of-00002.gguf", "Q8_0/stories260K-Q8_0-00002-of-00002.gguf"];

/** What every Hub repository has and a pull must leave alone. */
const REPO_EXTRAS: HubFileSpec[] = [
  { path: "README.md", source: new TextEncoder().encode("---\nlicense: mit\n---\n# A test repository\n") },
  { path: ".gitattributes", source: new TextEncoder().encode("*.onnx filter=lfs diff=lfs merge=lfs -text\n*.onnx_data filter=lfs diff=lfs merge=lfs -text\n") },
];

/** Files of `dir` as repository files, renamed by `rename` (null drops the file). */
function filesOf(dir: string, rename: (rel: string) => string | null = (r) => r): HubFileSpec[] {
  const out: HubFileSpec[] = [];
  const walk = (d: string) => {
    for (const e of readdirSync(d)) {
      const p = join(d, e);
      if (statSync(p).isDirectory()) walk(p);
      else {
        const path = rename(relative(dir, p).split(sep).join("/"));
        if (path) out.push({ path, source: p });
      }
    }
  };
  walk(dir);
  return out.sort((a, b) => a.path.localeCompare(b.path));
}

/** Files a Hub export does not carry: our own card. */
const noCard = (r: string) => (r === "sluice.json" ? null : r);

export interface HubFixtures {
  repos: HubRepoSpec[];
  remove(): void;
}

/**
 * stories260K (from ../shared) in the three text layouts, plus the vision and edge-case repos.
 * The stories graphs get external data (model.onnx_data) so that a pull must find it.
 */
export async function buildHubRepos(): Promise<HubFixtures> {
  const tmp = tempDir("sluice-hub-repos-");
  const bin = join(STORIES_DIR, "stories260K.bin");
  const tok = join(STORIES_DIR, "tok512.bin");
  const external = 64 * 1024;

  const fp32 = join(tmp.path, "fp32");
  const { config } = await importLlama2c(bin, tok, { id: "x", outDir: fp32, variant: "standard", externalDataThreshold: external });
  const fp16 = join(tmp.path, "fp16");
  await importLlama2c(bin, tok, { id: "x", outDir: fp16, variant: "standard", dtype: "float16", externalDataThreshold: external });
  // The q4 slot holds another graph of the same shape (random weights): which file a pull
  // takes is decided by name, and a wrongly chosen file would not tell the story.
  const other = join(tmp.path, "other.onnx");
  writeFileSync(other, buildDecoderModel(config, randomWeights(config, 3), { variant: "standard", dtype: "float32" }).model);

  const configs = filesOf(fp32, (r) => (r.startsWith("onnx/") ? null : noCard(r)));
  const dtypeFiles: HubFileSpec[] = [
    ...filesOf(fp32, (r) => (r.startsWith("onnx/") ? r : null)),
    ...filesOf(fp16, (r) => (r.startsWith("onnx/") ? r.replace("model.onnx", "model_fp16.onnx") : null)),
    { path: "onnx/model_q4.onnx", source: other },
    { path: "onnx/model_quantized.onnx", source: other },
  ];

  const genai = join(tmp.path, "genai");
  await importLlama2c(bin, tok, { id: "x", outDir: genai, variant: "fused", genaiConfig: true, externalDataThreshold: external });

  const vlm32 = join(tmp.path, "vlm32");
  buildSyntheticVlm(vlm32, { seed: 11 });
  const vlm16 = join(tmp.path, "vlm16");
  buildSyntheticVlm(vlm16, { seed: 11, dtype: "float16" });
  // The float16 build keeps its vision encoder in float32 (as the model kit writes it); the
  // _fp16 slot gets that graph under the fp16 name.
  const vlmFiles = [
    ...filesOf(vlm32, noCard),
    ...filesOf(vlm16, (r) => (r.startsWith("onnx/") ? r.replace(".onnx", "_fp16.onnx") : null)),
  ];

  const hfCheckpoint = join(tmp.path, "hf");
  writeStoriesHfCheckpoint(STORIES_DIR, hfCheckpoint);
  const safetensors = join(tmp.path, "safetensors");
  mkdirSync(safetensors);
  const header = new TextEncoder().encode(JSON.stringify({ w: { dtype: "F32", shape: [2], data_offsets: [0, 8] } }));
  const st = new Uint8Array(8 + header.byteLength + 8);
  new DataView(st.buffer).setBigUint64(0, BigInt(header.byteLength), true);
  st.set(header, 8);
  writeFileSync(join(safetensors, "model.safetensors"), st);
  copyFileSync(join(fp32, "config.json"), join(safetensors, "config.json"));
  copyFileSync(join(fp32, "tokenizer.json"), join(safetensors, "tokenizer.json"));
  copyFileSync(join(fp32, "tokenizer_config.json"), join(safetensors, "tokenizer_config.json"));

  const split = await writeSplitGguf(join(STORIES_DIR, "stories260K.gguf"), join(tmp.path, "stories260K-Q8_0"), 2, T.Q8_0);
  const ggufFiles: HubFileSpec[] = [
    { path: GGUF_F32, source: join(STORIES_DIR, "stories260K.gguf") },
    ...split.map((p, i) => ({ path: GGUF_Q8_SHARDS[i]!, source: p })),
    { path: "mmproj-stories260K-F16.gguf", source: new TextEncoder().encode("not a model") },
  ];

  const repos: HubRepoSpec[] = [
    { id: STORIES_REPO, files: [...REPO_EXTRAS, ...configs, ...dtypeFiles], refs: ["main", "v1"] },
    { id: GATED_REPO, files: [...REPO_EXTRAS, ...configs, ...filesOf(fp32, (r) => (r.startsWith("onnx/") ? r : null))], gated: true },
    { id: GENAI_REPO, files: [...REPO_EXTRAS, ...filesOf(genai, noCard)] },
    {
      id: GENAI_VARIANTS_REPO,
      files: [...REPO_EXTRAS, ...["cpu-int4-rtn-block-32", "cpu-fp32"].flatMap((folder) => filesOf(genai, (r) => (r === "sluice.json" ? null : `${folder}/${r}`)))],
    },
    { id: VLM_REPO, files: [...REPO_EXTRAS, ...vlmFiles] },
    { id: SAFETENSORS_REPO, files: [...REPO_EXTRAS, ...filesOf(hfCheckpoint)] },
    { id: BROKEN_SAFETENSORS_REPO, files: [...REPO_EXTRAS, ...filesOf(safetensors)] },
    { id: EMPTY_REPO, files: REPO_EXTRAS },
    { id: GGUF_REPO, files: [...REPO_EXTRAS, ...ggufFiles] },
  ];
  return { repos, remove: () => rmSync(tmp.path, { recursive: true, force: true }) };
}
