// The cache directory the binary unpacks its native libraries into: where it is, that unpacking
// is checksummed, versioned and idempotent, and that an unusable directory gives an error naming
// the setting that fixes it.
import { afterEach, describe, expect, test } from "bun:test";
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { cacheDirFailure, CacheDirError, resolveCacheDir } from "../../src/packaging/cache-dir.ts";
import type { NativeManifest } from "../../src/packaging/native-files.ts";
import { ensureUnpacked, nativeDirFor, sha256Hex, verifyUnpacked } from "../../src/packaging/unpack.ts";
import { tempDir } from "../helpers/paths.ts";

const dirs: { remove(): void }[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) d.remove();
});

/** Source files standing in for the embedded ones, and their manifest. */
function fixture(contents: Record<string, string>): { root: string; manifest: NativeManifest } {
  const d = tempDir("sluice-unpack-");
  dirs.push(d);
  mkdirSync(join(d.path, "embedded"));
  const files = Object.entries(contents).map(([name, text]) => {
    const path = join(d.path, "embedded", name);
    writeFileSync(path, text);
    const bytes = new TextEncoder().encode(text);
    return { name, embedded: path, sha256: sha256Hex(bytes), size: bytes.length };
  });
  return { root: d.path, manifest: { id: sha256Hex(new TextEncoder().encode(JSON.stringify(files))), files } };
}

describe("resolveCacheDir", () => {
  test("flag, then SLUICE_CACHE_DIR, then XDG_CACHE_HOME, then ~/.cache", () => {
    expect(resolveCacheDir({ SLUICE_CACHE_DIR: "/a" }, "/flag")).toEqual({ dir: "/flag", from: "--cache-dir" });
    expect(resolveCacheDir({ SLUICE_CACHE_DIR: "/a", XDG_CACHE_HOME: "/x" })).toEqual({ dir: "/a", from: "SLUICE_CACHE_DIR" });
    expect(resolveCacheDir({ XDG_CACHE_HOME: "/x", HOME: "/h" })).toEqual({ dir: "/x/sluice", from: "XDG_CACHE_HOME" });
    expect(resolveCacheDir({ HOME: "/h" })).toEqual({ dir: "/h/.cache/sluice", from: "default" });
  });
});

describe("ensureUnpacked", () => {
  test("writes every file with its checksum once; a later start only checks the marker", () => {
    const f = fixture({ "liba.so.1": "library a", "addon.node": "addon" });
    const dir = nativeDirFor(join(f.root, "cache"), "9.9.9", f.manifest);
    expect(dir).toContain(join("cache", "native", "9.9.9-linux-x64-"));
    const first = ensureUnpacked(dir, f.manifest);
    expect(first).toEqual({ dir, unpacked: true });
    expect(readFileSync(join(dir, "liba.so.1"), "utf8")).toBe("library a");
    expect(verifyUnpacked(dir, f.manifest).every((v) => v.ok)).toBe(true);
    let reads = 0;
    const second = ensureUnpacked(dir, f.manifest, (p) => {
      reads++;
      return readFileSync(p);
    });
    expect(second.unpacked).toBe(false);
    expect(reads).toBe(0);
    // No temporary directories are left beside it.
    expect(readdirSync(join(dir, "..")).filter((n) => n.includes(".tmp-"))).toEqual([]);
  });

  test("a damaged unpacked file (wrong size) is unpacked again; doctor's verify catches same-size damage", () => {
    const f = fixture({ "liba.so.1": "library a" });
    const dir = nativeDirFor(join(f.root, "cache"), "1.0.0", f.manifest);
    ensureUnpacked(dir, f.manifest);
    writeFileSync(join(dir, "liba.so.1"), "short");
    expect(ensureUnpacked(dir, f.manifest).unpacked).toBe(true);
    expect(readFileSync(join(dir, "liba.so.1"), "utf8")).toBe("library a");
    writeFileSync(join(dir, "liba.so.1"), "library b");
    expect(verifyUnpacked(dir, f.manifest)).toEqual([{ name: "liba.so.1", ok: false, detail: expect.stringContaining("sha256 mismatch") }]);
  });

  test("an embedded file that does not match its recorded checksum is refused", () => {
    const f = fixture({ "liba.so.1": "library a" });
    writeFileSync(f.manifest.files[0]!.embedded, "library X");
    const dir = nativeDirFor(join(f.root, "cache"), "1.0.0", f.manifest);
    expect(() => ensureUnpacked(dir, f.manifest)).toThrow(/embedded liba\.so\.1 is corrupt/);
    expect(existsSync(dir)).toBe(false);
  });

  test("a different build gets a different directory", () => {
    const a = fixture({ "liba.so.1": "one" });
    const b = fixture({ "liba.so.1": "two" });
    expect(nativeDirFor("/c", "1.0.0", a.manifest)).not.toBe(nativeDirFor("/c", "1.0.0", b.manifest));
  });
});

describe("an unusable cache directory", () => {
  function failure(cacheDir: string, manifest: NativeManifest): CacheDirError {
    try {
      ensureUnpacked(nativeDirFor(cacheDir, "1.0.0", manifest), manifest);
    } catch (e) {
      if (e instanceof CacheDirError) return e;
      throw e;
    }
    throw new Error("unpacking did not fail");
  }

  test("a file in the way: the error names the directory and the setting", () => {
    const f = fixture({ "liba.so.1": "a" });
    writeFileSync(join(f.root, "blocker"), "");
    const e = failure(join(f.root, "blocker", "cache"), f.manifest);
    expect(e.message).toContain(join(f.root, "blocker", "cache"));
    expect(e.message).toContain("--cache-dir");
    expect(e.message).toContain("SLUICE_CACHE_DIR");
  });

  test("a directory that cannot be written (sysfs refuses even root)", () => {
    const f = fixture({ "liba.so.1": "a" });
    const e = failure("/sys/sluice-cache-test", f.manifest);
    expect(e.message).toMatch(/cannot create a directory for the native libraries in the cache directory \/sys\/sluice-cache-test\/native: (permission denied|the file system is read-only)/);
    expect(e.message).toContain("Set --cache-dir or SLUICE_CACHE_DIR to a writable directory");
  });

  test.skipIf(process.getuid?.() === 0)("a read-only directory (as a non-root user)", () => {
    const f = fixture({ "liba.so.1": "a" });
    const ro = join(f.root, "ro");
    mkdirSync(ro);
    chmodSync(ro, 0o555);
    try {
      expect(failure(ro, f.manifest).message).toContain("permission denied");
    } finally {
      chmodSync(ro, 0o755);
    }
  });

  test("each errno reads as a reason an operator understands", () => {
    const err = (code: string) => Object.assign(new Error(code), { code });
    expect(cacheDirFailure("/d", "write x", err("ENOSPC")).message).toBe(
      "cannot write x in the cache directory /d: no space left on the device. Set --cache-dir or SLUICE_CACHE_DIR to a writable directory with about 100 MB free.",
    );
    expect(cacheDirFailure("/d", "write x", err("EROFS")).message).toContain("the file system is read-only");
    expect(cacheDirFailure("/d", "write x", err("EDQUOT")).message).toContain("no space left");
  });
});
