// How the operator runs this installation, so that every command Sluice prints (the server's
// hints, --help, error messages, the workspace's notes) can be copied and run as printed: the
// checkout's launcher (`./sluice`, which says how it was called in SLUICE_LAUNCHER), or the
// binary under whatever name or path it was started with.
import { existsSync, realpathSync } from "node:fs";
import { basename, isAbsolute, relative, resolve } from "node:path";

/** Set by the checkout's `sluice` launcher to the path it was called by ($0). */
export const LAUNCHER_ENV = "SLUICE_LAUNCHER";

const SAFE = /^[A-Za-z0-9_@%+=:,./-]+$/;

/** One word for a POSIX shell: as it is when nothing in it is special, else single-quoted. */
export function shellQuote(word: string): string {
  return SAFE.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`;
}

function real(path: string): string | null {
  try {
    return realpathSync(path);
  } catch {
    return null;
  }
}

/** The launcher at the checkout's root, when this file runs from a checkout rather than the binary. */
const checkoutLauncher = () => resolve(import.meta.dir, "..", "sluice");

/**
 * A way to name `file` that runs it from `cwd`: its bare name when PATH finds this same file under
 * it, else `./…` when it is below `cwd`, else the relative path it was typed as (`../sluice`),
 * else the absolute path.
 */
export function displayCommand(file: string, typed: string | null, cwd: string, path: string | undefined): string {
  const target = real(file) ?? resolve(cwd, file);
  const onPath = (name: string) => {
    const found = Bun.which(name, { PATH: path ?? "", cwd });
    return found !== null && real(found) === target;
  };
  if (typed && !typed.includes("/") && onPath(typed)) return typed;
  if (onPath(basename(file))) return basename(file);
  const leads = typed !== null && typed.includes("/") && real(resolve(cwd, typed)) === target;
  const absolute = leads ? resolve(cwd, typed) : resolve(cwd, file);
  const rel = relative(cwd, absolute);
  if (rel && !rel.startsWith("..") && !isAbsolute(rel)) return `./${rel}`;
  return leads && !isAbsolute(typed) ? typed : absolute;
}

let cached: string | null = null;

/** This installation's command as the operator would type it here, shell-quoted (e.g. `./sluice`, `sluice`, `/opt/sluice/sluice`). */
export function commandName(): string {
  if (cached !== null) return cached;
  const cwd = process.cwd();
  const launcher = process.env[LAUNCHER_ENV];
  let name: string;
  if (launcher) name = displayCommand(launcher, launcher, cwd, process.env.PATH);
  // In the compiled binary the entry point lives in Bun's embedded file system.
  else if (Bun.main.startsWith("/$bunfs/") || import.meta.dir.startsWith("/$bunfs/")) {
    name = displayCommand(process.execPath, process.argv0, cwd, process.env.PATH);
  } else {
    const file = checkoutLauncher();
    name = existsSync(file) ? displayCommand(file, null, cwd, process.env.PATH) : "sluice";
  }
  cached = shellQuote(name);
  return cached;
}

/** A whole command line for this installation: `commandName()` then the words, quoted where needed. */
export function commandLine(...words: string[]): string {
  return [commandName(), ...words.map(shellQuote)].join(" ");
}
