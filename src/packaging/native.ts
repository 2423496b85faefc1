// The running process's view of its native parts: in the compiled binary, the embedded manifest
// (registered by embedded.ts) unpacked into the cache; in development, nothing (node_modules is used).
import { CACHE_DIR_ENV, CUDA_LIB_DIR_ENV, resolveCacheDir } from "./cache-dir.ts";
import type { NativeManifest } from "./native-files.ts";
import { ensureUnpacked, nativeDirFor } from "./unpack.ts";
import { VERSION } from "../version.ts";

interface Embedded {
  manifest: NativeManifest;
  workerUrl: string;
}

let embedded: Embedded | null = null;
let unpackedDir: string | null = null;
let unpackedNow = false;

/** Called once per thread by the binary's entry points; never in development. */
export function registerEmbeddedNative(manifest: NativeManifest, workerUrl: string): void {
  embedded = { manifest, workerUrl };
}

export function isPackaged(): boolean {
  return embedded !== null;
}

export function embeddedManifest(): NativeManifest | null {
  return embedded?.manifest ?? null;
}

/** The model worker's entry inside the binary; undefined in development (host.ts's default). */
export function packagedWorkerUrl(): string | undefined {
  return embedded?.workerUrl;
}

export interface NativeSettings {
  cacheDir?: string;
  cudaLibDir?: string;
}

/**
 * Records the command-line settings in the environment: model workers are separate threads that
 * read the same variables, so a flag and its variable mean the same thing everywhere.
 */
export function configureNative(s: NativeSettings): void {
  if (s.cacheDir) process.env[CACHE_DIR_ENV] = s.cacheDir;
  if (s.cudaLibDir) process.env[CUDA_LIB_DIR_ENV] = s.cudaLibDir;
}

/** The directory the binary's native files are loaded from (unpacking them on first use); null in development. */
export function nativeDir(): string | null {
  if (!embedded) return null;
  if (unpackedDir) return unpackedDir;
  const cache = resolveCacheDir(process.env);
  const r = ensureUnpacked(nativeDirFor(cache.dir, VERSION, embedded.manifest), embedded.manifest);
  unpackedDir = r.dir;
  unpackedNow = r.unpacked;
  return unpackedDir;
}

/** Whether this process wrote the native files (the first start of this build on this machine). */
export function unpackedThisStart(): boolean {
  return unpackedNow;
}

/** Absolute path of one unpacked native file; used by the loaders the build substitutes. */
export function nativeFilePath(name: string): string {
  const dir = nativeDir();
  if (!dir) throw new Error(`native file ${name} requested outside the compiled binary`);
  return `${dir}/${name}`;
}
