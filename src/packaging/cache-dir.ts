// Where Sluice keeps what it unpacks or generates outside the data directory: the native
// libraries of the compiled binary and, optionally, CUDA libraries an operator drops there.
import { homedir, tmpdir, userInfo } from "node:os";
import { join, resolve } from "node:path";

export const CACHE_DIR_ENV = "SLUICE_CACHE_DIR";
export const CUDA_LIB_DIR_ENV = "SLUICE_CUDA_LIB_DIR";

/** A cache directory that cannot be used; the message names the setting that changes it. */
export class CacheDirError extends Error {}

export interface CacheDirSource {
  dir: string;
  /** How it was chosen, for doctor: "--cache-dir", "SLUICE_CACHE_DIR", "XDG_CACHE_HOME" or "default". */
  from: string;
}

/** The cache directory: the explicit setting, else the XDG cache, else ~/.cache/sluice. */
export function resolveCacheDir(env: Record<string, string | undefined> = process.env, flag?: string): CacheDirSource {
  if (flag) return { dir: resolve(flag), from: "--cache-dir" };
  if (env[CACHE_DIR_ENV]) return { dir: resolve(env[CACHE_DIR_ENV]!), from: CACHE_DIR_ENV };
  if (env.XDG_CACHE_HOME) return { dir: join(resolve(env.XDG_CACHE_HOME), "sluice"), from: "XDG_CACHE_HOME" };
  let home = env.HOME;
  if (!home) {
    try {
      home = homedir();
    } catch {
      home = "";
    }
  }
  // Without a home (some service accounts), a per-user directory under the temp dir still works.
  if (!home) return { dir: join(tmpdir(), `sluice-cache-${userInfo().uid}`), from: "default" };
  return { dir: join(home, ".cache", "sluice"), from: "default" };
}

/** One sentence explaining a filesystem failure under the cache directory, naming the setting. */
export function cacheDirFailure(dir: string, action: string, e: unknown): CacheDirError {
  const code = (e as NodeJS.ErrnoException)?.code ?? "";
  const why =
    code === "EROFS"
      ? "the file system is read-only"
      : code === "EACCES" || code === "EPERM"
        ? "permission denied"
        : code === "ENOSPC" || code === "EDQUOT"
          ? "no space left on the device"
          : code === "ENOTDIR" || code === "EEXIST"
            ? "a file is in the way of the directory"
            : ((e as Error)?.message ?? String(e));
  return new CacheDirError(
    `cannot ${action} in the cache directory ${dir}: ${why}. ` +
      `Set --cache-dir or ${CACHE_DIR_ENV} to a writable directory with about 100 MB free.`,
  );
}
