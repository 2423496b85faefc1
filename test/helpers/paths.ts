import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

export const REPO = resolve(import.meta.dir, "../..");
export const STORIES_DIR = resolve(REPO, "../shared/models/stories260k");
export const hasStories = existsSync(join(STORIES_DIR, "stories260K.bin"));
export const BUN = process.execPath;

/** A fresh directory under the OS temp dir, removed by the returned function. */
export function tempDir(prefix = "sluice-test-"): { path: string; remove: () => void } {
  const path = mkdtempSync(join(tmpdir(), prefix));
  return { path, remove: () => rmSync(path, { recursive: true, force: true }) };
}

/** The git-ignored cache where tests keep generated models between runs. */
export function cacheDir(...parts: string[]): string {
  const dir = join(REPO, ".cache", ...parts);
  mkdirSync(dir, { recursive: true });
  return dir;
}

/** llama2.c's published greedy story: the fenced block of the stories260K README. */
export function storiesReferenceText(): string {
  const readme = readFileSync(join(STORIES_DIR, "README.md"), "utf8");
  const m = /```\n(Once upon a time[\s\S]*?)\n```/.exec(readme);
  if (!m) throw new Error("reference output not found in the stories260K README");
  return m[1]!;
}
