// Unpacks the embedded native files into a versioned, checksummed directory of the cache, once;
// later starts only check a marker and the sizes, so they stay fast.
import { closeSync, existsSync, fsyncSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, statSync, writeSync } from "node:fs";
import { join } from "node:path";
import { cacheDirFailure, CacheDirError } from "./cache-dir.ts";
import type { NativeManifest } from "./native-files.ts";

const MARKER = ".sluice-unpacked.json";

export function sha256Hex(bytes: Uint8Array): string {
  return new Bun.CryptoHasher("sha256").update(bytes).digest("hex");
}

/** The directory a manifest unpacks into: versioned by Sluice's version and the files' hashes. */
export function nativeDirFor(cacheDir: string, version: string, manifest: NativeManifest): string {
  return join(cacheDir, "native", `${version}-linux-x64-${manifest.id.slice(0, 16)}`);
}

function markerMatches(dir: string, manifest: NativeManifest): boolean {
  try {
    const marker = JSON.parse(readFileSync(join(dir, MARKER), "utf8")) as NativeManifest;
    if (marker.id !== manifest.id) return false;
    return manifest.files.every((f) => statSync(join(dir, f.name)).size === f.size);
  } catch {
    return false;
  }
}

function writeFileDurably(path: string, bytes: Uint8Array, mode: number) {
  const fd = openSync(path, "w", mode);
  try {
    let off = 0;
    while (off < bytes.length) off += writeSync(fd, bytes, off, bytes.length - off);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

export interface UnpackResult {
  dir: string;
  /** True when this call wrote the files (the first start of this build). */
  unpacked: boolean;
}

/**
 * Ensures `dir` holds the manifest's files with their recorded checksums. Files are written into a
 * sibling temporary directory and renamed into place, so a crash or a concurrent start never
 * leaves a half-written library where the loader would pick it up.
 */
export function ensureUnpacked(dir: string, manifest: NativeManifest, read: (embedded: string) => Uint8Array = (p) => readFileSync(p)): UnpackResult {
  if (markerMatches(dir, manifest)) return { dir, unpacked: false };
  const parent = join(dir, "..");
  const tmp = `${dir}.tmp-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
  try {
    mkdirSync(parent, { recursive: true });
    rmSync(tmp, { recursive: true, force: true });
    mkdirSync(tmp, { recursive: true });
  } catch (e) {
    throw cacheDirFailure(parent, "create a directory for the native libraries", e);
  }
  try {
    for (const f of manifest.files) {
      const bytes = read(f.embedded);
      const sum = sha256Hex(bytes);
      if (sum !== f.sha256 || bytes.length !== f.size) {
        // The binary itself is damaged: no setting fixes that, so say so plainly.
        throw new Error(`the embedded ${f.name} is corrupt (sha256 ${sum}, expected ${f.sha256}); download the binary again`);
      }
      try {
        writeFileDurably(join(tmp, f.name), bytes, 0o755);
      } catch (e) {
        throw cacheDirFailure(parent, `write ${f.name}`, e);
      }
    }
    try {
      writeFileDurably(join(tmp, MARKER), new TextEncoder().encode(JSON.stringify(manifest, null, 1)), 0o644);
    } catch (e) {
      throw cacheDirFailure(parent, "write the unpack marker", e);
    }
    if (existsSync(dir)) {
      // Another start won the race, or an old partial directory is in the way.
      if (markerMatches(dir, manifest)) return { dir, unpacked: false };
      rmSync(dir, { recursive: true, force: true });
    }
    try {
      renameSync(tmp, dir);
    } catch (e) {
      if (markerMatches(dir, manifest)) return { dir, unpacked: false };
      throw cacheDirFailure(parent, "move the unpacked libraries into place", e);
    }
    return { dir, unpacked: true };
  } catch (e) {
    rmSync(tmp, { recursive: true, force: true });
    if (e instanceof CacheDirError) throw e;
    throw e;
  }
}

export interface VerifyResult {
  name: string;
  ok: boolean;
  detail: string;
}

/** Recomputes every unpacked file's checksum (doctor's full check; starts only compare sizes). */
export function verifyUnpacked(dir: string, manifest: NativeManifest): VerifyResult[] {
  return manifest.files.map((f) => {
    const path = join(dir, f.name);
    if (!existsSync(path)) return { name: f.name, ok: false, detail: "missing" };
    const sum = sha256Hex(readFileSync(path));
    return sum === f.sha256 ? { name: f.name, ok: true, detail: `sha256 ${sum.slice(0, 16)}…` } : { name: f.name, ok: false, detail: `sha256 mismatch (${sum.slice(0, 16)}…)` };
  });
}
