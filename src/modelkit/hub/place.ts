// Where a pull works and how its result appears. Files land in a hidden staging folder of the
// models directory (the server's scan skips names starting with "."), on the same filesystem so
// that placing the finished model is a rename: it appears complete or not at all.
import { closeSync, existsSync, linkSync, copyFileSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, rmSync, statSync, unlinkSync, writeSync } from "node:fs";
import { dirname, join, relative, sep } from "node:path";
import { PullError } from "./errors.ts";

/** The hidden folder of the models directory where pulls stage their files. */
export const STAGING_FOLDER = ".sluice-pull";

/** Files whose presence makes a folder a model directory (as the server's discovery reads it). */
const MARKERS = ["config.json", "genai_config.json", "sluice.json"];

export const stagingKey = (id: string) => id.replaceAll("/", "--");

export function stagingDir(modelsDir: string, id: string): string {
  return join(modelsDir, STAGING_FOLDER, stagingKey(id));
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as { code?: string }).code === "EPERM";
  }
}

/**
 * One pull per model id at a time, across processes (the CLI and a server's admin page): a lock
 * file holding the pid. A lock whose process is gone is taken over.
 */
export function lockPull(modelsDir: string, id: string): () => void {
  const root = join(modelsDir, STAGING_FOLDER);
  mkdirSync(root, { recursive: true });
  const path = join(root, `${stagingKey(id)}.lock`);
  for (let tries = 0; tries < 2; tries++) {
    try {
      const fd = openSync(path, "wx");
      writeSync(fd, String(process.pid));
      closeSync(fd);
      return () => rmSync(path, { force: true });
    } catch (e) {
      if ((e as { code?: string }).code !== "EEXIST") throw e;
      const pid = Number(readFileSync(path, "utf8").trim());
      if (Number.isInteger(pid) && pid > 0 && alive(pid)) {
        throw new PullError("busy", `another pull of ${id} is running (process ${pid}); wait for it to finish`);
      }
      rmSync(path, { force: true });
    }
  }
  throw new PullError("busy", `cannot take the pull lock ${path}`);
}

/** The model directory for an id, refusing an id that would nest inside another model's directory. */
export function targetDir(modelsDir: string, id: string): string {
  const target = join(modelsDir, ...id.split("/"));
  for (let d = dirname(target); d.length > modelsDir.length && d.startsWith(modelsDir); d = dirname(d)) {
    if (MARKERS.some((m) => existsSync(join(d, m)))) {
      throw new PullError("usage", `${relative(modelsDir, d)} under ${modelsDir} is a model directory, so a model inside it (${id}) would not be found; choose another --id`);
    }
  }
  return target;
}

/** Every file below dir, as paths relative to it. */
export function filesBelow(dir: string): string[] {
  if (!existsSync(dir)) return [];
  const out: string[] = [];
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else out.push(relative(dir, p).split(sep).join("/"));
    }
  };
  walk(dir);
  return out;
}

/** A hard link when the filesystem allows it (no copy of gigabytes), else a copy. */
export function linkOrCopy(from: string, to: string): void {
  mkdirSync(dirname(to), { recursive: true });
  if (existsSync(to)) unlinkSync(to);
  try {
    linkSync(from, to);
  } catch {
    copyFileSync(from, to);
  }
}

/**
 * Puts the staged directory at `target`. Files of an earlier model there that this pull did not
 * bring (another dtype's graphs) are kept, so one directory can hold several dtypes and its card
 * says which is served. The old directory is swapped out by renames, never edited in place.
 */
export function placeModel(staging: string, target: string, scratch: string): void {
  const staged = new Set(filesBelow(staging));
  if (existsSync(target)) {
    if (!statSync(target).isDirectory()) throw new PullError("usage", `${target} exists and is not a directory`);
    for (const f of filesBelow(target)) if (!staged.has(f)) linkOrCopy(join(target, f), join(staging, f));
  }
  mkdirSync(dirname(target), { recursive: true });
  const old = `${scratch}.old-${process.pid}`;
  rmSync(old, { recursive: true, force: true });
  if (existsSync(target)) renameSync(target, old);
  try {
    renameSync(staging, target);
  } catch (e) {
    if (existsSync(old)) renameSync(old, target);
    throw e;
  }
  rmSync(old, { recursive: true, force: true });
}
