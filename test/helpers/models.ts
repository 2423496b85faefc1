// Generated model directories for tests, built once per run (or reused from .cache/ when the
// model kit's output for the same spec is already there).
import { existsSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { buildSyntheticModel, type HfImportDType, importHfCheckpoint, type SyntheticSpec, writeHfCheckpoint } from "../../src/modelkit/index.ts";
import { randomWeights } from "../../src/modelkit/llama/random.ts";
import { writeStoriesHfCheckpoint } from "../modelkit/hf-fixtures.ts";
import { BUN, cacheDir, REPO, STORIES_DIR, tempDir } from "./paths.ts";

const built = new Map<string, Promise<string>>();

/** Builds (or reuses) a synthetic model into `root/<relPath>`. */
export function syntheticModel(root: string, relPath: string, spec: SyntheticSpec): Promise<string> {
  const dir = join(root, relPath);
  const key = `${dir}:${JSON.stringify(spec)}`;
  let p = built.get(key);
  if (!p) {
    p = (async () => {
      const stamp = join(dir, "sluice.json");
      if (existsSync(stamp) && JSON.parse(readFileSync(stamp, "utf8")).id === spec.id && !staleSampling(dir, spec)) return dir;
      await buildSyntheticModel(dir, spec);
      return dir;
    })();
    built.set(key, p);
  }
  return p;
}

/**
 * A model cached before the kit stopped writing `do_sample: false` (which now makes a model greedy
 * by default) is built again.
 */
function staleSampling(dir: string, spec: SyntheticSpec): boolean {
  const path = join(dir, "generation_config.json");
  if (!existsSync(path)) return true;
  return JSON.parse(readFileSync(path, "utf8")).do_sample === false && spec.generation?.do_sample !== false;
}

/** A shared tiny byte-level chat model for API tests. */
export const tinyModelsRoot = () => cacheDir("test-models");

/**
 * Like linkCachedModel, but cached under a name that changes with the whole spec (not only its
 * id), so that an edited script or template is built afresh.
 */
export async function linkModelForSpec(modelsDir: string, name: string, spec: SyntheticSpec): Promise<string> {
  const dir = await syntheticModel(tinyModelsRoot(), `${name}-${Bun.hash(JSON.stringify(spec)).toString(36)}`, spec);
  symlinkSync(dir, join(modelsDir, name));
  return dir;
}

/** Builds (or reuses) a synthetic model in the shared cache and links it into `modelsDir/name`. */
export async function linkCachedModel(modelsDir: string, name: string, spec: SyntheticSpec): Promise<string> {
  const dir = await syntheticModel(tinyModelsRoot(), name, spec);
  symlinkSync(dir, join(modelsDir, name));
  return dir;
}

/**
 * stories260K imported into `dir/id` by the CLI, as an operator does (`models import llama2c`), in
 * the graph variant asked for.
 */
export function importStories(dir: string, id: string, variant: "fused" | "standard"): void {
  const r = Bun.spawnSync(
    [BUN, join(REPO, "src/cli/main.ts"), "models", "import", "llama2c", join(STORIES_DIR, "stories260K.bin"), join(STORIES_DIR, "tok512.bin"),
      "--id", id, "--out", join(dir, id), "--variant", variant],
    { cwd: REPO },
  );
  if (r.exitCode !== 0) throw new Error(`import failed: ${r.stderr.toString()}`);
}

const TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"];

/**
 * A synthetic preset as the Hugging Face importer writes it in `dtype` (the 4-bit dtypes exist
 * only that way): the preset's weights from `spec.seed` written as a checkpoint, then imported.
 * Built once into the shared test cache (by the whole spec and dtype) and linked into
 * `modelsDir/name`; the directory's path.
 */
export async function importedSyntheticModel(modelsDir: string, name: string, spec: SyntheticSpec, dtype: HfImportDType): Promise<string> {
  const dir = join(tinyModelsRoot(), `${name}-${dtype}-${Bun.hash(JSON.stringify(spec)).toString(36)}`);
  const key = `${dir}:imported`;
  let p = built.get(key);
  if (!p) {
    p = (async () => {
      if (existsSync(join(dir, "sluice.json"))) return dir;
      const scratch = tempDir("sluice-imported-");
      try {
        const info = await buildSyntheticModel(join(scratch.path, "synthetic"), { ...spec, variant: "fused" });
        const ckpt = join(scratch.path, "checkpoint");
        writeHfCheckpoint(ckpt, { config: info.config, weights: randomWeights(info.config, spec.seed ?? 1), dtype: "F32", copyFrom: { dir: info.dir, files: TOKENIZER_FILES } });
        rmSync(dir, { recursive: true, force: true });
        await importHfCheckpoint({ dir: ckpt, out: dir, id: spec.id ?? name, dtype, contextLength: info.config.maxPositionEmbeddings });
      } finally {
        scratch.remove();
      }
      return dir;
    })();
    built.set(key, p);
  }
  const made = await p;
  symlinkSync(made, join(modelsDir, name));
  return made;
}

/**
 * stories260K written as a Hugging Face checkpoint and imported by the CLI in `dtype`, as an
 * operator does (`models import hf --dtype`), into `dir/id`.
 */
export function importStoriesHf(dir: string, id: string, dtype: HfImportDType): void {
  const scratch = tempDir("sluice-stories-hf-");
  try {
    writeStoriesHfCheckpoint(STORIES_DIR, scratch.path);
    const r = Bun.spawnSync([BUN, join(REPO, "src/cli/main.ts"), "models", "import", "hf", scratch.path, "--id", id, "--out", join(dir, id), "--dtype", dtype], { cwd: REPO });
    if (r.exitCode !== 0) throw new Error(`import failed: ${r.stderr.toString()}`);
  } finally {
    scratch.remove();
  }
}
