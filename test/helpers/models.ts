// Generated model directories for tests, built once per run (or reused from .cache/ when the
// model kit's output for the same spec is already there).
import { existsSync, readFileSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { buildSyntheticModel, type SyntheticSpec } from "../../src/modelkit/index.ts";
import { BUN, cacheDir, REPO, STORIES_DIR } from "./paths.ts";

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
